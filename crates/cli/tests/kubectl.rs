//! The installed kubectl, with default flags (strict validation), against
//! `flotilla apiserver`.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{Server, assert_has, wait_for, write};

const APP: &str = r#"
apiVersion: v1
kind: Namespace
metadata:
  name: shop
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: shop
  labels: {app: web, tier: front}
data:
  a: "1"
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: shop
  labels: {app: web}
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: nginx:1.27
        ports:
        - containerPort: 80
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.demo.example.com
spec:
  group: demo.example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, shortNames: [wd], categories: [all]}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer, default: 1}
              color: {type: string}
    additionalPrinterColumns:
    - {name: Color, type: string, jsonPath: .spec.color}
---
apiVersion: demo.example.com/v1
kind: Widget
metadata:
  name: w1
  namespace: shop
spec:
  color: blue
"#;

/// Applies the multi-document manifest. As with kube-apiserver, a custom
/// object cannot be mapped in the same invocation that creates its CRD, so
/// the first apply reports it and the second creates it.
fn apply_app(s: &Server) {
    let file = write(s.dir.path(), "app.yaml", APP);
    let first = s.kubectl(&["apply", "-f", file.to_str().unwrap()]);
    let out = String::from_utf8_lossy(&first.stdout);
    assert_has(
        &out,
        &[
            "namespace/shop created",
            "configmap/settings created",
            "deployment.apps/web created",
            "customresourcedefinition.apiextensions.k8s.io/widgets.demo.example.com created",
        ],
    );
    let second = s.ok(&["apply", "-f", file.to_str().unwrap()]);
    assert_has(
        &second,
        &[
            "widget.demo.example.com/w1 created",
            "deployment.apps/web unchanged",
        ],
    );
}

#[test]
fn api_resources_lists_builtins_and_crds() {
    let s = Server::start();
    let out = s.ok(&["api-resources"]);
    assert_has(
        &out,
        &[
            "configmaps",
            "deployments",
            "customresourcedefinitions",
            "endpointslices",
            "leases",
            "jobs",
        ],
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with("namespaces") && l.contains("false") && l.contains("ns"))
    );
    apply_app(&s);
    let out = s.ok(&["api-resources", "--api-group=demo.example.com"]);
    assert_has(&out, &["widgets", "wd", "Widget"]);
}

#[test]
fn apply_get_and_edit_a_fleet_of_objects() {
    let s = Server::start();
    apply_app(&s);

    // Table output with upstream columns, wide columns and CRD printer columns.
    let wide = s.ok(&["get", "deploy", "-n", "shop", "-o", "wide"]);
    assert_has(&wide, &["READY", "UP-TO-DATE", "IMAGES"]);
    assert_has(&wide, &["nginx:1.27", "app=web"]);
    let widgets = s.ok(&["get", "wd", "-n", "shop"]);
    assert_has(&widgets, &["COLOR", "blue"]);

    // The CR got its schema default.
    let json: serde_json::Value =
        serde_json::from_str(&s.ok(&["get", "widget", "w1", "-n", "shop", "-o", "json"])).unwrap();
    assert_eq!(json["spec"]["size"], 1);
    let yaml = s.ok(&["get", "cm", "settings", "-n", "shop", "-o", "yaml"]);
    assert_has(&yaml, &["kind: ConfigMap", "resourceVersion:"]);

    // Selectors and all namespaces.
    assert!(
        s.ok(&["get", "cm", "-A", "-l", "app=web,tier in (front)"])
            .contains("settings")
    );
    assert!(
        !s.ok(&["get", "cm", "-A", "-l", "tier notin (front)"])
            .contains("settings")
    );
    let all_ns = s.ok(&["get", "deploy", "-A"]);
    assert_has(&all_ns, &["NAMESPACE", "shop"]);

    // get all covers deployments and custom kinds in category "all".
    let all = s.ok(&["get", "all", "-n", "shop"]);
    assert_has(&all, &["deployment.apps/web", "widget.demo.example.com/w1"]);

    // label, annotate, patch.
    s.ok(&["label", "cm", "settings", "-n", "shop", "env=prod"]);
    s.ok(&["annotate", "cm", "settings", "-n", "shop", "owner=team-a"]);
    s.ok(&[
        "patch",
        "cm",
        "settings",
        "-n",
        "shop",
        "--type=json",
        "-p",
        r#"[{"op":"add","path":"/data/b","value":"2"}]"#,
    ]);
    s.ok(&[
        "patch",
        "cm",
        "settings",
        "-n",
        "shop",
        "--type=merge",
        "-p",
        r#"{"data":{"c":"3"}}"#,
    ]);
    s.ok(&[
        "patch",
        "wd",
        "w1",
        "-n",
        "shop",
        "--type=merge",
        "-p",
        r#"{"spec":{"color":"red"}}"#,
    ]);
    let cm: serde_json::Value =
        serde_json::from_str(&s.ok(&["get", "cm", "settings", "-n", "shop", "-o", "json"]))
            .unwrap();
    assert_eq!(cm["metadata"]["labels"]["env"], "prod");
    assert_eq!(cm["metadata"]["annotations"]["owner"], "team-a");
    assert_eq!(
        cm["data"],
        serde_json::json!({"a": "1", "b": "2", "c": "3"})
    );
    assert!(s.ok(&["get", "wd", "w1", "-n", "shop"]).contains("red"));

    // Re-applying an edited manifest changes what changed and keeps the rest.
    let edited = APP.replace("nginx:1.27", "nginx:1.28");
    let file = write(s.dir.path(), "app2.yaml", &edited);
    let out = s.ok(&["apply", "-f", file.to_str().unwrap()]);
    assert!(out.contains("deployment.apps/web configured"), "{out}");
    let d: serde_json::Value =
        serde_json::from_str(&s.ok(&["get", "deploy", "web", "-n", "shop", "-o", "json"])).unwrap();
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["image"],
        "nginx:1.28"
    );
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"],
        80
    );
    assert_eq!(d["metadata"]["generation"], 2);

    // describe needs events.
    let described = s.ok(&["describe", "cm", "settings", "-n", "shop"]);
    assert_has(&described, &["Name:", "settings", "Events:"]);

    // delete, including the namespace with everything in it.
    s.ok(&["delete", "wd", "w1", "-n", "shop"]);
    assert!(
        !s.kubectl(&["get", "wd", "w1", "-n", "shop"])
            .status
            .success()
    );
    s.ok(&["delete", "ns", "shop"]);
    let missing = s.kubectl(&["get", "cm", "settings", "-n", "shop"]);
    assert!(String::from_utf8_lossy(&missing.stderr).contains("NotFound"));
}

