//! Patches and apply: repeated client-side `kubectl apply` against edits
//! from another writer (strategic merge), server-side apply with several
//! managers, and patches that do not apply.

mod common;

use common::{Server, Store, status_of, write};

// The suite runs on the embedded store and on etcd.
crate::on_both_stores!(async repeated_client_side_apply_keeps_what_other_writers_set, patches_that_do_not_apply_change_nothing, server_side_apply_tracks_managers_and_conflicts, kubectl_server_side_apply_and_migration_from_client_side, status_writes_record_their_manager_under_the_status_subresource);
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

async fn repeated_client_side_apply_keeps_what_other_writers_set(store: Store) {
    let s = Server::start_on(store, &[]);
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

async fn patches_that_do_not_apply_change_nothing(store: Store) {
    let s = Server::start_on(store, &[]);
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

async fn server_side_apply_tracks_managers_and_conflicts(store: Store) {
    use k8s_openapi::api::core::v1::ConfigMap;
    let s = Server::start_on(store, &[]);
    let api: Api<ConfigMap> = Api::default_namespaced(s.client().await);
    let apply = |manager: &str, force: bool| {
        let mut p = PatchParams::apply(manager);
        p.force = force;
        p
    };
    // Create-if-absent, owned by "alice".
    let cm = api
        .patch(
            "settings",
            &apply("alice", false),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "settings", "labels": {"team": "a"}},
                "data": {"a": "1", "b": "2"}})),
        )
        .await
        .unwrap();
    let fields = cm.metadata.managed_fields.clone().unwrap();
    assert_eq!(fields.len(), 1);
    assert_eq!(
        (fields[0].manager.as_deref(), fields[0].operation.as_deref()),
        (Some("alice"), Some("Apply"))
    );
    let v1 = serde_json::to_value(&fields[0].fields_v1).unwrap();
    assert_eq!(
        v1,
        json!({"f:data": {"f:a": {}, "f:b": {}}, "f:metadata": {"f:labels": {"f:team": {}}}})
    );

    // "bob" changing alice's field conflicts, and nothing changes.
    let e = status_of(
        api.patch(
            "settings",
            &apply("bob", false),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "settings"}, "data": {"a": "9", "c": "3"}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
    assert!(
        e.message.contains("conflict with \"alice\": .data.a"),
        "{}",
        e.message
    );
    let causes = e.details.unwrap().causes;
    assert_eq!(causes[0].reason, "FieldManagerConflict");
    assert_eq!(causes[0].field, ".data.a");
    assert_eq!(api.get("settings").await.unwrap().data.unwrap()["a"], "1");

    // Same value: shared ownership, no conflict. Forced: bob takes .data.a.
    api.patch(
        "settings",
        &apply("bob", true),
        &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "settings"}, "data": {"a": "9", "b": "2", "c": "3"}})),
    )
    .await
    .unwrap();
    let cm = api.get("settings").await.unwrap();
    assert_eq!(cm.data.as_ref().unwrap()["a"], "9");

    // Alice drops b and a (no longer hers): b stays (bob owns it too), a stays bob's.
    api.patch(
        "settings",
        &apply("alice", false),
        &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "settings", "labels": {"team": "a"}}, "data": {}})),
    )
    .await
    .unwrap();
    let data = api.get("settings").await.unwrap().data.unwrap();
    assert_eq!(data.keys().collect::<Vec<_>>(), ["a", "b", "c"]);
    // Bob drops c, which only he owned: it goes.
    api.patch(
        "settings",
        &apply("bob", false),
        &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "settings"}, "data": {"a": "9", "b": "2"}})),
    )
    .await
    .unwrap();
    let data = api.get("settings").await.unwrap().data.unwrap();
    assert_eq!(data.keys().collect::<Vec<_>>(), ["a", "b"]);

    // An Update manager (a merge patch) owns what it changed; apply then conflicts with it.
    api.patch(
        "settings",
        &PatchParams {
            field_manager: Some("editor".into()),
            ..Default::default()
        },
        &Patch::Merge(json!({"data": {"b": "edited"}})),
    )
    .await
    .unwrap();
    let cm = api.get("settings").await.unwrap();
    let editor = cm
        .metadata
        .managed_fields
        .unwrap()
        .into_iter()
        .find(|e| e.manager.as_deref() == Some("editor"))
        .unwrap();
    assert_eq!(editor.operation.as_deref(), Some("Update"));
    let e = status_of(
        api.patch(
            "settings",
            &apply("bob", false),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "settings"}, "data": {"a": "9", "b": "2"}})),
        )
        .await
        .unwrap_err(),
    );
    assert!(
        e.message.contains("conflict with \"editor\": .data.b"),
        "{}",
        e.message
    );

    // fieldManager is required; managedFields may not be applied.
    let e = status_of(
        api.patch(
            "settings",
            &PatchParams::default(),
            &Patch::Apply(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}}),
            ),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(e.code, 422);

    // What an apply makes is validated as a create's object is (only the
    // managedFields the server computed are left out): a value of the
    // wrong type is refused, on an object that exists and on a new one,
    // and nothing is written.
    for name in ["settings", "fresh"] {
        let e = status_of(
            api.patch(
                name,
                &apply("carol", true),
                &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": name}, "data": {"c": 5}})),
            )
            .await
            .unwrap_err(),
        );
        assert_eq!(
            (e.code, e.reason.as_str()),
            (422, "Invalid"),
            "{}",
            e.message
        );
    }
    let settings = api.get("settings").await.unwrap();
    assert!(!settings.data.unwrap_or_default().contains_key("c"));
    assert!(api.get_opt("fresh").await.unwrap().is_none());
}

