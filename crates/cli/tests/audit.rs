//! The audit log end to end: `flotilla apiserver` with a policy file,
//! requests from kubectl and kube-rs, and the events kube-apiserver would
//! write for them; rotation by size; bad policies refused at start-up.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use base64::Engine;
use common::{Server, assert_has, flotilla};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use serde_json::{Value, json};

/// The policy docs/operations.md shows, as written there: the first
/// `yaml` block of its "Audit" section.
fn documented_policy() -> String {
    let doc = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/operations.md"),
    )
    .expect("docs/operations.md");
    let section = doc.split("\n## Audit\n").nth(1).expect("an Audit section");
    let block = section.split("```yaml\n").nth(1).expect("a yaml block");
    block.split("```").next().unwrap_or_default().to_string()
}

const SECRET: &str = "hunter2-never-in-the-log";

fn events(log: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(log).expect("the audit log exists");
    text.lines()
        .map(|line| serde_json::from_str(line).expect("each line is one JSON object"))
        .collect()
}

/// Whether `s` has `shape`: `9` a digit, anything else itself.
fn shaped(s: &str, shape: &str) -> bool {
    s.len() == shape.len()
        && s.chars()
            .zip(shape.chars())
            .all(|(c, p)| if p == '9' { c.is_ascii_digit() } else { c == p })
}

fn stages(events: &[&Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["stage"].as_str().unwrap_or_default().to_string())
        .collect()
}

