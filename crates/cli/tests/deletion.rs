//! Deletion and garbage collection: propagation policies across an owner
//! chain, dependents of vanished owners, the kube-rs finalizer helper,
//! namespaces held by finalizers, and kubectl's --cascade.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Server, status_of};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::json;

fn cm(v: serde_json::Value) -> ConfigMap {
    serde_json::from_value(v).expect("valid ConfigMap")
}

async fn create(
    api: &Api<ConfigMap>,
    name: &str,
    owners: &[&ConfigMap],
    extra: serde_json::Value,
) -> ConfigMap {
    let refs: Vec<_> = owners
        .iter()
        .map(|o| {
            json!({"apiVersion": "v1", "kind": "ConfigMap", "name": o.name_any(),
                   "uid": o.uid().unwrap(), "blockOwnerDeletion": true})
        })
        .collect();
    let mut body = json!({"metadata": {"name": name, "ownerReferences": refs}});
    if let Some(m) = extra.as_object() {
        for (k, v) in m {
            body["metadata"][k] = v.clone();
        }
    }
    api.create(&PostParams::default(), &cm(body)).await.unwrap()
}

/// top ← middle ← bottom, each blocking its owner's deletion.
async fn chain(api: &Api<ConfigMap>, bottom_extra: serde_json::Value) -> [ConfigMap; 3] {
    let top = create(api, "top", &[], json!({})).await;
    let middle = create(api, "middle", &[&top], json!({})).await;
    let bottom = create(api, "bottom", &[&middle], bottom_extra).await;
    [top, middle, bottom]
}

async fn wait_until<F, Fut>(what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    tokio::time::timeout(Duration::from_secs(20), async {
        while !cond().await {
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("timed out waiting for {what}"));
}

async fn exists(api: &Api<ConfigMap>, name: &str) -> bool {
    api.get_opt(name).await.unwrap().is_some()
}

#[tokio::test]
async fn foreground_deletion_waits_for_the_whole_chain() {
    let s = Server::start();
    let api: Api<ConfigMap> = Api::default_namespaced(s.client().await);
    // The bottom holds a finalizer, so the cascade stalls there.
    chain(&api, json!({"finalizers": ["example.com/hold"]})).await;

    api.delete("top", &DeleteParams::foreground())
        .await
        .unwrap();
    let top = api.get("top").await.unwrap();
    assert!(top.metadata.deletion_timestamp.is_some());
    assert!(top.finalizers().contains(&"foregroundDeletion".to_string()));

    wait_until("the cascade to reach the bottom", || async {
        api.get("bottom")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    })
    .await;
    // Blocked: the middle waits for the bottom, the top for the middle.
    let middle = api.get("middle").await.unwrap();
    assert!(middle.metadata.deletion_timestamp.is_some());
    assert!(
        middle
            .finalizers()
            .contains(&"foregroundDeletion".to_string())
    );
    assert!(exists(&api, "top").await);

    api.patch(
        "bottom",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    wait_until("the chain to go, bottom up", || async {
        !exists(&api, "top").await
    })
    .await;
    assert!(!exists(&api, "middle").await && !exists(&api, "bottom").await);
}

#[tokio::test]
async fn orphan_deletion_keeps_dependents_and_background_removes_them() {
    let s = Server::start();
    let api: Api<ConfigMap> = Api::default_namespaced(s.client().await);
    let [_, middle, _] = chain(&api, json!({})).await;

    api.delete("top", &DeleteParams::orphan()).await.unwrap();
    wait_until("the orphaning owner to go", || async {
        !exists(&api, "top").await
    })
    .await;
    let orphaned = api.get("middle").await.unwrap();
    assert!(orphaned.owner_references().is_empty(), "{orphaned:?}");
    assert_eq!(
        api.get("bottom").await.unwrap().owner_references()[0].uid,
        middle.uid().unwrap(),
        "only the deleted owner is cut loose"
    );

    // Background (kube-rs's default {}): the owner goes at once, then its dependents.
    api.delete("middle", &DeleteParams::default())
        .await
        .unwrap();
    assert!(!exists(&api, "middle").await);
    wait_until("the dependent to be collected", || async {
        !exists(&api, "bottom").await
    })
    .await;
}

#[tokio::test]
async fn dependents_follow_owner_uids() {
    let s = Server::start();
    let api: Api<ConfigMap> = Api::default_namespaced(s.client().await);
    let a = create(&api, "a", &[], json!({})).await;
    let b = create(&api, "b", &[], json!({})).await;
    create(&api, "shared", &[&a, &b], json!({})).await;
    // An owner uid that never existed: the dependent is collected.
    let ghost =
        cm(json!({"metadata": {"name": "ghost", "uid": "00000000-0000-0000-0000-000000000000"}}));
    create(&api, "dangling", &[&ghost], json!({})).await;
    wait_until("the dangling dependent to be collected", || async {
        !exists(&api, "dangling").await
    })
    .await;

    // One of two owners goes: the dependent stays, referencing the other.
    api.delete("a", &DeleteParams::default()).await.unwrap();
    wait_until("the vanished owner's reference to go", || async {
        api.get("shared").await.unwrap().owner_references().len() == 1
    })
    .await;
    assert_eq!(
        api.get("shared").await.unwrap().owner_references()[0].uid,
        b.uid().unwrap()
    );
    // A new object with the old name is a different owner: no adoption by name.
    create(&api, "a", &[], json!({})).await;
    api.delete("b", &DeleteParams::default()).await.unwrap();
    wait_until("the last owner's dependent to go", || async {
        !exists(&api, "shared").await
    })
    .await;
    assert!(exists(&api, "a").await);
}

#[tokio::test]
async fn the_kube_rs_finalizer_helper_runs_cleanup_before_deletion() {
    let s = Server::start();
    let client = s.client().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client.clone());
    const NAME: &str = "flotilla.test/cleanup";

    async fn reconcile(
        obj: Arc<ConfigMap>,
        api: Arc<Api<ConfigMap>>,
    ) -> Result<Action, kube::runtime::finalizer::Error<kube::Error>> {
        let records = (*api).clone();
        finalizer(&api, NAME, obj, |event| async move {
            match event {
                Finalizer::Apply(_) => Ok(Action::await_change()),
                Finalizer::Cleanup(o) => {
                    // Leaves a record that cleanup ran, before the finalizer goes.
                    let record =
                        cm(json!({"metadata": {"name": format!("cleaned-{}", o.name_any())}}));
                    match records.create(&PostParams::default(), &record).await {
                        Ok(_) => Ok(Action::await_change()),
                        Err(kube::Error::Api(s)) if s.code == 409 => Ok(Action::await_change()),
                        Err(e) => Err(e),
                    }
                }
            }
        })
        .await
    }
    let watched = Api::<ConfigMap>::default_namespaced(client.clone());
    let controller = tokio::spawn(
        Controller::new(watched, watcher::Config::default().labels("managed=yes"))
            .run(
                reconcile,
                |_, _, _| Action::requeue(Duration::from_millis(200)),
                Arc::new(api.clone()),
            )
            .for_each(|_| async {}),
    );
    api.create(
        &PostParams::default(),
        &cm(json!({"metadata": {"name": "guarded", "labels": {"managed": "yes"}}})),
    )
    .await
    .unwrap();
    // Another finalizer first, so the helper's "add when others exist" path runs too.
    api.create(
        &PostParams::default(),
        &cm(
            json!({"metadata": {"name": "shared", "labels": {"managed": "yes"},
                                 "finalizers": ["example.com/other"]}}),
        ),
    )
    .await
    .unwrap();
    wait_until("the helper to add its finalizer", || async {
        api.get("guarded").await.unwrap().finalizers() == [NAME]
            && api.get("shared").await.unwrap().finalizers() == ["example.com/other", NAME]
    })
    .await;

    api.delete("guarded", &DeleteParams::default())
        .await
        .unwrap();
    wait_until("cleanup and then deletion", || async {
        !exists(&api, "guarded").await
    })
    .await;
    assert!(exists(&api, "cleaned-guarded").await);
    controller.abort();
}

#[tokio::test]
async fn namespaces_terminate_after_content_and_finalizers() {
    let s = Server::start();
    let c: Client = s.client().await;
    let namespaces: Api<Namespace> = Api::all(c.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": "held", "finalizers": ["example.com/ns"]}}),
            )
            .unwrap(),
        )
        .await
        .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), "held");
    for i in 0..5 {
        create(&cms, &format!("c{i}"), &[], json!({})).await;
    }
    namespaces
        .delete("held", &DeleteParams::default())
        .await
        .unwrap();
    wait_until("the content to be removed", || async {
        cms.list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    })
    .await;
    // The namespace controller drops spec.finalizers; the metadata finalizer still holds it.
    wait_until("spec.finalizers to be emptied", || async {
        let ns = namespaces.get("held").await.unwrap();
        ns.spec
            .and_then(|s| s.finalizers)
            .unwrap_or_default()
            .is_empty()
    })
    .await;
    let ns = namespaces.get("held").await.unwrap();
    assert_eq!(
        ns.status.and_then(|s| s.phase).as_deref(),
        Some("Terminating")
    );
    // spec.finalizers cannot be restored through the main endpoint.
    let e = namespaces
        .patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"finalizers": ["example.com/ns", "example.com/late"]}}),
            ),
        )
        .await
        .unwrap_err();
    assert_eq!(status_of(e).code, 422);
    namespaces
        .patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    assert!(namespaces.get_opt("held").await.unwrap().is_none());
}

