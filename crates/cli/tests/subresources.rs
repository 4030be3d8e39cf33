//! The status and scale subresources, for built-ins and CRDs that declare
//! them, and pods' ephemeral containers, through kube-rs and kubectl.

mod common;

use common::{Server, Store, status_of, wait_for};

// The suite runs on the embedded store and on etcd.
crate::on_both_stores!(async status_is_written_only_through_its_subresource, deployments_scale_through_the_subresource, custom_resources_get_the_subresources_their_crd_declares);
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v1::Scale;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use serde_json::json;
use std::time::Duration;

fn deployment(replicas: i32) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}},
        "status": {"replicas": 99}
    }))
    .unwrap()
}

async fn status_is_written_only_through_its_subresource(store: Store) {
    let s = Server::start_on(store, &[]);
    let api: Api<Deployment> = Api::default_namespaced(s.client().await);
    let created = api
        .create(&PostParams::default(), &deployment(2))
        .await
        .unwrap();
    // The client's status is dropped on create: a new Deployment answers
    // the empty status upstream answers.
    assert_eq!(
        created.status,
        Some(Default::default()),
        "status is not set on create"
    );

    // /status changes only .status, whatever else the body says.
    let patched = api
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"replicas": 7}, "status": {"replicas": 2, "readyReplicas": 1}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(patched.spec.as_ref().unwrap().replicas, Some(2));
    assert_eq!(patched.status.as_ref().unwrap().ready_replicas, Some(1));
    assert_eq!(
        patched.metadata.generation,
        Some(1),
        "status writes keep the generation"
    );

    // The main endpoint ignores .status and bumps the generation for spec changes.
    let patched = api
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}, "status": {"readyReplicas": 50}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.spec.as_ref().unwrap().replicas, Some(3));
    assert_eq!(patched.status.as_ref().unwrap().ready_replicas, Some(1));
    assert_eq!(patched.metadata.generation, Some(2));

    // PUT /status with a stale resourceVersion conflicts.
    let mut stale = created.clone();
    stale.status = Some(Default::default());
    let e = api
        .replace_status("web", &PostParams::default(), &stale)
        .await
        .unwrap_err();
    assert_eq!(status_of(e).code, 409);
}

