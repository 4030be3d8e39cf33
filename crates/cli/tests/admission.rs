//! Admission as upstream's plugins answer it, through kubectl: LimitRange
//! defaults and bounds, ResourceQuota limits and the quota's status.

mod common;

use std::time::Duration;

use common::{Server, assert_has, wait_for};

fn pod(name: &str, resources: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: q}}\nspec:\n  containers:\n  - name: c\n    image: nginx\n    resources: {resources}\n"
    )
}

#[test]
fn limit_ranges_default_and_bound_and_quotas_refuse_what_exceeds_them() {
    let s = Server::start();
    s.ok(&["create", "namespace", "q"]);
    s.ok(&[
        "-n",
        "q",
        "create",
        "quota",
        "small",
        "--hard=pods=2,requests.cpu=1",
    ]);
    let apply = |yaml: &str| s.kubectl_stdin(&["apply", "-f", "-"], Some(yaml));
    let stderr = |o: &std::process::Output| String::from_utf8_lossy(&o.stderr).to_string();

    // A compute quota needs the pod to say what it requests.
    let out = apply(&pod("bare", "{}"));
    assert!(!out.status.success());
    assert_has(
        &stderr(&out),
        &["pods \"bare\" is forbidden: failed quota: small: must specify requests.cpu"],
    );

    // A LimitRange fills it in, and says so.
    s.ok_stdin(
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: LimitRange\nmetadata: {name: defaults, namespace: q}\nspec:\n  limits:\n  - type: Container\n    default: {cpu: 500m, memory: 256Mi}\n    defaultRequest: {cpu: 250m}\n    max: {cpu: '1'}\n",
    );
    assert!(apply(&pod("p1", "{}")).status.success());
    assert_eq!(
        s.ok(&[
            "-n",
            "q",
            "get",
            "pod",
            "p1",
            "-o",
            "jsonpath={.spec.containers[0].resources.requests.cpu} {.spec.containers[0].resources.limits.memory} {.status.qosClass}"
        ]),
        "250m 256Mi Burstable"
    );
    assert_has(
        &s.ok(&["-n", "q", "get", "pod", "p1", "-o", "yaml"]),
        &["kubernetes.io/limit-ranger: 'LimitRanger plugin set:"],
    );

    // Over the LimitRange's max: refused.
    let out = apply(&pod("big", "{limits: {cpu: '2'}}"));
    assert_has(
        &stderr(&out),
        &["maximum cpu usage per Container is 1, but limit is 2"],
    );

    // The quota's pods: two fit, the third does not.
    assert!(
        apply(&pod("p2", "{requests: {cpu: 500m}}"))
            .status
            .success()
    );
    let out = apply(&pod("p3", "{requests: {cpu: 100m}}"));
    assert!(!out.status.success());
    assert_has(
        &stderr(&out),
        &[
            "exceeded quota: small",
            "requested: pods=1, used: pods=2, limited: pods=2",
        ],
    );
    for refused in ["bare", "big", "p3"] {
        assert!(
            !s.kubectl(&["-n", "q", "get", "pod", refused])
                .status
                .success()
        );
    }
    // A quota raised or removed is read by the very next create.
    s.ok(&[
        "-n",
        "q",
        "patch",
        "quota",
        "small",
        "--type=merge",
        "-p",
        r#"{"spec": {"hard": {"pods": "3"}}}"#,
    ]);
    assert!(
        apply(&pod("p3", "{requests: {cpu: 100m}}"))
            .status
            .success()
    );
    let out = apply(&pod("p4", "{requests: {cpu: 100m}}"));
    assert_has(&stderr(&out), &["used: pods=3, limited: pods=3"]);
    // The quota's status follows.
    wait_for(Duration::from_secs(20), "quota status", || {
        s.ok(&[
            "-n",
            "q",
            "get",
            "quota",
            "small",
            "-o",
            "jsonpath={.status.used.pods} {.status.used.requests\\.cpu}",
        ]) == "3 850m"
    });
    s.ok(&["-n", "q", "delete", "quota", "small"]);
    assert!(
        apply(&pod("p4", "{requests: {cpu: 100m}}"))
            .status
            .success()
    );
}

/// What may not change once set, with upstream's 422s; what may, does.
#[test]
fn immutable_fields_stay_as_they_were() {
    let s = Server::start();
    let patch = |what: &str, body: &str| s.kubectl(&["patch", what, "--type=merge", "-p", body]);
    let refused = |out: std::process::Output, needles: &[&str]| {
        assert!(!out.status.success(), "accepted");
        assert_has(&String::from_utf8_lossy(&out.stderr), needles);
    };
    s.ok_stdin(
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: frozen}\nimmutable: true\ndata: {a: b}\n",
    );
    refused(
        patch("configmap/frozen", r#"{"data":{"a":"c"}}"#),
        &["data: Forbidden: field is immutable when `immutable` is set"],
    );
    refused(
        patch("configmap/frozen", r#"{"immutable":false}"#),
        &["immutable: Forbidden: field is immutable when `immutable` is set"],
    );
    assert!(
        patch("configmap/frozen", r#"{"metadata":{"labels":{"x":"y"}}}"#)
            .status
            .success()
    );

    s.ok(&["create", "secret", "generic", "s1", "--from-literal=a=b"]);
    refused(
        patch("secret/s1", r#"{"type":"kubernetes.io/tls"}"#),
        &["type: Invalid value: \"kubernetes.io/tls\": field is immutable"],
    );

    s.ok(&["create", "deployment", "web", "--image=nginx"]);
    refused(
        patch(
            "deployment/web",
            r#"{"spec":{"selector":{"matchLabels":{"app":"other"}},"template":{"metadata":{"labels":{"app":"other"}}}}}"#,
        ),
        &["spec.selector: Invalid value", "field is immutable"],
    );
    assert!(
        patch("deployment/web", r#"{"spec":{"replicas":3}}"#)
            .status
            .success()
    );

    s.ok(&["run", "p1", "--image=nginx"]);
    refused(
        patch("pod/p1", r#"{"spec":{"restartPolicy":"Never"}}"#),
        &["pod updates may not change fields other than"],
    );
    assert!(
        s.kubectl(&["set", "image", "pod/p1", "p1=nginx:1.27"])
            .status
            .success()
    );
    assert_eq!(
        s.ok(&[
            "get",
            "pod",
            "p1",
            "-o",
            "jsonpath={.spec.containers[0].image} {.spec.restartPolicy}"
        ]),
        "nginx:1.27 Always"
    );
}
