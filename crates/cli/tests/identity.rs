//! Who a client is and what it may do, as kubectl asks: ServiceAccount
//! tokens (`kubectl create token`), `kubectl auth whoami`, `auth can-i`,
//! TokenReview; and the built-in kinds a 1.32 cluster serves
//! (`kubectl api-resources`, kubectl's generators for them).

mod common;

use std::time::Duration;

use common::{Server, assert_has, wait_for};
use serde_json::Value;

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).to_string()
}

#[test]
fn service_account_tokens_authenticate_and_are_reviewed() {
    let s = Server::start();
    s.ok(&["create", "serviceaccount", "robot"]);
    let token = s.ok(&["create", "token", "robot", "--duration=20m"]);
    let token = token.trim();
    assert_eq!(token.matches('.').count(), 2, "a JWT: {token}");

    // The token is a credential of its own.
    let as_robot = |args: &[&str]| s.kubectl(&[&["--token", token][..], args].concat());
    let out = as_robot(&[
        "auth",
        "whoami",
        "-o",
        "jsonpath={.status.userInfo.username}",
    ]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "system:serviceaccount:default:robot",
        "{}",
        stderr(&out)
    );
    // It may do what its bindings give, and nothing else.
    let out = as_robot(&["get", "configmaps"]);
    assert_has(
        &stderr(&out),
        &[r#"User "system:serviceaccount:default:robot" cannot list resource "configmaps""#],
    );
    s.ok(&[
        "create",
        "rolebinding",
        "robot-view",
        "--clusterrole=view",
        "--serviceaccount=default:robot",
    ]);
    assert!(as_robot(&["get", "configmaps"]).status.success());

    // TokenReview says who it is.
    let review = s.ok_stdin(
        &["create", "-o", "json", "-f", "-"],
        &format!(
            "apiVersion: authentication.k8s.io/v1\nkind: TokenReview\nspec:\n  token: {token}\n"
        ),
    );
    let review: Value = serde_json::from_str(&review).unwrap();
    assert_eq!(review["status"]["authenticated"], true, "{review}");
    assert_eq!(
        review["status"]["user"]["username"],
        "system:serviceaccount:default:robot"
    );
    assert!(
        review["status"]["user"]["groups"]
            .as_array()
            .unwrap()
            .contains(&"system:serviceaccounts:default".into())
    );
    let bad = s.ok_stdin(
        &["create", "-o", "json", "-f", "-"],
        "apiVersion: authentication.k8s.io/v1\nkind: TokenReview\nspec:\n  token: not.a.token\n",
    );
    assert_eq!(
        serde_json::from_str::<Value>(&bad).unwrap()["status"]["authenticated"],
        false
    );

    // Too short a duration: upstream's 422.
    let out = s.kubectl(&["create", "token", "robot", "--duration=1m"]);
    assert!(!out.status.success());
    assert_has(
        &stderr(&out),
        &["may not specify a duration less than 10 minutes"],
    );
    // A token of a ServiceAccount that is gone no longer works, even if
    // one of the same name comes back.
    s.ok(&["delete", "serviceaccount", "robot"]);
    s.ok(&["create", "serviceaccount", "robot"]);
    let out = as_robot(&["get", "configmaps"]);
    assert!(!out.status.success());
    assert_has(&stderr(&out), &["Unauthorized"]);
    // A ServiceAccount that does not exist has no token.
    let out = s.kubectl(&["create", "token", "nobody"]);
    assert_has(&stderr(&out), &["serviceaccounts \"nobody\" not found"]);
}

/// A Secret of type `kubernetes.io/service-account-token`, as the
/// Kubernetes docs make one by hand (and `karmadactl join` does), is
/// filled by the tokens controller: the token works until the Secret or
/// its account goes.
#[test]
fn service_account_token_secrets_are_filled_as_kube_controller_manager_does() {
    let s = Server::start();
    s.ok(&["create", "serviceaccount", "build-robot"]);
    s.ok_stdin(
        &["apply", "-f", "-"],
        r#"
apiVersion: v1
kind: Secret
metadata:
  name: build-robot-secret
  annotations:
    kubernetes.io/service-account.name: build-robot
type: kubernetes.io/service-account-token
"#,
    );
    let field = |path: &str| {
        s.ok(&[
            "get",
            "secret",
            "build-robot-secret",
            "-o",
            &format!("jsonpath={path}"),
        ])
    };
    wait_for(Duration::from_secs(30), "the token filled in", || {
        !field("{.data.token}").is_empty()
    });
    let decode = |b64: String| {
        use base64::Engine as _;
        String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(b64.trim())
                .unwrap(),
        )
        .unwrap()
    };
    assert_eq!(decode(field("{.data.namespace}")), "default");
    assert!(decode(field(r"{.data.ca\.crt}")).contains("BEGIN CERTIFICATE"));
    assert_eq!(
        field(r"{.metadata.annotations.kubernetes\.io/service-account\.uid}"),
        s.ok(&[
            "get",
            "serviceaccount",
            "build-robot",
            "-o",
            "jsonpath={.metadata.uid}"
        ])
    );
    assert_has(
        &s.ok(&["describe", "secret", "build-robot-secret"]),
        &["kubernetes.io/service-account-token", "token:"],
    );
    let token = decode(field("{.data.token}"));
    let whoami = |token: &str| {
        s.kubectl(&[
            "--token",
            token,
            "auth",
            "whoami",
            "-o",
            "jsonpath={.status.userInfo.username}",
        ])
    };
    assert_eq!(
        String::from_utf8_lossy(&whoami(&token).stdout),
        "system:serviceaccount:default:build-robot"
    );
    // Deleting the Secret ends the token.
    s.ok(&["delete", "secret", "build-robot-secret"]);
    assert_has(&stderr(&whoami(&token)), &["Unauthorized"]);
    // A filled Secret whose account is deleted goes with it.
    s.ok_stdin(
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: again\n  annotations: {kubernetes.io/service-account.name: build-robot}\ntype: kubernetes.io/service-account-token\n",
    );
    wait_for(Duration::from_secs(30), "the second token", || {
        !s.ok(&["get", "secret", "again", "-o", "jsonpath={.data.token}"])
            .is_empty()
    });
    s.ok(&["delete", "serviceaccount", "build-robot"]);
    wait_for(
        Duration::from_secs(30),
        "the Secret of a gone account deleted",
        || !s.kubectl(&["get", "secret", "again"]).status.success(),
    );
    // Other Secrets are defaulted as upstream's: no type is Opaque.
    s.ok(&["create", "secret", "generic", "plain", "--from-literal=a=b"]);
    s.ok_stdin(
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: Secret\nmetadata: {name: untyped}\ndata: {a: Yg==}\n",
    );
    assert_eq!(
        s.ok(&["get", "secret", "untyped", "-o", "jsonpath={.type}"]),
        "Opaque"
    );
}

