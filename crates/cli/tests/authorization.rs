//! RBAC as a user meets it: a table of (identity, verb, resource,
//! namespace) cases with the answer upstream gives, each checked twice,
//! through a real request made as that identity and through a
//! SubjectAccessReview; escalation attempts; bad impersonation; kubectl as
//! a restricted user.

mod common;

use common::{Server, assert_has};
use http::{Method, Request, StatusCode};
use serde_json::{Value, json};

/// Who asks: a user name and its groups (besides system:authenticated).
struct Identity {
    user: &'static str,
    groups: &'static [&'static str],
}

const ALICE: Identity = Identity {
    user: "alice",
    groups: &[],
};
const BOB: Identity = Identity {
    user: "bob",
    groups: &[],
};
const CAROL: Identity = Identity {
    user: "carol",
    groups: &["auditors"],
};
const DAVE: Identity = Identity {
    user: "dave",
    groups: &[],
};
const ROBOT: Identity = Identity {
    user: "system:serviceaccount:team-a:robot",
    groups: &["system:serviceaccounts", "system:serviceaccounts:team-a"],
};
const EVE: Identity = Identity {
    user: "eve",
    groups: &[],
};
const OPS: Identity = Identity {
    user: "ops",
    groups: &[],
};

/// The verbs of a row, in order.
const VERBS: [&str; 8] = [
    "get",
    "list",
    "watch",
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
];

/// (group, version, plural, namespaced).
type Resource = (&'static str, &'static str, &'static str, bool);
const PODS: Resource = ("", "v1", "pods", true);
const SECRETS: Resource = ("", "v1", "secrets", true);
const CONFIGMAPS: Resource = ("", "v1", "configmaps", true);
const DEPLOYMENTS: Resource = ("apps", "v1", "deployments", true);
const ROLEBINDINGS: Resource = ("rbac.authorization.k8s.io", "v1", "rolebindings", true);
const NODES: Resource = ("", "v1", "nodes", false);
const CLUSTERROLES: Resource = ("rbac.authorization.k8s.io", "v1", "clusterroles", false);

/// One row: an identity, a resource, a namespace (None: cluster scope),
/// the object name get/update/patch/delete use, and the answer for each
/// of [`VERBS`] (`Y` allowed, `n` forbidden).
type Row = (
    &'static Identity,
    Resource,
    Option<&'static str>,
    &'static str,
    &'static str,
);

const ANY: &str = "zz-absent";

#[rustfmt::skip]
const TABLE: &[Row] = &[
    //                                             get list watch create update patch delete deletecollection
    (&ALICE, PODS,         Some("team-a"), ANY, "Y Y Y Y Y Y Y Y"),
    (&ALICE, PODS,         Some("team-b"), ANY, "n n n n n n n n"),
    (&ALICE, SECRETS,      Some("team-a"), ANY, "Y Y Y Y Y Y Y Y"),
    (&ALICE, SECRETS,      Some("team-b"), ANY, "n n n n n n n n"),
    (&ALICE, DEPLOYMENTS,  Some("team-a"), ANY, "Y Y Y Y Y Y Y Y"),
    (&ALICE, ROLEBINDINGS, Some("team-a"), ANY, "Y Y Y Y Y Y Y Y"),
    (&ALICE, ROLEBINDINGS, Some("team-b"), ANY, "n n n n n n n n"),
    (&ALICE, NODES,        None,           ANY, "n n n n n n n n"),
    (&ALICE, CLUSTERROLES, None,           ANY, "n n n n n n n n"),
    // view in team-a, edit in team-b.
    (&BOB,   PODS,         Some("team-a"), ANY, "Y Y Y n n n n n"),
    (&BOB,   SECRETS,      Some("team-a"), ANY, "n n n n n n n n"),
    (&BOB,   DEPLOYMENTS,  Some("team-a"), ANY, "Y Y Y n n n n n"),
    (&BOB,   PODS,         Some("team-b"), ANY, "Y Y Y Y Y Y Y Y"),
    (&BOB,   SECRETS,      Some("team-b"), ANY, "Y Y Y Y Y Y Y Y"),
    (&BOB,   DEPLOYMENTS,  Some("team-b"), ANY, "Y Y Y Y Y Y Y Y"),
    (&BOB,   ROLEBINDINGS, Some("team-b"), ANY, "n n n n n n n n"),
    (&BOB,   CONFIGMAPS,   Some("default"), ANY, "n n n n n n n n"),
    // view everywhere, through a group.
    (&CAROL, PODS,         Some("team-a"), ANY, "Y Y Y n n n n n"),
    (&CAROL, PODS,         Some("default"), ANY, "Y Y Y n n n n n"),
    (&CAROL, CONFIGMAPS,   Some("team-b"), ANY, "Y Y Y n n n n n"),
    (&CAROL, SECRETS,      Some("team-b"), ANY, "n n n n n n n n"),
    (&CAROL, NODES,        None,           ANY, "n n n n n n n n"),
    // One ConfigMap by name, and nothing else.
    (&DAVE,  CONFIGMAPS,   Some("team-a"), "app-config", "Y n n n Y Y n n"),
    (&DAVE,  CONFIGMAPS,   Some("team-a"), ANY,          "n n n n n n n n"),
    (&DAVE,  CONFIGMAPS,   Some("team-b"), "app-config", "n n n n n n n n"),
    // A ServiceAccount with edit in its own namespace.
    (&ROBOT, PODS,         Some("team-a"), ANY, "Y Y Y Y Y Y Y Y"),
    (&ROBOT, CONFIGMAPS,   Some("team-a"), ANY, "Y Y Y Y Y Y Y Y"),
    (&ROBOT, ROLEBINDINGS, Some("team-a"), ANY, "n n n n n n n n"),
    (&ROBOT, PODS,         Some("team-b"), ANY, "n n n n n n n n"),
    // Bound to nothing.
    (&EVE,   PODS,         Some("team-a"), ANY, "n n n n n n n n"),
    (&EVE,   CONFIGMAPS,   Some("default"), ANY, "n n n n n n n n"),
    (&EVE,   NODES,        None,           ANY, "n n n n n n n n"),
    // A ClusterRole for nodes, through a ClusterRoleBinding.
    (&OPS,   NODES,        None,           ANY, "Y Y Y n n n n n"),
    (&OPS,   PODS,         Some("team-a"), ANY, "n n n n n n n n"),
];

/// Applies the roles and bindings the table is about.
fn set_up(s: &Server) {
    s.ok_stdin(
        &["apply", "-f", "-"],
        r#"
apiVersion: v1
kind: Namespace
metadata: {name: team-a}
---
apiVersion: v1
kind: Namespace
metadata: {name: team-b}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: robot, namespace: team-a}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: alice-admin, namespace: team-a}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: admin}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: alice}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: bob-view, namespace: team-a}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: view}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: bob}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: bob-edit, namespace: team-b}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: edit}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: bob}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: auditors-view}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: view}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: Group, name: auditors}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: app-config-editor, namespace: team-a}
rules:
- apiGroups: [""]
  resources: [configmaps]
  resourceNames: [app-config]
  verbs: [get, update, patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: dave-app-config, namespace: team-a}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: app-config-editor}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: dave}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: robot-edit, namespace: team-a}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: edit}