fn configmap_json(name: &str, owner: Option<(&str, &str)>) -> String {
    let refs = owner
        .map(|(n, uid)| json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": n, "uid": uid, "blockOwnerDeletion": true}]))
        .unwrap_or(json!([]));
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "ownerReferences": refs}}).to_string()
}

#[test]
fn kubectl_cascade_flags() {
    let s = Server::start();
    let create = |body: String| {
        let out = s.kubectl_stdin(&["create", "-f", "-"], Some(&body));
        assert!(out.status.success(), "{out:?}");
    };
    create(configmap_json("owner", None));
    let uid = s.ok(&[
        "get",
        "configmap",
        "owner",
        "-o",
        "jsonpath={.metadata.uid}",
    ]);
    create(configmap_json("dep", Some(("owner", &uid))));
    s.ok(&["delete", "configmap", "owner", "--cascade=orphan"]);
    let owners = s.ok(&[
        "get",
        "configmap",
        "dep",
        "-o",
        "jsonpath={.metadata.ownerReferences}",
    ]);
    assert_eq!(owners.trim(), "", "orphaned");

    create(configmap_json("owner2", None));
    let uid = s.ok(&[
        "get",
        "configmap",
        "owner2",
        "-o",
        "jsonpath={.metadata.uid}",
    ]);
    create(configmap_json("dep2", Some(("owner2", &uid))));
    // kubectl waits for a foreground deletion to finish: the dependent goes first.
    s.ok(&[
        "delete",
        "configmap",
        "owner2",
        "--cascade=foreground",
        "--timeout=20s",
    ]);
    assert!(!s.kubectl(&["get", "configmap", "dep2"]).status.success());
    assert!(s.kubectl(&["get", "configmap", "dep"]).status.success());
}
