//! Patches and apply: repeated client-side `kubectl apply` against edits
//! from another writer (strategic merge), server-side apply with several
//! managers, and patches that do not apply.

mod common;

use common::{Server, status_of, write};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

const DEPLOYMENT_V1: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {app: web}
spec:
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: nginx:1.27
        args: ["--a", "--b"]
        env:
        - {name: MODE, value: prod}
        - {name: OLD, value: "1"}
        ports:
        - containerPort: 80
      - name: sidecar
        image: envoy:1.30
      volumes:
      - name: cache
        emptyDir: {}
"#;

/// The user's edit: a new image and port, OLD dropped, the sidecar gone,
/// a new volume. Neither version sets replicas, so a scaler owns them.
const DEPLOYMENT_V2: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {app: web}
spec:
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: nginx:1.28
        args: ["--a"]
        env:
        - {name: MODE, value: prod}
        ports:
        - containerPort: 80
        - containerPort: 443
      volumes:
      - name: cache
        emptyDir: {}
      - name: certs
        secret: {secretName: certs}
"#;

#[tokio::test]
async fn repeated_client_side_apply_keeps_what_other_writers_set() {
    let s = Server::start();
    let file = write(s.dir.path(), "web.yaml", DEPLOYMENT_V1);
    let path = file.to_str().unwrap();
    s.ok(&["apply", "-f", path]);

    // A second writer: scales, annotates, adds an env var and a container resource limit.
    let api: Api<Deployment> = Api::default_namespaced(s.client().await);
    api.patch(
        "web",
        &PatchParams::default(),
        &Patch::Strategic(json!({
            "metadata": {"annotations": {"team": "payments"}},
            "spec": {"replicas": 5, "template": {"spec": {"containers": [
                {"name": "web", "env": [{"name": "INJECTED", "value": "yes"}],
                 "resources": {"limits": {"cpu": "500m"}}}]}}}
        })),
    )
    .await
    .unwrap();

    // Re-applying the unchanged file sends only element orders; nothing moves.
    s.ok(&["apply", "-f", path]);

    std::fs::write(&file, DEPLOYMENT_V2).unwrap();
    let out = s.ok(&["apply", "-f", path]);
    assert!(out.contains("configured"), "{out}");

    let d = api.get("web").await.unwrap();
    let spec = d.spec.unwrap();
    assert_eq!(spec.replicas, Some(5), "the scaler's replicas stay");
    assert_eq!(d.metadata.annotations.unwrap()["team"], "payments");
    let pod = spec.template.spec.unwrap();
    assert_eq!(pod.containers.len(), 1, "the removed sidecar is gone");
    let web = &pod.containers[0];
    assert_eq!(web.image.as_deref(), Some("nginx:1.28"));
    assert_eq!(web.args.as_deref(), Some(&["--a".to_string()][..]));
    let env: Vec<_> = web
        .env
        .as_ref()
        .unwrap()
        .iter()
        .map(|e| e.name.as_str())
        .collect();
    assert_eq!(
        env,
        ["MODE", "INJECTED"],
        "OLD removed, the injected variable kept"
    );
    let ports: Vec<_> = web
        .ports
        .as_ref()
        .unwrap()
        .iter()
        .map(|p| p.container_port)
        .collect();
    assert_eq!(ports, [80, 443]);
    assert_eq!(
        web.resources.as_ref().unwrap().limits.as_ref().unwrap()["cpu"].0,
        "500m"
    );
    let volumes: Vec<_> = pod
        .volumes
        .unwrap()
        .iter()
        .map(|v| v.name.clone())
        .collect();
    assert_eq!(volumes, ["cache", "certs"]);

    // kubectl diff shows what the next apply would change, without changing it.
    std::fs::write(&file, DEPLOYMENT_V2.replace("nginx:1.28", "nginx:1.29")).unwrap();
    let out = s.kubectl(&["diff", "-f", path]);
    let diff = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "diff exits 1 when there are differences: {out:?}"
    );
    assert!(
        diff.contains("-        image: nginx:1.28") && diff.contains("+        image: nginx:1.29"),
        "{diff}"
    );
    let image = s.ok(&[
        "get",
        "deploy",
        "web",
        "-o",
        "jsonpath={.spec.template.spec.containers[0].image}",
    ]);
    assert_eq!(image, "nginx:1.28");
}

#[tokio::test]
async fn patches_that_do_not_apply_change_nothing() {
    let s = Server::start();
    let file = write(s.dir.path(), "web.yaml", DEPLOYMENT_V1);
    s.ok(&["apply", "-f", file.to_str().unwrap()]);
    let api: Api<Deployment> = Api::default_namespaced(s.client().await);
    let before = api.get("web").await.unwrap();

    // A keyed list item without its merge key.
    let e = status_of(
        api.patch(
            "web",
            &PatchParams::default(),
            &Patch::Strategic(
                json!({"spec": {"template": {"spec": {"containers": [{"image": "x"}]}}}}),
            ),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    assert!(
        e.message.contains("spec.template.spec.containers") && e.message.contains("name"),
        "{}",
        e.message
    );

    // A type mismatch.
    let e = status_of(
        api.patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": "three"}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(e.code, 422);
    assert!(e.message.contains("spec.replicas"), "{}", e.message);

    // A JSON patch whose test fails.
    let e = status_of(
        api.patch(
            "web",
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(json!([
                    {"op": "test", "path": "/spec/replicas", "value": 9},
                    {"op": "replace", "path": "/spec/replicas", "value": 1}
                ]))
                .unwrap(),
            ),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(e.code, 422);

    let after = api.get("web").await.unwrap();
    assert_eq!(
        after.metadata.resource_version,
        before.metadata.resource_version
    );
}