#[test]
fn explain_uses_openapi() {
    let s = Server::start();
    let out = s.ok(&["explain", "deployment.spec.replicas"]);
    assert_has(&out, &["replicas", "integer"]);
}

#[test]
fn watch_sees_a_change() {
    let s = Server::start();
    s.kubectl_stdin(
        &["apply", "-f", "-"],
        Some("apiVersion: v1\nkind: Namespace\nmetadata: {name: w}\n"),
    );
    let kubectl = common::which("kubectl").expect("kubectl");
    let mut child = Command::new(kubectl)
        .env("KUBECONFIG", &s.kubeconfig)
        .arg("--cache-dir")
        .arg(s.dir.path().join("kube-cache-watch"))
        .args([
            "get",
            "configmaps",
            "-n",
            "w",
            "-w",
            "--output-watch-events",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubectl get -w");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    // Apply until the watch (which may not be established yet) reports it.
    let cm =
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: live, namespace: w}\ndata: {k: v}\n";
    let mut seen = Vec::new();
    wait_for(
        Duration::from_secs(20),
        "kubectl -w to print the new configmap",
        || {
            let _ = s.kubectl_stdin(&["apply", "-f", "-"], Some(cm));
            while let Ok(l) = rx.try_recv() {
                seen.push(l);
            }
            seen.iter()
                .any(|l| l.contains("ADDED") && l.contains("live"))
        },
    );
    s.ok(&["label", "cm", "live", "-n", "w", "x=y"]);
    wait_for(
        Duration::from_secs(20),
        "kubectl -w to print the modification",
        || {
            while let Ok(l) = rx.try_recv() {
                seen.push(l);
            }
            seen.iter()
                .any(|l| l.contains("MODIFIED") && l.contains("live"))
        },
    );
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn bad_input_gets_clear_errors_and_writes_nothing() {
    let s = Server::start();
    let bad_name = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: Bad_Name}\n";
    let out = s.kubectl_stdin(&["apply", "-f", "-"], Some(bad_name));
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Invalid value"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let unknown_field = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok}\nbogus: 1\n";
    let out = s.kubectl_stdin(&["apply", "-f", "-"], Some(unknown_field));
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("unknown field \"bogus\""),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = s.kubectl(&["get", "cm", "ok"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("NotFound"));
    let out = s.kubectl(&["get", "nosuchthings"]);
    assert!(!out.status.success());
}
