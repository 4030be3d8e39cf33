//! Protobuf on the wire (`application/vnd.kubernetes.protobuf`): kubectl's
//! imperative commands, which send built-in kinds as protobuf, and raw
//! requests whose bodies and answers (objects, lists, Status errors, watch
//! frames) are checked with the decoder of upstream's fixtures.

mod common;

use std::time::Duration;

use common::{Server, assert_has};
use http_body_util::BodyExt;
use serde_json::{Value, json};

const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

#[test]
fn kubectl_imperative_commands_work_over_protobuf() {
    let s = Server::start();
    s.ok(&["create", "namespace", "demo"]);
    let n = ["-n", "demo"];
    let run = |args: &[&str]| s.ok(&[&n[..], args].concat());
    run(&["create", "configmap", "c1", "--from-literal=a=b"]);
    run(&[
        "create",
        "secret",
        "generic",
        "s1",
        "--from-literal=password=hunter2",
    ]);
    run(&[
        "create",
        "deployment",
        "d1",
        "--image=nginx",
        "--replicas=2",
    ]);
    run(&[
        "expose",
        "deployment",
        "d1",
        "--port=80",
        "--target-port=8080",
    ]);
    run(&["create", "service", "clusterip", "s2", "--tcp=5678:8080"]);
    run(&["create", "serviceaccount", "robot"]);
    run(&["create", "job", "j1", "--image=busybox"]);
    run(&[
        "create",
        "cronjob",
        "cj1",
        "--image=busybox",
        "--schedule=*/5 * * * *",
    ]);
    run(&["create", "service", "nodeport", "np", "--tcp=5678:8080"]);
    run(&["create", "service", "loadbalancer", "lb", "--tcp=80:8080"]);
    run(&[
        "create",
        "service",
        "externalname",
        "ext",
        "--external-name=example.com",
    ]);
    run(&["create", "ingress", "web", "--rule=foo.com/bar*=d1:80"]);
    run(&[
        "create",
        "secret",
        "docker-registry",
        "reg",
        "--docker-server=registry.example.com",
        "--docker-username=u",
        "--docker-password=p",
    ]);
    let dir = tempfile::tempdir().unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["example.com".into()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let (cert_file, key_file) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    std::fs::write(&cert_file, cert.pem()).unwrap();
    std::fs::write(&key_file, key.serialize_pem()).unwrap();
    run(&[
        "create",
        "secret",
        "tls",
        "tls1",
        &format!("--cert={}", cert_file.display()),
        &format!("--key={}", key_file.display()),
    ]);
    run(&["scale", "deployment", "d1", "--replicas=3"]);
    run(&["label", "configmap", "c1", "tier=front"]);
    run(&["annotate", "configmap", "c1", "note=hello"]);
    run(&["set", "image", "deployment/d1", "nginx=nginx:1.27"]);

    let cm: Value = serde_json::from_str(&run(&["get", "configmap", "c1", "-o", "json"])).unwrap();
    assert_eq!(cm["data"], json!({"a": "b"}));
    assert_eq!(cm["metadata"]["labels"]["tier"], "front");
    assert_eq!(cm["metadata"]["annotations"]["note"], "hello");
    assert_eq!(
        run(&["get", "secret", "s1", "-o", "jsonpath={.data.password}"]),
        "aHVudGVyMg=="
    );
    assert_eq!(
        run(&[
            "get",
            "deploy",
            "d1",
            "-o",
            "jsonpath={.spec.replicas},{.spec.template.spec.containers[0].image}"
        ]),
        "3,nginx:1.27"
    );
    assert_eq!(
        run(&[
            "get",
            "svc",
            "d1",
            "-o",
            "jsonpath={.spec.ports[0].port},{.spec.ports[0].targetPort}"
        ]),
        "80,8080"
    );
    assert_eq!(
        run(&[
            "get",
            "job",
            "j1",
            "-o",
            "jsonpath={.spec.template.spec.containers[0].image}"
        ]),
        "busybox"
    );
    assert_has(&run(&["get", "cronjob", "cj1"]), &["*/5 * * * *"]);
    assert_eq!(
        run(&[
            "get",
            "svc",
            "np",
            "-o",
            "jsonpath={.spec.type} {.spec.ports[0].targetPort}"
        ]),
        "NodePort 8080"
    );
    assert_eq!(
        run(&["get", "svc", "ext", "-o", "jsonpath={.spec.externalName}"]),
        "example.com"
    );
    assert_eq!(
        run(&[
            "get",
            "ingress",
            "web",
            "-o",
            "jsonpath={.spec.rules[0].host} {.spec.rules[0].http.paths[0].pathType} {.spec.rules[0].http.paths[0].backend.service.name}"
        ]),
        "foo.com Prefix d1"
    );
    assert_eq!(
        run(&[
            "get",
            "secret",
            "reg",
            "tls1",
            "-o",
            "jsonpath={.items[*].type}"
        ]),
        "kubernetes.io/dockerconfigjson kubernetes.io/tls"
    );
    // describe asks for protobuf first, events included.
    assert_has(&run(&["describe", "configmap", "c1"]), &["tier=front"]);
    // A bad generator input is refused with kubectl's own message, nothing made.
    let out = s.kubectl(&[
        "-n",
        "demo",
        "create",
        "configmap",
        "Bad_Name",
        "--from-literal=a=b",
    ]);
    assert!(!out.status.success());
    assert_has(&String::from_utf8_lossy(&out.stderr), &["Invalid value"]);
}

async fn send(
    client: &kube::Client,
    method: &str,
    path: &str,
    content_type: &str,
    accept: &str,
    body: Vec<u8>,
) -> (u16, String, Vec<u8>) {
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", content_type)
        .header("accept", accept)
        .body(kube::client::Body::from(body))
        .unwrap();
    let resp = client.send(req).await.expect("send");
    let status = resp.status().as_u16();
    let content_type = resp
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap_or("").to_string())
        .unwrap_or_default();
    let bytes = resp
        .into_body()
        .collect()
        .await
        .unwrap()
        .to_bytes()
        .to_vec();
    (status, content_type, bytes)
}

