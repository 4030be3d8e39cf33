//! Evictions honour PodDisruptionBudgets (what `kubectl drain` relies on),
//! the rollout commands (history, restart, undo) work on a member,
//! and a CertificateSigningRequest is approved
//! through `/approval` (`kubectl certificate approve`).

mod common;

use std::time::Duration;

use common::{Server, assert_has, wait_for};
use serde_json::Value;

fn pods(s: &Server) -> Vec<String> {
    s.ok(&[
        "get",
        "pods",
        "-l",
        "app=web",
        "-o",
        "jsonpath={.items[*].metadata.name}",
    ])
    .split_whitespace()
    .map(String::from)
    .collect()
}

fn evict(s: &Server, pod: &str) -> std::process::Output {
    let body = format!(
        r#"{{"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {{"name": "{pod}", "namespace": "default"}}}}"#
    );
    s.kubectl_stdin(
        &[
            "create",
            "--raw",
            &format!("/api/v1/namespaces/default/pods/{pod}/eviction"),
            "-f",
            "-",
        ],
        Some(&body),
    )
}

#[test]
fn evictions_honour_budgets_and_rollouts_go_forth_and_back() {
    let s = Server::member("m1", &["--nodes", "2"]);
    s.ok(&[
        "create",
        "deployment",
        "web",
        "--image=nginx",
        "--replicas=3",
    ]);
    s.ok(&["rollout", "status", "deployment/web", "--timeout=60s"]);
    s.ok(&[
        "create",
        "poddisruptionbudget",
        "web",
        "--selector=app=web",
        "--min-available=3",
    ]);
    let victim = pods(&s)[0].clone();
    let out = evict(&s, &victim);
    assert!(!out.status.success());
    assert_has(
        &String::from_utf8_lossy(&out.stderr),
        &["Cannot evict pod as it would violate the pod's disruption budget"],
    );
    assert!(pods(&s).contains(&victim), "the pod stayed");

    // With room in the budget the pod goes (and its ReplicaSet replaces it).
    s.ok(&[
        "patch",
        "pdb",
        "web",
        "--type=merge",
        "-p",
        r#"{"spec":{"minAvailable":2}}"#,
    ]);
    // The budget's status says as much, as the disruption controller does.
    wait_for(Duration::from_secs(20), "the budget's status", || {
        s.ok(&[
            "get",
            "pdb",
            "web",
            "-o",
            "jsonpath={.status.currentHealthy} {.status.disruptionsAllowed}",
        ]) == "3 1"
    });
    assert_has(
        &s.ok(&["get", "pdb", "web"]),
        &["ALLOWED DISRUPTIONS", "2", "N/A", "1"],
    );
    let out = evict(&s, &victim);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_for(Duration::from_secs(30), "the evicted pod gone", || {
        !pods(&s).contains(&victim)
    });

    // The rollout commands on the same member: a new image, its history,
    // a restart, and back.
    s.ok(&["set", "image", "deployment/web", "nginx=nginx:1.27"]);
    s.ok(&["rollout", "status", "deployment/web", "--timeout=60s"]);
    assert_has(
        &s.ok(&["rollout", "history", "deployment/web"]),
        &["REVISION", "1", "2"],
    );
    assert_has(
        &s.ok(&["rollout", "restart", "deployment/web"]),
        &["deployment.apps/web restarted"],
    );
    s.ok(&["rollout", "status", "deployment/web", "--timeout=60s"]);
    assert_has(
        &s.ok(&["rollout", "undo", "deployment/web", "--to-revision=1"]),
        &["deployment.apps/web rolled back"],
    );
    wait_for(Duration::from_secs(30), "the first image back", || {
        s.ok(&[
            "get",
            "deploy",
            "web",
            "-o",
            "jsonpath={.spec.template.spec.containers[0].image}",
        ]) == "nginx"
    });
}

#[test]
fn a_csr_is_approved_through_approval() {
    let s = Server::start();
    let key = rcgen::KeyPair::generate().unwrap();
    let csr = rcgen::CertificateParams::new(vec!["jane".into()])
        .unwrap()
        .serialize_request(&key)
        .unwrap()
        .pem()
        .unwrap();
    use base64::Engine;
    let request = base64::engine::general_purpose::STANDARD.encode(csr);
    s.ok_stdin(
        &["apply", "-f", "-"],
        &format!(
            "apiVersion: certificates.k8s.io/v1\nkind: CertificateSigningRequest\nmetadata: {{name: jane}}\nspec:\n  request: {request}\n  signerName: kubernetes.io/kube-apiserver-client\n  usages: [client auth]\n"
        ),
    );
    assert_has(
        &s.ok(&["certificate", "approve", "jane"]),
        &["certificatesigningrequest.certificates.k8s.io/jane approved"],
    );
    let csr: Value = serde_json::from_str(&s.ok(&["get", "csr", "jane", "-o", "json"])).unwrap();
    assert_has(
        &s.ok(&["get", "csr", "jane"]),
        &[
            "SIGNERNAME",
            "kubernetes.io/kube-apiserver-client",
            "Approved",
        ],
    );
    let condition = &csr["status"]["conditions"][0];
    assert_eq!(
        (condition["type"].as_str(), condition["status"].as_str()),
        (Some("Approved"), Some("True"))
    );
}