#[test]
fn auth_can_i_and_whoami_answer_from_the_server() {
    let s = Server::start();
    assert_eq!(
        s.ok(&["auth", "can-i", "create", "deployments"]).trim(),
        "yes"
    );
    assert_eq!(
        s.ok(&[
            "auth",
            "can-i",
            "get",
            "pods",
            "--subresource=log",
            "-n",
            "kube-system"
        ])
        .trim(),
        "yes"
    );
    assert_has(&s.ok(&["auth", "can-i", "--list"]), &["*.*"]);
    assert_has(
        &s.ok(&["auth", "whoami"]),
        &["flotilla-admin", "system:masters"],
    );
    // Reviews are questions: nothing to list.
    let out = s.kubectl(&["get", "selfsubjectaccessreviews"]);
    assert!(!out.status.success());
    assert_has(&stderr(&out), &["MethodNotAllowed"]);
}

#[test]
fn the_built_in_kinds_of_a_1_32_cluster_are_served() {
    let s = Server::start();
    let listed = s.ok(&["api-resources", "-o", "name"]);
    let names: Vec<&str> = listed.lines().collect();
    for kind in [
        "roles.rbac.authorization.k8s.io",
        "clusterrolebindings.rbac.authorization.k8s.io",
        "poddisruptionbudgets.policy",
        "horizontalpodautoscalers.autoscaling",
        "networkpolicies.networking.k8s.io",
        "ingressclasses.networking.k8s.io",
        "storageclasses.storage.k8s.io",
        "priorityclasses.scheduling.k8s.io",
        "runtimeclasses.node.k8s.io",
        "certificatesigningrequests.certificates.k8s.io",
        "validatingwebhookconfigurations.admissionregistration.k8s.io",
        "validatingadmissionpolicies.admissionregistration.k8s.io",
        "apiservices.apiregistration.k8s.io",
        "flowschemas.flowcontrol.apiserver.k8s.io",
        "tokenreviews.authentication.k8s.io",
        "selfsubjectaccessreviews.authorization.k8s.io",
        "controllerrevisions.apps",
        "resourcequotas",
        "limitranges",
        "podtemplates",
        "bindings",
        "componentstatuses",
    ] {
        assert!(
            names.contains(&kind),
            "{kind} not in api-resources:\n{listed}"
        );
    }
    assert!(names.len() >= 50, "{} kinds:\n{listed}", names.len());

    // An APIService per served group-version, local and Available.
    wait_for(Duration::from_secs(20), "the APIServices", || {
        s.kubectl(&["get", "apiservice", "v1.apps", "v2.autoscaling", "v1."])
            .status
            .success()
    });
    assert_eq!(
        s.ok(&[
            "get",
            "apiservice",
            "v1.apps",
            "-o",
            "jsonpath={.spec.group} {.status.conditions[0].type}={.status.conditions[0].status}"
        ]),
        "apps Available=True"
    );
    // events.k8s.io Events are core Events, their fields renamed.
    s.ok_stdin(
        &["create", "-f", "-"],
        "apiVersion: v1\nkind: Event\nmetadata: {name: e1}\ninvolvedObject: {kind: Pod, name: placed, namespace: default}\nreason: Tested\nmessage: hello\ntype: Normal\ncount: 2\n",
    );
    assert_eq!(
        s.ok(&[
            "get",
            "events.v1.events.k8s.io",
            "e1",
            "-o",
            "jsonpath={.regarding.name} {.note} {.deprecatedCount}"
        ]),
        "placed hello 2"
    );
    s.ok_stdin(
        &["create", "-f", "-"],
        "apiVersion: events.k8s.io/v1\nkind: Event\nmetadata: {name: e2}\neventTime: '2026-01-01T00:00:00.000000Z'\nreportingController: test\nreportingInstance: test-1\naction: Testing\nreason: Tested\nregarding: {kind: Pod, name: placed, namespace: default}\nnote: from events.k8s.io\ntype: Normal\n",
    );
    assert_eq!(
        s.ok(&[
            "get",
            "events",
            "e2",
            "-o",
            "jsonpath={.involvedObject.name} {.message} {.reportingComponent}"
        ]),
        "placed from events.k8s.io test"
    );
    // Component statuses, computed when asked.
    assert_has(
        &s.ok(&["get", "componentstatuses"]),
        &["etcd-0", "Healthy", "scheduler", "controller-manager"],
    );
    // A Binding places a pod, as its `/binding` subresource does.
    s.ok(&["run", "placed", "--image=nginx"]);
    s.ok_stdin(
        &["create", "-f", "-"],
        "apiVersion: v1\nkind: Binding\nmetadata: {name: placed}\ntarget: {kind: Node, name: node-1}\n",
    );
    assert_eq!(
        s.ok(&["get", "pod", "placed", "-o", "jsonpath={.spec.nodeName}"]),
        "node-1"
    );
    // The two system priority classes every cluster has.
    assert_has(
        &s.ok(&["get", "priorityclasses"]),
        &["system-cluster-critical", "system-node-critical"],
    );
    // kubectl's generators for them, over protobuf.
    s.ok(&[
        "create",
        "role",
        "pod-reader",
        "--verb=get,list",
        "--resource=pods",
    ]);
    s.ok(&[
        "create",
        "rolebinding",
        "read-pods",
        "--role=pod-reader",
        "--user=jane",
    ]);
    s.ok(&[
        "create",
        "clusterrole",
        "reader",
        "--verb=get",
        "--resource=configmaps",
    ]);
    s.ok(&[
        "create",
        "clusterrolebinding",
        "readers",
        "--clusterrole=reader",
        "--group=devs",
    ]);
    s.ok(&[
        "create",
        "priorityclass",
        "high",
        "--value=1000",
        "--description=important",
    ]);
    s.ok(&[
        "create",
        "poddisruptionbudget",
        "pdb",
        "--selector=app=web",
        "--min-available=1",
    ]);
    s.ok(&["create", "quota", "q", "--hard=pods=5"]);
    assert_eq!(
        s.ok(&[
            "get",
            "role",
            "pod-reader",
            "-o",
            "jsonpath={.rules[0].verbs}"
        ]),
        r#"["get","list"]"#
    );
    assert_eq!(
        s.ok(&[
            "get",
            "rolebinding",
            "read-pods",
            "-o",
            "jsonpath={.subjects[0].name}"
        ]),
        "jane"
    );
    assert_eq!(
        s.ok(&[
            "get",
            "pc",
            "high",
            "-o",
            "jsonpath={.value} {.preemptionPolicy}"
        ]),
        "1000 PreemptLowerPriority",
        "upstream's default"
    );
    // kubectl autoscale writes autoscaling/v1; the HPA reads back at v2
    // (the preferred version) and at v1.
    s.ok(&["create", "deployment", "web", "--image=nginx"]);
    s.ok(&[
        "autoscale",
        "deployment",
        "web",
        "--max=3",
        "--cpu-percent=70",
    ]);
    assert_eq!(
        s.ok(&[
            "get",
            "hpa",
            "web",
            "-o",
            "jsonpath={.apiVersion} {.spec.metrics[0].resource.target.averageUtilization}"
        ]),
        "autoscaling/v2 70"
    );
    assert_eq!(
        s.ok(&[
            "get",
            "horizontalpodautoscalers.v1.autoscaling",
            "web",
            "-o",
            "jsonpath={.apiVersion} {.spec.targetCPUUtilizationPercentage}"
        ]),
        "autoscaling/v1 70"
    );
    // kubectl get shows upstream's columns for them.
    assert_has(
        &s.ok(&["get", "hpa", "web"]),
        &[
            "REFERENCE",
            "Deployment/web",
            "cpu: <unknown>/70%",
            "MAXPODS",
        ],
    );
    assert_has(
        &s.ok(&["get", "apiservice", "v1.apps"]),
        &["SERVICE", "AVAILABLE", "Local", "True"],
    );
    assert_has(
        &s.ok(&["get", "rolebinding", "read-pods", "-o", "wide"]),
        &["Role/pod-reader", "jane"],
    );
    assert_has(&s.ok(&["get", "sa", "default"]), &["SECRETS"]);
    // A bad one is refused against its schema, as upstream.
    let out = s.kubectl_stdin(
        &["apply", "-f", "-"],
        Some("apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: bad}\nvalue: high\n"),
    );
    assert!(!out.status.success());
    wait_for(Duration::from_secs(1), "nothing stored", || {
        !s.kubectl(&["get", "pc", "bad"]).status.success()
    });
}