#[tokio::test]
async fn objects_lists_errors_and_watches_travel_as_protobuf() {
    let s = Server::start();
    let c = s.client().await;
    let base = "/api/v1/namespaces/default/configmaps";
    let cm = json!({"kind": "ConfigMap", "apiVersion": "v1",
                    "metadata": {"name": "pb1", "labels": {"a": "b"}},
                    "data": {"k": "v"}, "binaryData": {"bin": "AAEC"}});
    let body = flotilla_protobuf::encode(&cm).unwrap();
    let (status, ct, bytes) = send(&c, "POST", base, PROTOBUF, PROTOBUF, body).await;
    assert_eq!(
        (status, ct.as_str()),
        (201, PROTOBUF),
        "{}",
        String::from_utf8_lossy(&bytes)
    );
    let created = flotilla_protobuf::decode(&bytes).unwrap();
    assert_eq!(created["data"], json!({"k": "v"}));
    assert_eq!(created["binaryData"], json!({"bin": "AAEC"}));
    assert!(
        created["metadata"]["uid"]
            .as_str()
            .is_some_and(|u| !u.is_empty())
    );
    assert!(created["metadata"]["creationTimestamp"].is_string());
    let rv = created["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();

    // A list, in protobuf, when asked for first.
    let accept = format!("{PROTOBUF}, application/json");
    let (status, _, bytes) = send(&c, "GET", base, PROTOBUF, &accept, vec![]).await;
    assert_eq!(status, 200);
    let list = flotilla_protobuf::decode(&bytes).unwrap();
    assert_eq!(list["kind"], "ConfigMapList");
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"pb1"), "{names:?}");

    // JSON stays the answer for a client that prefers it.
    let (_, ct, bytes) = send(
        &c,
        "GET",
        &format!("{base}/pb1"),
        PROTOBUF,
        "application/json",
        vec![],
    )
    .await;
    assert_eq!(ct, "application/json");
    assert_eq!(
        serde_json::from_slice::<Value>(&bytes).unwrap()["data"]["k"],
        "v"
    );

    // Errors are protobuf Status objects.
    let (status, _, bytes) = send(
        &c,
        "GET",
        &format!("{base}/missing"),
        PROTOBUF,
        PROTOBUF,
        vec![],
    )
    .await;
    assert_eq!(status, 404);
    let error = flotilla_protobuf::decode(&bytes).unwrap();
    assert_eq!(
        (error["kind"].as_str(), error["reason"].as_str()),
        (Some("Status"), Some("NotFound"))
    );
    assert_eq!(error["code"], 404);

    // A watch: length-prefixed WatchEvent frames.
    let watch_path = format!("{base}?watch=true&resourceVersion={rv}&timeoutSeconds=20");
    let req = http::Request::get(&watch_path)
        .header("accept", PROTOBUF)
        .body(kube::client::Body::empty())
        .unwrap();
    let resp = c.send(req).await.unwrap();
    assert_eq!(
        resp.headers()["content-type"].to_str().unwrap(),
        "application/vnd.kubernetes.protobuf;stream=watch"
    );
    let second = json!({"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": "pb2"}});
    let (status, ..) = send(
        &c,
        "POST",
        base,
        PROTOBUF,
        PROTOBUF,
        flotilla_protobuf::encode(&second).unwrap(),
    )
    .await;
    assert_eq!(status, 201);
    let mut body = resp.into_body();
    let mut buf = Vec::new();
    let event = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            if let Some((payload, _)) = flotilla_protobuf::read_frame(&buf) {
                return flotilla_protobuf::decode_watch_event(payload).unwrap();
            }
            let frame = body.frame().await.expect("stream open").expect("frame");
            if let Ok(data) = frame.into_data() {
                buf.extend_from_slice(&data);
            }
        }
    })
    .await
    .expect("a watch event");
    assert_eq!(event["type"], "ADDED");
    assert_eq!(event["object"]["metadata"]["name"], "pb2");
}