fn start(dir: &Path, policy: &str, extra: &[&str]) -> (Server, std::path::PathBuf) {
    let policy = common::write(dir, "policy.yaml", policy);
    let log = dir.join("audit").join("audit.log");
    let mut args = vec![
        "--audit-policy-file".to_string(),
        policy.display().to_string(),
        "--audit-log-path".to_string(),
        log.display().to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    (Server::start_with(&args), log)
}

#[tokio::test]
async fn the_audit_log_records_requests_as_kube_apiserver_does() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut s, log) = start(dir.path(), &documented_policy(), &[]);

    s.ok(&[
        "create",
        "secret",
        "generic",
        "s1",
        "--from-literal",
        &format!("password={SECRET}"),
    ]);
    let out = s.kubectl(&["get", "pods", "--as", "alice"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("forbidden"), "{stderr}");
    s.ok(&[
        "create",
        "configmap",
        "cm1",
        "--from-literal",
        "k=visible-value",
    ]);
    let out = s.kubectl(&["--token", "not-a-token", "get", "namespaces"]);
    assert!(!out.status.success());

    // The Audit-ID header names the request's events; a client's own is kept.
    let client = s.client().await;
    let response = client
        .send(
            http::Request::get("/api/v1/namespaces/default/configmaps/cm1")
                .body(Vec::new().into())
                .expect("request"),
        )
        .await
        .expect("answered");
    assert_eq!(response.status(), 200);
    let audit_id = response
        .headers()
        .get("audit-id")
        .and_then(|v| v.to_str().ok())
        .expect("an Audit-ID header")
        .to_string();
    let response = client
        .send(
            http::Request::get("/version")
                .header("Audit-ID", "chosen-by-the-client")
                .body(Vec::new().into())
                .expect("request"),
        )
        .await
        .expect("answered");
    assert_eq!(
        response
            .headers()
            .get("audit-id")
            .and_then(|v| v.to_str().ok()),
        Some("chosen-by-the-client")
    );

    // SIGTERM: the server flushes the log before it exits.
    s.stop();
    let text = std::fs::read_to_string(&log).expect("the audit log");
    let events = events(&log);
    assert!(!events.is_empty());

    let mut by_id: BTreeMap<String, Vec<&Value>> = BTreeMap::new();
    for e in &events {
        assert_eq!(e["kind"], "Event", "{e}");
        assert_eq!(e["apiVersion"], "audit.k8s.io/v1", "{e}");
        for ts in ["requestReceivedTimestamp", "stageTimestamp"] {
            let time = e[ts].as_str().unwrap_or_default();
            assert!(shaped(time, "9999-99-99T99:99:99.999999Z"), "{ts}: {e}");
        }
        by_id
            .entry(e["auditID"].as_str().expect("auditID").to_string())
            .or_default()
            .push(e);
    }
    // A request's events share its ID and its received time, in stage order.
    for (id, evs) in &by_id {
        let received = &evs[0]["requestReceivedTimestamp"];
        assert!(
            evs.iter()
                .all(|e| &e["requestReceivedTimestamp"] == received),
            "{id}"
        );
        let order = |s: &str| {
            [
                "RequestReceived",
                "ResponseStarted",
                "ResponseComplete",
                "Panic",
            ]
            .iter()
            .position(|x| *x == s)
        };
        let positions: Vec<_> = stages(evs).iter().map(|s| order(s)).collect();
        assert!(
            positions.windows(2).all(|w| w[0] < w[1]),
            "{id}: {positions:?}"
        );
    }

    // The secret: Metadata only, though the policy asks for everything.
    let secret: Vec<&Value> = events
        .iter()
        .filter(|e| e["objectRef"]["resource"] == "secrets" && e["verb"] == "create")
        .collect();
    assert_eq!(stages(&secret), ["RequestReceived", "ResponseComplete"]);
    for e in &secret {
        assert_eq!(e["level"], "Metadata", "{e}");
        assert!(
            e.get("requestObject").is_none() && e.get("responseObject").is_none(),
            "{e}"
        );
        assert_eq!(e["user"]["username"], "flotilla-admin", "{e}");
        assert!(
            e["sourceIPs"]
                .as_array()
                .is_some_and(|ips| ips.contains(&json!("127.0.0.1"))),
            "{e}"
        );
        assert!(
            e["userAgent"]
                .as_str()
                .unwrap_or_default()
                .starts_with("kubectl"),
            "{e}"
        );
        assert_eq!(
            e["requestURI"]
                .as_str()
                .unwrap_or_default()
                .split('?')
                .next(),
            Some("/api/v1/namespaces/default/secrets"),
            "{e}"
        );
    }
    let done = secret[1];
    assert_eq!(
        done["objectRef"],
        json!({"resource": "secrets", "namespace": "default", "name": "s1", "apiVersion": "v1"})
    );
    assert_eq!(done["responseStatus"], json!({"metadata": {}, "code": 201}));
    assert_eq!(
        done["annotations"]["authorization.k8s.io/decision"],
        "allow"
    );
    assert!(secret[0].get("annotations").is_none(), "{}", secret[0]);
    // The name comes from the body, read after RequestReceived.
    assert!(
        secret[0]["objectRef"].get("name").is_none(),
        "{}",
        secret[0]
    );
    assert!(secret[0].get("responseStatus").is_none(), "{}", secret[0]);
    let encoded = base64::engine::general_purpose::STANDARD.encode(SECRET);
    assert!(
        !text.contains(SECRET) && !text.contains(&encoded),
        "secret data in the audit log"
    );

    // Impersonating alice, who may not list pods: one event (RequestReceived
    // omitted by its rule), the 403 and the authorizer's decision.
    let pods: Vec<&Value> = events
        .iter()
        .filter(|e| e["objectRef"]["resource"] == "pods")
        .collect();
    assert_eq!(stages(&pods), ["ResponseComplete"], "{pods:?}");
    let e = pods[0];
    assert_eq!(e["level"], "Metadata");
    assert_eq!(e["verb"], "list");
    assert_eq!(e["user"]["username"], "flotilla-admin");
    assert_eq!(e["impersonatedUser"]["username"], "alice");
    assert_eq!(
        e["objectRef"],
        json!({"resource": "pods", "namespace": "default", "apiVersion": "v1"})
    );
    assert_eq!(e["responseStatus"]["code"], 403);
    assert_eq!(e["responseStatus"]["status"], "Failure");
    assert_eq!(e["responseStatus"]["reason"], "Forbidden");
    assert!(
        e["responseStatus"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("User \"alice\" cannot list resource \"pods\""),
        "{e}"
    );
    assert_eq!(e["annotations"]["authorization.k8s.io/decision"], "forbid");

    // The ConfigMap at RequestResponse: the request and the answer in full.
    let cm: Vec<&Value> = events
        .iter()
        .filter(|e| e["objectRef"]["resource"] == "configmaps" && e["verb"] == "create")
        .collect();
    assert_eq!(stages(&cm), ["RequestReceived", "ResponseComplete"]);
    assert!(cm[0].get("requestObject").is_none(), "{}", cm[0]);
    let e = cm[1];
    assert_eq!(e["level"], "RequestResponse");
    assert_eq!(e["objectRef"]["name"], "cm1");
    assert_eq!(e["requestObject"]["data"]["k"], "visible-value", "{e}");
    assert_eq!(e["responseObject"]["kind"], "ConfigMap", "{e}");
    assert_eq!(e["responseObject"]["metadata"]["name"], "cm1", "{e}");
    assert_eq!(e["responseStatus"]["code"], 201);

    // The GET whose Audit-ID we kept.
    let get = &by_id[&audit_id];
    assert_eq!(stages(get), ["RequestReceived", "ResponseComplete"]);
    assert_eq!(get[1]["verb"], "get");
    assert_eq!(get[1]["objectRef"]["name"], "cm1");
    assert_eq!(get[1]["responseObject"]["data"]["k"], "visible-value");
    let version = &by_id["chosen-by-the-client"];
    assert_eq!(stages(version), ["ResponseComplete"]);
    assert_eq!(version[0]["verb"], "get");
    assert_eq!(version[0]["requestURI"], "/version");
    assert!(version[0].get("objectRef").is_none());

    // A refused token: upstream's single ResponseStarted event, user {}.
    let refused: Vec<&Value> = events
        .iter()
        .filter(|e| e["responseStatus"]["code"] == 401)
        .collect();
    assert!(!refused.is_empty());
    for e in refused {
        assert_eq!(e["stage"], "ResponseStarted", "{e}");
        assert_eq!(e["user"], json!({}), "{e}");
        assert_eq!(
            e["responseStatus"]["message"],
            "Authentication failed, attempted: bearer"
        );
    }

    // Health checks matched `level: None`.
    assert!(
        !events.iter().any(|e| e["requestURI"]
            .as_str()
            .unwrap_or_default()
            .starts_with("/readyz")),
        "readyz audited"
    );
}

#[tokio::test]
async fn the_audit_log_rotates_at_maxsize_keeping_maxbackup_files() {
    const CONFIGMAPS: &str = r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitManagedFields: true
rules:
  - level: RequestResponse
    resources: [{group: "", resources: ["configmaps"]}]
"#;
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut s, log) = start(
        dir.path(),
        CONFIGMAPS,
        &["--audit-log-maxsize", "1", "--audit-log-maxbackup", "2"],
    );
    let api: Api<ConfigMap> = Api::default_namespaced(s.client().await);
    // 300 KB a copy: each GET's ResponseComplete is about 300 KB, so a
    // 1 MiB file holds three.
    let big: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "big"},
        "data": {"blob": "x".repeat(300 * 1024)},
    }))
    .expect("configmap");
    api.create(&Default::default(), &big).await.expect("create");
    for _ in 0..12 {
        api.get("big").await.expect("get");
    }
    s.stop();

    let dir = log.parent().expect("log dir");
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("log dir")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names.len(), 3, "the log and two backups: {names:?}");
    assert_eq!(names[2], "audit.log");
    let backup = |name: &str| {
        name.strip_prefix("audit-")
            .and_then(|n| n.strip_suffix(".log"))
            .is_some_and(|time| shaped(time, "9999-99-99T99-99-99.999"))
    };
    let mut gets = 0;
    for name in &names {
        assert!(name == "audit.log" || backup(name), "{name}");
        let path = dir.join(name);
        let len = std::fs::metadata(&path).expect("stat").len();
        assert!(len <= 1024 * 1024, "{name} is {len} bytes");
        for e in events(&path) {
            assert_eq!(e["kind"], "Event");
            if e["verb"] == "get" && e["stage"] == "ResponseComplete" {
                gets += 1;
                assert!(
                    e["responseObject"]["metadata"]
                        .get("managedFields")
                        .is_none(),
                    "omitManagedFields"
                );
            }
        }
    }
    // Older GETs went with the removed backups; the newest are all here.
    assert!((3..12).contains(&gets), "{gets} GETs kept");
}

