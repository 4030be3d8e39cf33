//! API behaviours beyond CRUD, through kube-rs: generateName, dryRun,
//! generation, deletecollection, event field selectors, finalizers,
//! terminating namespaces, list/watch option validation, Table and
//! PartialObjectMetadata responses.

mod common;

use common::status_of;

use std::time::Duration;

use common::Server;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Namespace};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::{Client, ResourceExt};
use serde_json::json;

fn obj<K: serde::de::DeserializeOwned>(v: serde_json::Value) -> K {
    serde_json::from_value(v).expect("valid object")
}

async fn get_raw(
    client: &Client,
    path: &str,
    accept: &str,
) -> Result<serde_json::Value, kube::Error> {
    let req = http::Request::get(path)
        .header("accept", accept)
        .body(Vec::new())
        .unwrap();
    client
        .request_text(req)
        .await
        .map(|t| serde_json::from_str(&t).expect("JSON body"))
}

#[tokio::test]
async fn generate_name_dry_run_and_generation() {
    let s = Server::start();
    let c = s.client().await;
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), "default");
    let generated = cms
        .create(
            &PostParams::default(),
            &obj(json!({"metadata": {"generateName": "gen-"}})),
        )
        .await
        .unwrap();
    let name = generated.name_any();
    assert!(name.starts_with("gen-") && name.len() == 9, "{name}");

    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let would_be = cms
        .create(&dry, &obj(json!({"metadata": {"name": "dry"}})))
        .await
        .unwrap();
    assert_eq!(would_be.name_any(), "dry");
    assert!(
        cms.get_opt("dry").await.unwrap().is_none(),
        "dryRun wrote nothing"
    );

    let deploys: Api<Deployment> = Api::namespaced(c.clone(), "default");
    let d = deploys
        .create(&PostParams::default(), &obj(json!({"metadata": {"name": "web"}, "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}})))
        .await
        .unwrap();
    assert_eq!(d.metadata.generation, Some(1));
    let labelled = deploys
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
        )
        .await
        .unwrap();
    assert_eq!(
        labelled.metadata.generation,
        Some(1),
        "metadata changes do not bump generation"
    );
    let scaled = deploys
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 5}})),
        )
        .await
        .unwrap();
    assert_eq!(scaled.metadata.generation, Some(2), "spec changes do");
    // A no-op write creates no new revision.
    let again = deploys
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 5}})),
        )
        .await
        .unwrap();
    assert_eq!(again.resource_version(), scaled.resource_version());
}

#[tokio::test]
async fn delete_collection_honours_selectors() {
    let s = Server::start();
    let cms: Api<ConfigMap> = Api::namespaced(s.client().await, "default");
    for (name, batch) in [("a", "x"), ("b", "x"), ("c", "y")] {
        cms.create(
            &PostParams::default(),
            &obj(json!({"metadata": {"name": name, "labels": {"batch": batch}}})),
        )
        .await
        .unwrap();
    }
    cms.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels("batch=x"),
    )
    .await
    .unwrap();
    let left = common::names(&cms).await;
    assert_eq!(left, vec!["c"]);
}