async fn deployments_scale_through_the_subresource(store: Store) {
    let s = Server::start_on(store, &[]);
    let api: Api<Deployment> = Api::default_namespaced(s.client().await);
    api.create(&PostParams::default(), &deployment(2))
        .await
        .unwrap();
    let scale: Scale = api.get_scale("web").await.unwrap();
    assert_eq!(scale.spec.as_ref().unwrap().replicas, Some(2));
    assert_eq!(
        scale.status.as_ref().unwrap().selector.as_deref(),
        Some("app=web")
    );

    let scaled = api
        .patch_scale(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 5}})),
        )
        .await
        .unwrap();
    assert_eq!(scaled.spec.unwrap().replicas, Some(5));
    let d = api.get("web").await.unwrap();
    assert_eq!(d.spec.unwrap().replicas, Some(5));
    assert_eq!(d.metadata.generation, Some(2));

    let e = api
        .patch_scale(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": -1}})),
        )
        .await
        .unwrap_err();
    let e = status_of(e);
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    assert!(e.message.contains("spec.replicas"), "{}", e.message);
    assert_eq!(
        api.get("web").await.unwrap().spec.unwrap().replicas,
        Some(5)
    );

    // kubectl scale, with its resourceVersion precondition.
    s.ok(&["scale", "deployment", "web", "--replicas=1"]);
    assert_eq!(
        api.get("web").await.unwrap().spec.unwrap().replicas,
        Some(1)
    );
    let out = s.kubectl(&[
        "scale",
        "deployment",
        "web",
        "--replicas=4",
        "--resource-version=1",
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("Expected resource version"), "{stderr}");

    // Whoever scales owns the replicas (an entry for the scale
    // subresource), so an applier that leaves them out keeps them: what an
    // HPA set survives the next apply of its workload's manifest.
    let applied = |replicas: Option<i32>| {
        let mut d = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "applied"},
            "spec": {"selector": {"matchLabels": {"app": "applied"}},
                     "template": {"metadata": {"labels": {"app": "applied"}},
                                  "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}});
        if let Some(r) = replicas {
            d["spec"]["replicas"] = json!(r);
        }
        d
    };
    let pp = PatchParams::apply("deployer").force();
    api.patch("applied", &pp, &Patch::Apply(applied(Some(2))))
        .await
        .unwrap();
    s.ok(&["scale", "deployment", "applied", "--replicas=6"]);
    let d = api.get("applied").await.unwrap();
    let entries = d.metadata.managed_fields.unwrap_or_default();
    let scaler = entries
        .iter()
        .find(|e| e.subresource.as_deref() == Some("scale"))
        .unwrap_or_else(|| panic!("no entry for the scale subresource: {entries:?}"));
    assert_eq!(scaler.operation.as_deref(), Some("Update"));
    assert!(
        serde_json::to_string(&scaler.fields_v1)
            .unwrap()
            .contains("f:replicas"),
        "{scaler:?}"
    );
    api.patch("applied", &pp, &Patch::Apply(applied(None)))
        .await
        .unwrap();
    assert_eq!(
        api.get("applied").await.unwrap().spec.unwrap().replicas,
        Some(6),
        "the scaler's replicas kept"
    );
}

async fn custom_resources_get_the_subresources_their_crd_declares(store: Store) {
    let s = Server::start_on(store, &[]);
    let client = s.client().await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": "pools.demo.example.com"},
        "spec": {"group": "demo.example.com", "scope": "Namespaced",
                 "names": {"plural": "pools", "singular": "pool", "kind": "Pool"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                    "subresources": {"status": {}, "scale": {
                        "specReplicasPath": ".spec.size", "statusReplicasPath": ".status.size",
                        "labelSelectorPath": ".status.selector"}},
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
                        "status": {"type": "object", "properties": {
                            "size": {"type": "integer"}, "selector": {"type": "string"}}}}}}}]}
    }))
    .unwrap();
    crds.create(&PostParams::default(), &crd).await.unwrap();
    let gvk = GroupVersionKind::gvk("demo.example.com", "v1", "Pool");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "pools");
    let pools: Api<DynamicObject> = Api::default_namespaced_with(client.clone(), &ar);
    let pool: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "demo.example.com/v1", "kind": "Pool",
        "metadata": {"name": "p"}, "spec": {"size": 2}, "status": {"size": 9}
    }))
    .unwrap();
    wait_for(Duration::from_secs(10), "the CRD to be served", || {
        s.kubectl(&["get", "pools"]).status.success()
    });
    let created = pools.create(&PostParams::default(), &pool).await.unwrap();
    assert!(created.data.get("status").is_none());
    pools
        .patch_status(
            "p",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"size": 2, "selector": "app=pool"}})),
        )
        .await
        .unwrap();

    // A status write keeps only the status, and only the status is held
    // to the schema (apiextensions-apiserver's status validator): a wrong
    // spec alongside is dropped, a wrong status refused.
    pools
        .patch_status(
            "p",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": "many"}, "status": {"selector": "app=pool"}})),
        )
        .await
        .unwrap();
    assert_eq!(pools.get("p").await.unwrap().data["spec"]["size"], json!(2));
    let refused = pools
        .patch_status(
            "p",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"size": "many"}})),
        )
        .await
        .unwrap_err();
    match refused {
        kube::Error::Api(e) => {
            assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"), "{e:?}");
            assert!(e.message.contains("status.size"), "{}", e.message);
        }
        other => panic!("expected 422, got {other:?}"),
    }
    assert_eq!(
        pools.get("p").await.unwrap().data["status"]["size"],
        json!(2)
    );

    let scale: Scale = pools.get_scale("p").await.unwrap();
    assert_eq!(scale.spec.as_ref().unwrap().replicas, Some(2));
    let status = scale.status.unwrap();
    assert_eq!(
        (status.replicas, status.selector.as_deref()),
        (2, Some("app=pool"))
    );
    s.ok(&["scale", "pool", "p", "--replicas=6"]);
    let p = pools.get("p").await.unwrap();
    assert_eq!(p.data["spec"]["size"], json!(6));
    assert_eq!(p.data["status"]["size"], json!(2));

    // Discovery advertises both subresources.
    let resources = s.ok(&["get", "--raw", "/apis/demo.example.com/v1"]);
    common::assert_has(&resources, &["pools/status", "pools/scale"]);
}