/// Everything logged while a request is served carries who asked what,
/// and its audit ID, so one request can be followed in the log.
#[test]
fn a_request_is_logged_in_a_span_naming_who_asked_what() {
    let s = Server::start_with_env(&[], &[("RUST_LOG", "flotilla=debug")]);
    s.ok(&["create", "configmap", "traced", "--from-literal=a=b"]);
    let log = s.log();
    let line = log
        .lines()
        .find(|l| {
            l.contains("path=/api/v1/namespaces/default/configmaps ") && l.contains("status=201")
        })
        .unwrap_or_else(|| panic!("no line for the create:\n{log}"));
    assert_has(
        line,
        &[
            "request{method=POST",
            "audit_id=",
            "user=",
            "verb=create",
            "resource=configmaps",
            "namespace=default",
        ],
    );
}

#[test]
fn a_policy_that_cannot_be_read_or_parsed_stops_the_server_saying_why() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = common::write(
        dir.path(),
        "policy.yaml",
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n  - level: Verbose\n",
    );
    let missing = dir.path().join("missing.yaml");
    let log = dir.path().join("audit.log");
    let data = dir.path().join("data");
    for (policy, why) in [
        (&bad, "rules[0].level: unknown variant `Verbose`"),
        (&missing, "No such file"),
    ] {
        let out = flotilla(&[
            "apiserver",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            &data.display().to_string(),
            "--audit-policy-file",
            &policy.display().to_string(),
            "--audit-log-path",
            &log.display().to_string(),
        ]);
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&policy.display().to_string()) && stderr.contains(why),
            "{stderr}"
        );
    }
}