subjects: [{kind: ServiceAccount, name: robot, namespace: team-a}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: node-reader}
rules:
- apiGroups: [""]
  resources: [nodes]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: ops-node-reader}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: node-reader}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: ops}]
"#,
    );
}

/// A minimal valid object of `resource` named `name`.
fn body((group, version, plural, _): Resource, name: &str, namespace: Option<&str>) -> Value {
    let api_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    let mut obj = json!({"apiVersion": api_version, "metadata": {"name": name}});
    if let Some(ns) = namespace {
        obj["metadata"]["namespace"] = json!(ns);
    }
    match plural {
        "pods" => {
            obj["kind"] = json!("Pod");
            obj["spec"] = json!({"containers": [{"name": "c", "image": "busybox"}]});
        }
        "secrets" => obj["kind"] = json!("Secret"),
        "configmaps" => obj["kind"] = json!("ConfigMap"),
        "deployments" => {
            obj["kind"] = json!("Deployment");
            obj["spec"] = json!({"selector": {"matchLabels": {"app": "x"}},
                "template": {"metadata": {"labels": {"app": "x"}},
                             "spec": {"containers": [{"name": "c", "image": "busybox"}]}}});
        }
        "rolebindings" => {
            obj["kind"] = json!("RoleBinding");
            obj["roleRef"] = json!({"apiGroup": "rbac.authorization.k8s.io",
                                    "kind": "ClusterRole", "name": "view"});
        }
        "nodes" => obj["kind"] = json!("Node"),
        "clusterroles" => obj["kind"] = json!("ClusterRole"),
        other => panic!("no body for {other}"),
    }
    obj
}