/// A label-selected watch sees an object arrive when it starts to match
/// (ADDED), its changes while it matches, and leave when it stops
/// (DELETED), with every field as a get serves it; combined with a field
/// selector, the same.
#[tokio::test]
async fn selected_watches_see_objects_enter_and_leave() {
    let s = Server::start();
    let cms: Api<ConfigMap> = Api::namespaced(s.client().await, "default");
    let label = |v: &str| json!({"metadata": {"labels": {"tier": v}}});
    let merge = PatchParams::default();
    for params in [
        WatchParams::default().labels("tier=web"),
        WatchParams::default()
            .labels("tier in (web)")
            .fields("metadata.name!=other"),
    ] {
        let version = cms
            .list(&ListParams::default())
            .await
            .unwrap()
            .metadata
            .resource_version
            .unwrap();
        let mut events = cms.watch(&params, &version).await.unwrap().boxed();
        cms.create(
            &PostParams::default(),
            &obj(json!({"metadata": {"name": "a", "labels": {"tier": "web"}}})),
        )
        .await
        .unwrap();
        cms.create(
            &PostParams::default(),
            &obj(json!({"metadata": {"name": "b", "labels": {"tier": "db"}}})),
        )
        .await
        .unwrap();
        let changed = cms
            .patch("a", &merge, &Patch::Merge(json!({"data": {"k": "v"}})))
            .await
            .unwrap();
        cms.patch("a", &merge, &Patch::Merge(label("db")))
            .await
            .unwrap();
        cms.patch("b", &merge, &Patch::Merge(label("web")))
            .await
            .unwrap();
        // A list under the same labels: b alone, as a get serves it.
        let listed = cms
            .list(&ListParams::default().labels("tier=web"))
            .await
            .unwrap()
            .items;
        assert_eq!(listed, vec![cms.get("b").await.unwrap()]);
        cms.delete("b", &DeleteParams::default()).await.unwrap();
        cms.delete("a", &DeleteParams::default()).await.unwrap();

        let mut seen = Vec::new();
        while seen.len() < 5 {
            let event = tokio::time::timeout(Duration::from_secs(10), events.next())
                .await
                .expect("an event within 10 s")
                .expect("the watch goes on")
                .expect("a watch event");
            let (kind, cm) = match event {
                WatchEvent::Added(cm) => ("ADDED", cm),
                WatchEvent::Modified(cm) => ("MODIFIED", cm),
                WatchEvent::Deleted(cm) => ("DELETED", cm),
                other => panic!("unexpected {other:?}"),
            };
            if kind == "MODIFIED" {
                // Served as a get serves it: type meta, data, version.
                assert_eq!(cm, changed, "{params:?}");
            }
            seen.push((kind, cm.name_any(), cm.labels()["tier"].clone()));
        }
        let expected = [
            ("ADDED", "a", "web"),
            ("MODIFIED", "a", "web"),
            ("DELETED", "a", "db"),
            ("ADDED", "b", "web"),
            ("DELETED", "b", "web"),
        ];
        let seen: Vec<(&str, &str, &str)> = seen
            .iter()
            .map(|(k, n, t)| (*k, n.as_str(), t.as_str()))
            .collect();
        assert_eq!(seen, expected, "{params:?}");
    }
}

#[tokio::test]
async fn events_are_selected_by_involved_object() {
    let s = Server::start();
    let events: Api<Event> = Api::namespaced(s.client().await, "default");
    for (name, target) in [("e1", "a"), ("e2", "b")] {
        events
            .create(&PostParams::default(), &obj(json!({"metadata": {"name": name}, "reason": "Tested", "message": "m",
                "involvedObject": {"kind": "ConfigMap", "name": target, "namespace": "default", "uid": format!("uid-{target}")}})))
            .await
            .unwrap();
    }
    let selected = events
        .list(&ListParams::default().fields("involvedObject.uid=uid-a,involvedObject.kind=ConfigMap,involvedObject.name=a,involvedObject.namespace=default"))
        .await
        .unwrap();
    assert_eq!(
        selected
            .items
            .iter()
            .map(|e| e.name_any())
            .collect::<Vec<_>>(),
        vec!["e1"]
    );
    let e = status_of(
        events
            .list(&ListParams::default().fields("spec.nothing=1"))
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (400, "BadRequest"));
}