#[tokio::test]
async fn bad_protobuf_bodies_get_upstreams_status_and_write_nothing() {
    let s = Server::start();
    let c = s.client().await;
    let base = "/api/v1/namespaces/default/configmaps";
    let cm = json!({"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": "bad"}, "data": {"k": "v"}});
    let good = flotilla_protobuf::encode(&cm).unwrap();

    // Truncated, and not protobuf at all: 400.
    let (status, _, bytes) = send(
        &c,
        "POST",
        base,
        PROTOBUF,
        "application/json",
        good[..good.len() - 3].to_vec(),
    )
    .await;
    assert_eq!(status, 400, "{}", String::from_utf8_lossy(&bytes));
    let (status, _, bytes) = send(
        &c,
        "POST",
        base,
        PROTOBUF,
        "application/json",
        b"{\"kind\":\"ConfigMap\"}".to_vec(),
    )
    .await;
    assert_eq!(status, 400);
    let message: Value = serde_json::from_slice(&bytes).unwrap();
    assert_has(
        message["message"].as_str().unwrap(),
        &["does not appear to be a protobuf message"],
    );
    // A kind without a message in a built-in group: 415.
    let widget = {
        let mut b = good.clone();
        // Re-envelope the same bytes as an unknown kind.
        let object = json!({"kind": "Status", "apiVersion": "v1", "message": "x"});
        b.clear();
        b.extend(flotilla_protobuf::encode(&object).unwrap());
        b
    };
    let (status, ..) = send(&c, "POST", base, PROTOBUF, "application/json", widget).await;
    assert_eq!(status, 400, "a Status is not a ConfigMap");

    // A protobuf body for a custom resource: 415, as upstream (CRDs are JSON only).
    s.ok_stdin(
        &["apply", "-f", "-"],
        r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.demo.example.com}
spec:
  group: demo.example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
