//! The installed kubectl, with default flags (strict validation), against
//! `flotilla apiserver`.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{Server, Store, assert_has, wait_for, write};

// The kubectl suite runs on the embedded store and on etcd.
crate::on_both_stores!(
    api_resources_lists_builtins_and_crds,
    apply_get_and_edit_a_fleet_of_objects,
    explain_uses_openapi,
    watch_sees_a_change,
    bad_input_gets_clear_errors_and_writes_nothing
);

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

fn api_resources_lists_builtins_and_crds(store: Store) {
    let s = Server::start_on(store, &[]);
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

fn apply_get_and_edit_a_fleet_of_objects(store: Store) {
    let s = Server::start_on(store, &[]);
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

fn explain_uses_openapi(store: Store) {
    let s = Server::start_on(store, &[]);
    let out = s.ok(&["explain", "deployment.spec.replicas"]);
    assert_has(&out, &["replicas", "integer"]);
}

fn watch_sees_a_change(store: Store) {
    let s = Server::start_on(store, &[]);
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

fn bad_input_gets_clear_errors_and_writes_nothing(store: Store) {
    let s = Server::start_on(store, &[]);
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

#[tokio::test]
async fn day_to_day_kubectl_edit_wait_rollout_prune_logs() {
    use k8s_openapi::api::apps::v1::Deployment;
    use kube::api::{Api, Patch, PatchParams};
    let s = Server::start();
    let file = write(
        s.dir.path(),
        "cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: one, labels: {app: demo}}\ndata: {k: v}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: two, labels: {app: demo}}\n",
    );
    s.ok(&["apply", "-f", file.to_str().unwrap()]);

    // edit through $EDITOR: a script that rewrites the value.
    let editor = write(
        s.dir.path(),
        "editor.sh",
        "#!/bin/sh\nsed -i 's/k: v/k: edited/' \"$1\"\n",
    );
    std::fs::set_permissions(&editor, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = Command::new(common::which("kubectl").unwrap())
        .env("KUBECONFIG", &s.kubeconfig)
        .env("EDITOR", &editor)
        .args(["edit", "configmap", "one"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        s.ok(&["get", "cm", "one", "-o", "jsonpath={.data.k}"]),
        "edited"
    );

    // apply --prune deletes what the label selects and the file no longer has.
    let file = write(
        s.dir.path(),
        "cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: one, labels: {app: demo}}\ndata: {k: edited}\n",
    );
    let out = s.ok(&[
        "apply",
        "--prune",
        "-l",
        "app=demo",
        "-f",
        file.to_str().unwrap(),
    ]);
    assert_has(&out, &["configmap/two pruned"]);
    assert!(!s.kubectl(&["get", "cm", "two"]).status.success());

    // wait --for=condition and rollout status, driven by status writes.
    s.kubectl_stdin(
        &["apply", "-f", "-"],
        Some(
            r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: nginx}]}
"#,
        ),
    );
    let api: Api<Deployment> = Api::default_namespaced(s.client().await);
    let kubectl = common::which("kubectl").unwrap();
    let waiting = Command::new(&kubectl)
        .env("KUBECONFIG", &s.kubeconfig)
        .args([
            "wait",
            "--for=condition=Available",
            "deployment/web",
            "--timeout=20s",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let rollout = Command::new(&kubectl)
        .env("KUBECONFIG", &s.kubeconfig)
        .args(["rollout", "status", "deployment/web", "--timeout=20s"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    api.patch_status(
        "web",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"status": {"observedGeneration": 1, "replicas": 1,
            "updatedReplicas": 1, "readyReplicas": 1, "availableReplicas": 1,
            "conditions": [{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
                           {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}]}})),
    )
    .await
    .unwrap();
    let out = waiting.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_has(&String::from_utf8_lossy(&out.stdout), &["condition met"]);
    let out = rollout.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_has(
        &String::from_utf8_lossy(&out.stdout),
        &["successfully rolled out"],
    );

    // wait --for=delete returns once the object is gone.
    let waiting = Command::new(&kubectl)
        .env("KUBECONFIG", &s.kubeconfig)
        .args(["wait", "--for=delete", "configmap/one", "--timeout=20s"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    s.ok(&["delete", "configmap", "one", "--wait=false"]);
    let out = waiting.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let out = Command::new(&kubectl)
        .env("KUBECONFIG", &s.kubeconfig)
        .args(["wait", "--for=delete", "configmap/one", "--timeout=5s"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");

    // logs: a clear error, not a hang.
    s.kubectl_stdin(&["apply", "-f", "-"], Some("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, image: busybox}]}\n"));
    let out = s.kubectl(&["logs", "p"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no container runtime"), "{stderr}");
}