#[tokio::test]
async fn finalizers_hold_deletion_and_namespaces_terminate() {
    let s = Server::start();
    let c = s.client().await;
    let namespaces: Api<Namespace> = Api::all(c.clone());
    namespaces
        .create(
            &PostParams::default(),
            &obj(json!({"metadata": {"name": "team"}})),
        )
        .await
        .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), "team");
    cms.create(
        &PostParams::default(),
        &obj(json!({"metadata": {"name": "held", "finalizers": ["example.com/hold"]}})),
    )
    .await
    .unwrap();

    cms.delete("held", &DeleteParams::default()).await.unwrap();
    let held = cms.get("held").await.unwrap();
    assert!(held.metadata.deletion_timestamp.is_some());
    let e = status_of(
        cms.patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"finalizers": ["example.com/hold", "example.com/more"]}}),
            ),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));

    namespaces
        .delete("team", &DeleteParams::default())
        .await
        .unwrap();
    let ns = namespaces.get("team").await.unwrap();
    assert_eq!(
        ns.status.and_then(|s| s.phase).as_deref(),
        Some("Terminating")
    );
    let e = create_refused(&cms, "late").await;
    assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"));

    // Removing the last finalizer completes the object's deletion, then the namespace's.
    let remove_finalizer = Patch::Json::<()>(
        serde_json::from_value(json!([
            {"op": "test", "path": "/metadata/finalizers/0", "value": "example.com/hold"},
            {"op": "remove", "path": "/metadata/finalizers/0"}]))
        .unwrap(),
    );
    cms.patch("held", &PatchParams::default(), &remove_finalizer)
        .await
        .unwrap();
    assert!(cms.get_opt("held").await.unwrap().is_none());
    namespace_gone(&namespaces, "team").await;
}

/// The Status refusing the create of ConfigMap `name`.
async fn create_refused(cms: &Api<ConfigMap>, name: &str) -> kube::core::Status {
    status_of(
        cms.create(
            &PostParams::default(),
            &obj(json!({"metadata": {"name": name}})),
        )
        .await
        .unwrap_err(),
    )
}

/// Waits (20 s at most) until namespace `name` is gone.
async fn namespace_gone(namespaces: &Api<Namespace>, name: &str) {
    tokio::time::timeout(Duration::from_secs(20), async {
        while namespaces.get_opt(name).await.unwrap().is_some() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the namespace goes once its content is gone");
}

/// A namespace deleted and created again takes content at once, and
/// refuses it again as soon as it terminates a second time.
#[tokio::test]
async fn a_namespace_created_again_takes_content_again() {
    let s = Server::start();
    let c = s.client().await;
    let namespaces: Api<Namespace> = Api::all(c.clone());
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), "again");
    for round in 0..2 {
        namespaces
            .create(
                &PostParams::default(),
                &obj(json!({"metadata": {"name": "again"}})),
            )
            .await
            .unwrap();
        cms.create(
            &PostParams::default(),
            &obj(json!({"metadata": {"name": format!("c{round}")}})),
        )
        .await
        .unwrap();
        namespaces
            .delete("again", &DeleteParams::default())
            .await
            .unwrap();
        let e = create_refused(&cms, "late").await;
        assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"));
        namespace_gone(&namespaces, "again").await;
        let e = create_refused(&cms, "orphan").await;
        assert_eq!((e.code, e.reason.as_str()), (404, "NotFound"));
    }
}

#[tokio::test]
async fn list_and_watch_options_are_validated() {
    let s = Server::start();
    let c = s.client().await;
    let base = "/api/v1/namespaces/default/configmaps";
    for query in [
        "watch=true&sendInitialEvents=true", // needs resourceVersionMatch=NotOlderThan
        "watch=true&resourceVersionMatch=NotOlderThan&resourceVersion=0", // needs sendInitialEvents
        "sendInitialEvents=true&resourceVersionMatch=NotOlderThan", // forbidden for list
        "resourceVersionMatch=Exact",        // needs a resourceVersion
    ] {
        let e = status_of(
            get_raw(&c, &format!("{base}?{query}"), "application/json")
                .await
                .unwrap_err(),
        );
        assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"), "{query}");
    }
}