/// Makes the request `verb` means, as `who` (impersonated by the admin),
/// and says whether it was allowed: anything but 403 (a 404 for an
/// absent object is an allowed request). Writes are dry runs.
async fn allowed_by_request(
    client: &kube::Client,
    who: &Identity,
    verb: &str,
    resource: Resource,
    namespace: Option<&str>,
    name: &str,
) -> bool {
    let (group, version, plural, _) = resource;
    let base = if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    };
    let collection = match namespace {
        Some(ns) => format!("{base}/namespaces/{ns}/{plural}"),
        None => format!("{base}/{plural}"),
    };
    let item = format!("{collection}/{name}");
    let create = body(resource, "zz-created", namespace);
    let update = body(resource, name, namespace);
    let (method, uri, payload, content_type) = match verb {
        "get" => (Method::GET, item, Value::Null, "application/json"),
        "list" => (Method::GET, collection, Value::Null, "application/json"),
        "watch" => (
            Method::GET,
            format!("{collection}?watch=true&timeoutSeconds=1"),
            Value::Null,
            "application/json",
        ),
        "create" => (
            Method::POST,
            format!("{collection}?dryRun=All"),
            create,
            "application/json",
        ),
        "update" => (
            Method::PUT,
            format!("{item}?dryRun=All"),
            update,
            "application/json",
        ),
        "patch" => (
            Method::PATCH,
            format!("{item}?dryRun=All"),
            json!({}),
            "application/merge-patch+json",
        ),
        "delete" => (
            Method::DELETE,
            format!("{item}?dryRun=All"),
            Value::Null,
            "application/json",
        ),
        "deletecollection" => (
            Method::DELETE,
            format!("{collection}?dryRun=All"),
            Value::Null,
            "application/json",
        ),
        other => panic!("no request for {other}"),
    };
    let mut request = Request::builder()
        .method(method)
        .uri(uri)
        .header("Content-Type", content_type)
        .header("Impersonate-User", who.user);
    for group in who.groups {
        request = request.header("Impersonate-Group", *group);
    }
    let payload = if payload.is_null() {
        Vec::new()
    } else {
        serde_json::to_vec(&payload).unwrap()
    };
    let response = client
        .send(request.body(payload.into()).unwrap())
        .await
        .expect("the request is answered");
    let status = response.status();
    assert_ne!(status, StatusCode::UNAUTHORIZED, "{verb} {plural}");
    status != StatusCode::FORBIDDEN
}

/// What a SubjectAccessReview says about the same case.
fn allowed_by_review(
    s: &Server,
    who: &Identity,
    verb: &str,
    (group, _, plural, _): Resource,
    namespace: Option<&str>,
    name: &str,
) -> bool {
    let mut groups: Vec<&str> = who.groups.to_vec();
    groups.push("system:authenticated");
    let mut attributes = json!({"verb": verb, "group": group, "resource": plural});
    if let Some(ns) = namespace {
        attributes["namespace"] = json!(ns);
    }
    if matches!(verb, "get" | "update" | "patch" | "delete") {
        attributes["name"] = json!(name);
    }
    let review = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                        "spec": {"user": who.user, "groups": groups,
                                 "resourceAttributes": attributes}});
    let answer = s.ok_stdin(&["create", "-o", "json", "-f", "-"], &review.to_string());
    let answer: Value = serde_json::from_str(&answer).expect("a review");
    answer["status"]["allowed"] == json!(true)
}