/// The same clients against the hub (`flotilla controlplane`, whose
/// authorizer chain confines Pull agents): kubectl's generators over
/// protobuf, tokens, reviews and the built-in kinds, beside Karmada's API.
#[test]
fn the_hub_serves_kubectl_as_any_cluster() {
    let s = Server::controlplane(&[]);
    s.ok(&["create", "namespace", "demo"]);
    let n = ["-n", "demo"];
    let run = |args: &[&str]| s.ok(&[&n[..], args].concat());
    run(&["create", "configmap", "c1", "--from-literal=a=b"]);
    run(&["create", "deployment", "d1", "--image=nginx"]);
    run(&["expose", "deployment", "d1", "--port=80"]);
    run(&["create", "role", "reader", "--verb=get", "--resource=pods"]);
    run(&["autoscale", "deployment", "d1", "--max=2"]);
    wait_for(
        Duration::from_secs(20),
        "the default ServiceAccount",
        || {
            s.kubectl(&["-n", "demo", "get", "sa", "default"])
                .status
                .success()
        },
    );
    let token = run(&["create", "token", "default"]);
    let out = s.kubectl(&[
        "--token",
        token.trim(),
        "auth",
        "whoami",
        "-o",
        "jsonpath={.status.userInfo.username}",
    ]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "system:serviceaccount:demo:default"
    );
    assert_eq!(
        run(&["auth", "can-i", "create", "deployments"]).trim(),
        "yes"
    );
    let kinds = s.ok(&["api-resources", "-o", "name"]);
    assert!(
        kinds
            .lines()
            .any(|k| k == "propagationpolicies.policy.karmada.io"),
        "{kinds}"
    );
    assert!(
        kinds
            .lines()
            .any(|k| k == "clusterroles.rbac.authorization.k8s.io"),
        "{kinds}"
    );
    assert_eq!(run(&["get", "pc", "-o", "name"]).lines().count(), 2);
}