"#,
    );
    common::wait_for(Duration::from_secs(10), "widgets served", || {
        s.kubectl(&["get", "widgets"]).status.success()
    });
    let widgets = "/apis/demo.example.com/v1/namespaces/default/widgets";
    let (status, _, bytes) = send(
        &c,
        "POST",
        widgets,
        PROTOBUF,
        "application/json",
        good.clone(),
    )
    .await;
    assert_eq!(status, 415, "{}", String::from_utf8_lossy(&bytes));
    // ... and a client that asks for protobuf or JSON gets JSON for one.
    let (status, ct, _) = send(
        &c,
        "GET",
        widgets,
        PROTOBUF,
        &format!("{PROTOBUF}, application/json"),
        vec![],
    )
    .await;
    assert_eq!((status, ct.as_str()), (200, "application/json"));
    // Protobuf only: 406.
    let (status, ..) = send(&c, "GET", widgets, PROTOBUF, PROTOBUF, vec![]).await;
    assert_eq!(status, 406);

    // Nothing was written by any of the refused requests.
    assert_eq!(
        s.kubectl(&["get", "configmap", "bad"]).status.code(),
        Some(1)
    );
}

/// A body over 3 MiB gets 413 with a Status that kubectl shows (over
/// HTTP/2, where answering early used to reset the stream), and a
/// ConfigMap or Secret over 1 MiB gets upstream's 422; nothing is stored.
#[test]
fn oversized_bodies_and_data_are_refused_with_a_status() {
    let s = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.txt");
    std::fs::write(&big, "x".repeat(4 * 1024 * 1024)).unwrap();
    let from = format!("--from-file={}", big.display());
    let out = s.kubectl(&["create", "configmap", "huge", &from]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert_has(&stderr, &["larger than the 3145728 byte limit"]);

    let medium = dir.path().join("medium.txt");
    std::fs::write(&medium, "x".repeat(1024 * 1024 + 1)).unwrap();
    let from = format!("--from-file={}", medium.display());
    let out = s.kubectl(&["create", "configmap", "toolong", &from]);
    assert_has(
        &String::from_utf8_lossy(&out.stderr),
        &["is invalid", "Too long: may not be more than 1048576 bytes"],
    );
    let out = s.kubectl(&["create", "secret", "generic", "toolong", &from]);
    assert_has(
        &String::from_utf8_lossy(&out.stderr),
        &["data: Too long: may not be more than 1048576 bytes"],
    );
    for kind in ["configmap/huge", "configmap/toolong", "secret/toolong"] {
        assert!(
            !s.kubectl(&["get", kind]).status.success(),
            "{kind} was stored"
        );
    }
}

/// `kubectl apply -f` of a `kind: List` (what `kubectl get -o json`
/// writes): kubectl validates its items against `/openapi/v2`, which it
/// reads only as gnostic protobuf.
#[test]
fn a_kind_list_document_applies_with_openapi_v2() {
    let s = Server::start();
    let list = r#"{"apiVersion": "v1", "kind": "List", "items": [
 {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "l1"}, "data": {"a": "b"}},
 {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "ld"},
  "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "x"}},
           "template": {"metadata": {"labels": {"app": "x"}},
                        "spec": {"containers": [{"name": "c", "image": "nginx", "ports": [{"containerPort": 80}]}]}}}}]}"#;
    let out = s.ok_stdin(&["apply", "-f", "-"], list);
    assert_has(
        &out,
        &["configmap/l1 created", "deployment.apps/ld created"],
    );
    // What `get -o json` of several objects writes applies back unchanged.
    let both = s.ok(&["get", "configmap/l1", "deployment/ld", "-o", "json"]);
    assert_has(
        &s.ok_stdin(&["apply", "-f", "-"], &both),
        &["configmap/l1", "deployment.apps/ld"],
    );
    // The JSON form, for other readers.
    let doc: Value = serde_json::from_str(&s.ok(&["get", "--raw", "/openapi/v2"])).unwrap();
    assert_eq!(doc["swagger"], "2.0");
    assert_eq!(
        doc["definitions"]["io.k8s.api.core.v1.ConfigMap"]["x-kubernetes-group-version-kind"][0]["kind"],
        "ConfigMap"
    );
}