#[tokio::test]
async fn the_authorization_table_holds_for_requests_and_reviews() {
    let s = Server::start();
    set_up(&s);
    let client = s.client().await;
    let mut cases = 0;
    let mut wrong = Vec::new();
    for (who, resource, namespace, name, answers) in TABLE {
        let answers: Vec<&str> = answers.split_whitespace().collect();
        assert_eq!(answers.len(), VERBS.len(), "a row answers every verb");
        for (verb, answer) in VERBS.iter().zip(answers) {
            let expected = answer == "Y";
            let by_request =
                allowed_by_request(&client, who, verb, *resource, *namespace, name).await;
            let by_review = allowed_by_review(&s, who, verb, *resource, *namespace, name);
            cases += 1;
            if by_request != expected || by_review != expected {
                wrong.push(format!(
                    "{} {verb} {} in {namespace:?} ({name}): expected {expected}, request {by_request}, review {by_review}",
                    who.user, resource.2
                ));
            }
        }
    }
    assert!(cases >= 200, "{cases} cases");
    assert!(
        wrong.is_empty(),
        "{} of {cases} cases wrong:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

#[test]
fn kubectl_as_a_restricted_user_sees_what_upstream_shows() {
    let s = Server::start();
    set_up(&s);
    let as_alice = |args: &[&str]| s.kubectl(&[&["--as", "alice"][..], args].concat());
    let err = |out: std::process::Output| String::from_utf8_lossy(&out.stderr).to_string();

    // Her namespace, yes; another, upstream's words.
    s.ok(&[
        "--as",
        "alice",
        "-n",
        "team-a",
        "create",
        "configmap",
        "mine",
    ]);
    assert_has(
        &err(as_alice(&["-n", "team-b", "get", "pods"])),
        &[
            r#"Error from server (Forbidden): pods is forbidden: User "alice" cannot list resource "pods" in API group "" in the namespace "team-b""#,
        ],
    );
    assert_has(
        &err(as_alice(&["get", "nodes"])),
        &[
            r#"nodes is forbidden: User "alice" cannot list resource "nodes" in API group "" at the cluster scope"#,
        ],
    );
    assert_has(
        &err(as_alice(&["-n", "team-b", "delete", "configmap", "x"])),
        &[
            r#"configmaps "x" is forbidden: User "alice" cannot delete resource "configmaps" in API group "" in the namespace "team-b""#,
        ],
    );
    // A namespace admin reads her namespace, not others.
    s.ok(&["--as", "alice", "get", "namespace", "team-a"]);
    assert!(!as_alice(&["get", "namespace", "team-b"]).status.success());

    // can-i, its list, whoami.
    assert_eq!(
        s.ok(&[
            "--as",
            "alice",
            "auth",
            "can-i",
            "create",
            "deployments",
            "-n",
            "team-a"
        ])
        .trim(),
        "yes"
    );
    let out = as_alice(&["auth", "can-i", "create", "deployments", "-n", "team-b"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "no");
    let list = s.ok(&["--as", "dave", "auth", "can-i", "--list", "-n", "team-a"]);
    assert_has(&list, &["configmaps", "[app-config]", "[get update patch]"]);
    let whoami = s.ok(&["--as", "carol", "--as-group", "auditors", "auth", "whoami"]);
    assert_has(&whoami, &["carol", "auditors", "system:authenticated"]);

    // Escalation: no granting what one does not hold, nothing written.
    let out = as_alice(&[
        "-n",
        "team-a",
        "create",
        "role",
        "nodes",
        "--verb=get",
        "--resource=nodes",
    ]);
    assert_has(
        &err(out),
        &[
            r#"roles.rbac.authorization.k8s.io "nodes" is forbidden: user "alice" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:"#,
            r#"{APIGroups:[""], Resources:["nodes"], Verbs:["get"]}"#,
        ],
    );
    let out = as_alice(&[
        "-n",
        "team-a",
        "create",
        "rolebinding",
        "up",
        "--clusterrole=cluster-admin",
        "--user=alice",
    ]);
    assert_has(
        &err(out),
        &["is attempting to grant RBAC permissions not currently held"],
    );
    let out = as_alice(&[
        "-n",
        "team-a",
        "create",
        "rolebinding",
        "ghost",
        "--clusterrole=no-such-role",
        "--user=bob",
    ]);
    assert_has(
        &err(out),
        &[
            r#"rolebindings.rbac.authorization.k8s.io "ghost" is forbidden: clusterroles.rbac.authorization.k8s.io "no-such-role" not found"#,
        ],
    );
    let left = s.ok(&["-n", "team-a", "get", "roles,rolebindings", "-o", "name"]);
    for absent in [
        "role.rbac.authorization.k8s.io/nodes",
        "rolebinding.rbac.authorization.k8s.io/up",
        "rolebinding.rbac.authorization.k8s.io/ghost",
    ] {
        assert!(!left.contains(absent), "{absent} was written: {left}");
    }
    // What she holds she may grant, and the grantee gets it at once.
    s.ok(&[
        "--as",
        "alice",
        "-n",
        "team-a",
        "create",
        "rolebinding",
        "bob-edit",
        "--clusterrole=edit",
        "--user=bob",
    ]);
    s.ok(&[
        "--as",
        "bob",
        "-n",
        "team-a",
        "create",
        "configmap",
        "from-bob",
    ]);
    // An admin may bind a role that does not exist yet; its holder gets
    // upstream's reason.
    s.ok(&[
        "-n",
        "team-b",
        "create",
        "rolebinding",
        "later",
        "--role=later",
        "--user=eve",
    ]);
    assert_has(
        &err(s.kubectl(&["--as", "eve", "-n", "team-b", "get", "pods"])),
        &[r#"in the namespace "team-b": RBAC: role.rbac.authorization.k8s.io "later" not found"#],
    );
    // A binding's role is fixed once made.
    let out = s.kubectl_stdin(
        &["apply", "-f", "-"],
        Some("apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: later, namespace: team-b}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: view}\nsubjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: eve}]\n"),
    );
    assert_has(&err(out), &["cannot change roleRef"]);

    // Impersonation needs the impersonate verb: a ServiceAccount with
    // edit may act as its namespace's ServiceAccounts, not as a user.
    let token = s.ok(&["-n", "team-a", "create", "token", "robot"]);
    let as_robot = |args: &[&str]| s.kubectl(&[&["--token", token.trim()][..], args].concat());
    assert_has(
        &err(as_robot(&["--as", "alice", "-n", "team-a", "get", "pods"])),
        &[
            r#"users "alice" is forbidden: User "system:serviceaccount:team-a:robot" cannot impersonate resource "users" in API group "" at the cluster scope"#,
        ],
    );
    assert_has(
        &err(as_robot(&[
            "--as",
            "system:serviceaccount:team-a:default",
            "--as-group",
            "system:masters",
            "get",
            "nodes",
        ])),
        &[r#"groups "system:masters" is forbidden"#],
    );
    let out = as_robot(&[
        "--as",
        "system:serviceaccount:team-a:default",
        "auth",
        "whoami",
    ]);
    assert_has(
        &String::from_utf8_lossy(&out.stdout),
        &[
            "system:serviceaccount:team-a:default",
            "system:serviceaccounts:team-a",
        ],
    );
}

/// Random impersonation headers (names, groups, uids, extras with odd
/// bytes, several of each, or groups with no user) are answered with a
/// status, never a crash, and never act as anyone the admin did not name.
#[tokio::test]
async fn garbled_impersonation_headers_get_an_answer_never_a_crash() {
    use rand::Rng;
    let s = Server::start();
    let client = s.client().await;
    let mut rng = rand::rng();
    let value = |rng: &mut rand::rngs::ThreadRng| -> Vec<u8> {
        let len = rng.random_range(0..40);
        // Never empty: an empty header asks nothing, as upstream.
        std::iter::once(b'x')
            .chain(
                (0..len)
                    // What a header value may hold: visible ASCII, space, tab and
                    // bytes past 0x7f.
                    .map(|_| match rng.random_range(0..4) {
                        0 => rng.random_range(0x80..=0xffu8),
                        1 => b':',
                        _ => rng.random_range(0x20..0x7fu8),
                    }),
            )
            .collect()
    };
    let names = [
        "Impersonate-User",
        "Impersonate-Group",
        "Impersonate-Uid",
        "Impersonate-Extra-scopes",
        "Impersonate-Extra-%41%zz",
    ];
    for round in 0..300 {
        let mut request = Request::builder()
            .method(Method::GET)
            .uri("/api/v1/namespaces/default/configmaps");
        let mut impersonating = false;
        for _ in 0..rng.random_range(1..5) {
            let name = names[rng.random_range(0..names.len())];
            let bytes = value(&mut rng);
            if let Ok(v) = http::HeaderValue::from_bytes(&bytes) {
                request = request.header(name, v);
                impersonating = true;
            }
        }
        let response = client
            .send(request.body(Vec::new().into()).unwrap())
            .await
            .unwrap_or_else(|e| panic!("round {round}: no answer: {e}"));
        let code = response.status().as_u16();
        // The admin alone may list; whoever it impersonates (a random
        // name bound to nothing) may not, and a malformed ask is refused.
        if impersonating {
            assert!(matches!(code, 400 | 403 | 500), "round {round}: {code}");
        } else {
            assert_eq!(code, 200, "round {round}");
        }
    }
    // Still serving.
    s.ok(&["get", "ns", "default"]);
}