async fn kubectl_server_side_apply_and_migration_from_client_side(store: Store) {
    let s = Server::start_on(store, &[]);
    let file = write(s.dir.path(), "web.yaml", DEPLOYMENT_V1);
    let path = file.to_str().unwrap();
    // Client-side first, then server-side: kubectl's second PATCH migrates last-applied.
    s.ok(&["apply", "-f", path]);
    let out = s.ok(&["apply", "--server-side", "-f", path]);
    assert!(out.contains("serverside-applied"), "{out}");
    let managers = s.ok(&[
        "get",
        "deploy",
        "web",
        "--show-managed-fields",
        "-o",
        "jsonpath={.metadata.managedFields[*].manager}",
    ]);
    assert!(managers.contains("kubectl"), "{managers}");

    // Server-side apply of an edit: removed env var and container go.
    std::fs::write(&file, DEPLOYMENT_V2).unwrap();
    s.ok(&["apply", "--server-side", "-f", path]);
    let api: Api<Deployment> = Api::default_namespaced(s.client().await);
    let pod = api
        .get("web")
        .await
        .unwrap()
        .spec
        .unwrap()
        .template
        .spec
        .unwrap();
    assert_eq!(pod.containers.len(), 1);
    let env: Vec<_> = pod.containers[0]
        .env
        .as_ref()
        .unwrap()
        .iter()
        .map(|e| e.name.as_str())
        .collect();
    assert_eq!(env, ["MODE"]);

    // Another manager takes a field; kubectl reports the conflict, then forces.
    api.patch(
        "web",
        &PatchParams::apply("rollout-bot").force(),
        &Patch::Apply(json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"template": {"spec": {"containers": [{"name": "web", "image": "nginx:canary"}]}}}})),
    )
    .await
    .unwrap();
    let out = s.kubectl(&["apply", "--server-side", "-f", path]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("conflict") && stderr.contains("rollout-bot"),
        "{stderr}"
    );
    s.ok(&["apply", "--server-side", "--force-conflicts", "-f", path]);
    let image = s.ok(&[
        "get",
        "deploy",
        "web",
        "-o",
        "jsonpath={.spec.template.spec.containers[0].image}",
    ]);
    assert_eq!(image, "nginx:1.28");
}

async fn status_writes_record_their_manager_under_the_status_subresource(store: Store) {
    let s = Server::start_on(store, &[]);
    let file = write(s.dir.path(), "web.yaml", DEPLOYMENT_V1);
    s.ok(&["apply", "-f", file.to_str().unwrap()]);
    s.ok(&[
        "patch",
        "deploy",
        "web",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"observedGeneration":1}}"#,
        "--field-manager=status-bot",
    ]);
    let api: Api<Deployment> = Api::default_namespaced(s.client().await);
    let web = api.get("web").await.unwrap();
    let entries = web.metadata.managed_fields.unwrap_or_default();
    let bot = entries
        .iter()
        .find(|e| e.manager.as_deref() == Some("status-bot"))
        .expect("an entry for the status writer");
    assert_eq!(bot.subresource.as_deref(), Some("status"));
    assert_eq!(bot.operation.as_deref(), Some("Update"));
    let fields = serde_json::to_value(&bot.fields_v1).unwrap();
    assert_eq!(fields, json!({"f:status": {"f:observedGeneration": {}}}));
    // The main resource's manager keeps its spec fields, not status.
    let main = entries
        .iter()
        .find(|e| e.manager.as_deref() == Some("kubectl-client-side-apply"))
        .expect("kubectl's entry");
    assert!(main.subresource.is_none());
}