/// `pods/ephemeralcontainers` adds containers to a running pod (what
/// `kubectl debug` writes): never changes or removes one, never anything
/// else of the pod; the main endpoint cannot add them.
#[tokio::test]
async fn ephemeral_containers_are_only_added_through_their_subresource() {
    use k8s_openapi::api::core::v1::Pod;
    let s = Server::start();
    let pods: Api<Pod> = Api::default_namespaced(s.client().await);
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "app"},
        "spec": {"containers": [{"name": "app", "image": "busybox"}]}}))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let read = pods.get_ephemeral_containers("app").await.unwrap();
    assert_eq!(read.spec.unwrap().ephemeral_containers, None);

    // A strategic merge patch of the subresource adding `containers`.
    let add = |body: serde_json::Value| {
        let pods = pods.clone();
        async move {
            pods.patch_ephemeral_containers("app", &PatchParams::default(), &Patch::Strategic(body))
                .await
        }
    };
    let debugger = json!({"name": "debugger", "image": "busybox", "command": ["sh"]});
    let added = add(json!({"metadata": {"labels": {"ignored": "yes"}},
                           "spec": {"ephemeralContainers": [debugger]}}))
    .await
    .unwrap();
    let eph = added
        .spec
        .as_ref()
        .unwrap()
        .ephemeral_containers
        .clone()
        .unwrap();
    assert_eq!(eph.len(), 1);
    assert_eq!(eph[0].name, "debugger");
    assert!(
        added.metadata.labels.is_none(),
        "only spec.ephemeralContainers is written: {:?}",
        added.metadata.labels
    );
    let manager = added.metadata.managed_fields.unwrap_or_default();
    assert!(
        manager
            .iter()
            .any(|m| m.subresource.as_deref() == Some("ephemeralcontainers")),
        "{manager:?}"
    );

    // A second one is added beside it (strategic merge keys on the name).
    let both = add(json!({"spec": {"ephemeralContainers": [
        {"name": "second", "image": "busybox"}]}}))
    .await
    .unwrap();
    assert_eq!(both.spec.unwrap().ephemeral_containers.unwrap().len(), 2);

    // Changing, removing or naming one after a container: 422.
    let changed = add(json!({"spec": {"ephemeralContainers": [
        {"name": "debugger", "image": "alpine"}]}}))
    .await
    .unwrap_err();
    let status = status_of(changed);
    assert_eq!(status.code, 422, "{status:?}");
    assert!(
        status.message.contains("may not be changed"),
        "{}",
        status.message
    );
    let clash = add(json!({"spec": {"ephemeralContainers": [
        {"name": "app", "image": "busybox", "ports": [{"containerPort": 80}]}]}}))
    .await
    .unwrap_err();
    let status = status_of(clash);
    assert_eq!(status.code, 422, "{status:?}");
    assert!(
        status.message.contains("Duplicate value") && status.message.contains("ports"),
        "{}",
        status.message
    );

    // The pod itself cannot add one.
    let through_main = pods
        .patch(
            "app",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"ephemeralContainers": [
                {"name": "third", "image": "busybox"}]}})),
        )
        .await
        .unwrap_err();
    assert_eq!(status_of(through_main).code, 422);
}