#[tokio::test]
async fn table_and_metadata_representations() {
    let s = Server::start();
    let c = s.client().await;
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), "default");
    cms.create(
        &PostParams::default(),
        &obj(json!({"metadata": {"name": "t"}, "data": {"a": "1", "b": "2"}})),
    )
    .await
    .unwrap();

    let table = get_raw(
        &c,
        "/api/v1/namespaces/default/configmaps?fieldSelector=metadata.name%3Dt",
        "application/json;as=Table;v=v1;g=meta.k8s.io",
    )
    .await
    .unwrap();
    assert_eq!(table["kind"], "Table");
    let columns: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(columns, vec!["Name", "Data", "Age"]);
    assert_eq!(table["rows"][0]["cells"][0], "t");
    assert_eq!(table["rows"][0]["cells"][1], 2);
    assert_eq!(table["rows"][0]["object"]["kind"], "PartialObjectMetadata");

    let metadata = cms
        .list_metadata(&ListParams::default().fields("metadata.name=t"))
        .await
        .unwrap();
    assert_eq!(metadata.items.len(), 1);
    assert_eq!(metadata.items[0].name_any(), "t");
    // A metadata watch (kube-rs `watch_metadata`), filtered and not: the
    // object's metadata with its managedFields, and nothing else.
    for fields in ["metadata.name=t", ""] {
        let params = WatchParams::default().fields(fields);
        let mut events = cms
            .watch_metadata(
                &params,
                &metadata.metadata.resource_version.clone().unwrap(),
            )
            .await
            .unwrap()
            .boxed();
        cms.patch(
            "t",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"a": format!("1{fields}")}})),
        )
        .await
        .unwrap();
        let event = tokio::time::timeout(Duration::from_secs(5), events.try_next())
            .await
            .expect("an event within 5 s")
            .unwrap();
        let Some(WatchEvent::Modified(m)) = event else {
            panic!("{fields:?}: {event:?}");
        };
        assert_eq!(
            (m.name_any(), m.types.unwrap().kind),
            ("t".to_string(), "PartialObjectMetadata".to_string())
        );
        assert!(
            !m.metadata.managed_fields.unwrap_or_default().is_empty(),
            "{fields:?}"
        );
    }

    // A write's reply in the representation asked for (as kube-apiserver's
    // transformResponseObject), the first acceptable one of the list.
    let patch = http::Request::patch("/api/v1/namespaces/default/configmaps/t")
        .header("content-type", "application/merge-patch+json")
        .header(
            "accept",
            "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1, application/json",
        )
        .body(br#"{"data":{"a":"3"}}"#.to_vec())
        .unwrap();
    let reply: serde_json::Value =
        serde_json::from_str(&c.request_text(patch).await.unwrap()).unwrap();
    assert_eq!(reply["kind"], "PartialObjectMetadata");
    assert_eq!(reply["metadata"]["name"], "t");
    assert!(reply.get("data").is_none(), "{reply}");
    let stored = cms.get("t").await.unwrap();
    assert_eq!(
        reply["metadata"]["resourceVersion"].as_str(),
        stored.resource_version().as_deref()
    );
    assert_eq!(stored.data.unwrap()["a"], "3");
    // The generation a writer reads from such a reply moves with the spec.
    let deployments: Api<Deployment> = Api::namespaced(c.clone(), "default");
    deployments
        .create(
            &PostParams::default(),
            &obj(json!({"metadata": {"name": "d"}, "spec": {
                "selector": {"matchLabels": {"app": "d"}},
                "template": {"metadata": {"labels": {"app": "d"}},
                             "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}})),
        )
        .await
        .unwrap();
    let patch = http::Request::patch("/apis/apps/v1/namespaces/default/deployments/d")
        .header("content-type", "application/merge-patch+json")
        .header(
            "accept",
            "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1, application/json",
        )
        .body(br#"{"spec":{"replicas":3}}"#.to_vec())
        .unwrap();
    let reply: serde_json::Value =
        serde_json::from_str(&c.request_text(patch).await.unwrap()).unwrap();
    assert_eq!(reply["kind"], "PartialObjectMetadata");
    assert_eq!(reply["metadata"]["generation"], 2);
    assert!(reply.get("spec").is_none(), "{reply}");
}

/// What clients assume of a new namespace and a new pod, and what a
/// delete answers, as upstream: a `default` ServiceAccount and the
/// `kube-root-ca.crt` ConfigMap in every namespace (back when deleted), a
/// pod `Pending` with its QoS class, the deleted pod itself (a typed
/// client decodes it) but a Status for a deleted ConfigMap.
#[tokio::test]
async fn namespace_defaults_pod_status_and_delete_answers() {
    use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
    let s = Server::start();
    let c = s.client().await;
    let namespaces: Api<Namespace> = Api::all(c.clone());
    namespaces
        .create(
            &PostParams::default(),
            &obj(json!({"metadata": {"name": "fresh"}})),
        )
        .await
        .unwrap();
    let accounts: Api<ServiceAccount> = Api::namespaced(c.clone(), "fresh");
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), "fresh");
    let appear = |what: &'static str| {
        let (accounts, cms) = (accounts.clone(), cms.clone());
        async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
            loop {
                let found = match what {
                    "sa" => accounts.get_opt("default").await.unwrap().is_some(),
                    _ => cms.get_opt("kube-root-ca.crt").await.unwrap().is_some(),
                };
                if found {
                    return;
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "{what} never appeared"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    appear("sa").await;
    appear("cm").await;
    let ca = cms.get("kube-root-ca.crt").await.unwrap();
    let pem = &ca.data.unwrap()["ca.crt"];
    assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"), "{pem}");
    accounts
        .delete("default", &DeleteParams::default())
        .await
        .unwrap();
    appear("sa").await;

    let pods: Api<Pod> = Api::namespaced(c.clone(), "fresh");
    let pod = pods
        .create(
            &PostParams::default(),
            &obj(json!({"metadata": {"name": "p1"},
                        "spec": {"containers": [{"name": "c", "image": "nginx",
                            "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]},
                        "status": {"phase": "Running"}})),
        )
        .await
        .unwrap();
    let status = pod.status.unwrap();
    assert_eq!(status.phase.as_deref(), Some("Pending"));
    assert_eq!(status.qos_class.as_deref(), Some("Guaranteed"));
    let deleted = pods.delete("p1", &DeleteParams::default()).await.unwrap();
    let pod = deleted.left().expect("a deleted pod answers the pod");
    assert_eq!(pod.name_any(), "p1");

    cms.create(
        &PostParams::default(),
        &obj(json!({"metadata": {"name": "c1"}})),
    )
    .await
    .unwrap();
    let deleted = cms.delete("c1", &DeleteParams::default()).await.unwrap();
    let status = deleted
        .right()
        .expect("a deleted ConfigMap answers a Status");
    assert_eq!(status.details.unwrap().name, "c1");
}

/// A new object answers the status upstream answers before any controller
/// wrote one (Go always writes some of its status fields), whatever
/// status the client sent; clients read it (the official Python client's
/// own tests expect a Service's create to answer a status).
#[tokio::test]
async fn new_objects_answer_upstreams_first_status() {
    let s = Server::start();
    let c = s.client().await;
    let template = json!({"metadata": {"labels": {"app": "a"}},
                          "spec": {"containers": [{"name": "c", "image": "nginx"}]}});
    let selector = json!({"matchLabels": {"app": "a"}});
    let cases = [
        (
            "/apis/apps/v1/namespaces/default/deployments",
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
                "spec": {"selector": selector, "template": template}, "status": {"replicas": 5}}),
            json!({}),
        ),
        (
            "/apis/apps/v1/namespaces/default/replicasets",
            json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "rs"},
                "spec": {"selector": selector, "template": template}}),
            json!({"replicas": 0}),
        ),
        (
            "/apis/apps/v1/namespaces/default/statefulsets",
            json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "ss"},
                "spec": {"serviceName": "ss", "selector": selector, "template": template}}),
            json!({"replicas": 0, "availableReplicas": 0}),
        ),
        (
            "/apis/apps/v1/namespaces/default/daemonsets",
            json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "ds"},
                "spec": {"selector": selector, "template": template}}),
            json!({"currentNumberScheduled": 0, "numberMisscheduled": 0,
                "desiredNumberScheduled": 0, "numberReady": 0}),
        ),
        (
            "/api/v1/namespaces/default/services",
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc"},
                "spec": {"ports": [{"port": 80}]}}),
            json!({"loadBalancer": {}}),
        ),
        (
            "/apis/networking.k8s.io/v1/namespaces/default/ingresses",
            json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": "in"},
                "spec": {"defaultBackend": {"service": {"name": "svc", "port": {"number": 80}}}}}),
            json!({"loadBalancer": {}}),
        ),
        (
            "/api/v1/namespaces/default/persistentvolumeclaims",
            json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "pvc"},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}),
            json!({"phase": "Pending"}),
        ),
        (
            "/apis/autoscaling/v1/namespaces/default/horizontalpodautoscalers",
            json!({"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "h"},
                "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d"},
                         "maxReplicas": 3}}),
            json!({"currentReplicas": 0, "desiredReplicas": 0}),
        ),
    ];
    for (path, body, want) in cases {
        let req = http::Request::post(path)
            .header("content-type", "application/json")
            .body(serde_json::to_vec(&body).unwrap())
            .unwrap();
        let created: serde_json::Value =
            serde_json::from_str(&c.request_text(req).await.unwrap()).unwrap();
        assert_eq!(created["status"], want, "created at {path}");
        let name = body["metadata"]["name"].as_str().unwrap();
        let read = get_raw(&c, &format!("{path}/{name}"), "application/json")
            .await
            .unwrap();
        assert_eq!(read["status"], want, "read at {path}");
    }
}

/// A field sent as `null` is stored as upstream decodes it: gone from a
/// built-in object (Go's zero value, not written), defaulted first; in a
/// custom resource pruned unless its schema says `nullable` or gives a
/// default.
#[tokio::test]
async fn null_fields_are_dropped_as_upstream_decodes_them() {
    let s = Server::start();
    let c = s.client().await;
    let post = |path: &str, body: serde_json::Value| {
        http::Request::post(path)
            .header("content-type", "application/json")
            .body(serde_json::to_vec(&body).unwrap())
            .unwrap()
    };
    let pod: serde_json::Value = serde_json::from_str(
        &c.request_text(post(
            "/api/v1/namespaces/default/pods",
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": null},
                "spec": {"containers": [{"name": "c", "image": "busybox", "workingDir": null,
                                         "terminationMessagePath": null}]}}),
        ))
        .await
        .unwrap(),
    )
    .unwrap();
    let container = &pod["spec"]["containers"][0];
    assert_eq!(container.get("workingDir"), None, "{container}");
    assert_eq!(
        container["terminationMessagePath"], "/dev/termination-log",
        "{container}"
    );
    assert_eq!(pod["metadata"].get("labels"), None);
    // A merge patch replaces lists whole: nulls inside their items stay
    // in the patch and must not reach the stored object.
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::default_namespaced(c.clone());
    let status = json!({"status": {"containerStatuses": [{"name": "c", "image": "busybox",
        "imageID": "", "ready": false, "restartCount": 0,
        "state": {"waiting": {"reason": "ContainerCreating", "message": null}}}]}});
    pods.patch_status("p", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    let read = get_raw(&c, "/api/v1/namespaces/default/pods/p", "application/json")
        .await
        .unwrap();
    assert_eq!(
        read["status"]["containerStatuses"][0]["state"],
        json!({"waiting": {"reason": "ContainerCreating"}})
    );

    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {
                        "plain": {"type": "string"},
                        "defaulted": {"type": "string", "default": "x"},
                        "nullable": {"type": "string", "nullable": true},
                        "labels": {"type": "object",
                                   "additionalProperties": {"type": "string"}}}}}}}}]}});
    c.request_text(post(
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        crd,
    ))
    .await
    .unwrap();
    let widget: serde_json::Value = serde_json::from_str(
        &c.request_text(post(
            "/apis/example.com/v1/namespaces/default/widgets",
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
                "spec": {"plain": null, "defaulted": null, "nullable": null,
                         "labels": {"a": null, "b": "kept"}}}),
        ))
        .await
        .unwrap(),
    )
    .unwrap();
    assert_eq!(
        widget["spec"],
        json!({"defaulted": "x", "nullable": null, "labels": {"b": "kept"}})
    );
}
