//! kube-rs (pinned) against `flotilla apiserver`: CRUD, watchers,
//! a controller, and the API's errors for bad input.

mod common;

use common::status_of;

use std::sync::Arc;
use std::time::Duration;

use common::{Server, Store};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{Controller, WatchStreamExt, controller::Action, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;

// The API suite runs on the embedded store and on etcd.
crate::on_both_stores!(async crud_with_optimistic_concurrency, pagination_with_limit_and_continue, runtime_watcher_list_then_watch, runtime_watcher_streaming_lists, a_controller_reconciles, bad_input_gets_status_errors, watch_from_before_the_window, discovery_and_custom_resources);

fn cm(name: &str, data: serde_json::Value) -> ConfigMap {
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {"app": "t"}}, "data": data}))
    .unwrap()
}

async fn crud_with_optimistic_concurrency(store: Store) {
    let s = Server::start_on(store, &[]);
    let client = s.client().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let created = api
        .create(&PostParams::default(), &cm("k1", json!({"a": "1"})))
        .await
        .unwrap();
    let rv1 = created.resource_version().unwrap();
    assert!(created.uid().is_some() && created.creation_timestamp().is_some());

    let e = status_of(
        api.create(&PostParams::default(), &cm("k1", json!({})))
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (409, "AlreadyExists"));

    let mut updated = created.clone();
    updated.data = Some([("a".to_string(), "2".to_string())].into());
    let updated = api
        .replace("k1", &PostParams::default(), &updated)
        .await
        .unwrap();
    assert_ne!(updated.resource_version().unwrap(), rv1);
    // The first version is stale now.
    let e = status_of(
        api.replace("k1", &PostParams::default(), &created)
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));

    api.patch(
        "k1",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"b": "3"}})),
    )
    .await
    .unwrap();
    let patched = api
        .patch(
            "k1",
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(json!([{"op": "remove", "path": "/data/a"}])).unwrap(),
            ),
        )
        .await
        .unwrap();
    assert_eq!(
        patched.data.unwrap(),
        [("b".to_string(), "3".to_string())].into()
    );

    let listed = api
        .list(&ListParams::default().labels("app=t"))
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 1);
    assert!(listed.metadata.resource_version.is_some());
    let by_field = api
        .list(&ListParams::default().fields("metadata.name=nope"))
        .await
        .unwrap();
    assert!(by_field.items.is_empty());

    api.delete("k1", &DeleteParams::default()).await.unwrap();
    assert!(api.get_opt("k1").await.unwrap().is_none());
    let e = status_of(
        api.delete("k1", &DeleteParams::default())
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (404, "NotFound"));
}

async fn pagination_with_limit_and_continue(store: Store) {
    let s = Server::start_on(store, &[]);
    let api: Api<ConfigMap> = Api::namespaced(s.client().await, "default");
    for i in 0..7 {
        api.create(&PostParams::default(), &cm(&format!("p{i}"), json!({})))
            .await
            .unwrap();
    }
    let mut names = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let mut lp = ListParams::default().limit(3);
        if let Some(t) = &token {
            lp = lp.continue_token(t);
        }
        let page = api.list(&lp).await.unwrap();
        assert!(page.items.len() <= 3);
        names.extend(page.items.iter().map(|c| c.name_any()));
        token = page.metadata.continue_.filter(|t| !t.is_empty());
        if token.is_none() {
            break;
        }
    }
    names.retain(|n| !common::is_cluster_default(n));
    assert_eq!(names.len(), 7);
}

async fn expect_watcher_sees(client: Client, config: watcher::Config) {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    api.create(&PostParams::default(), &cm("before", json!({})))
        .await
        .unwrap();
    let mut stream = watcher(api.clone(), config).applied_objects().boxed();
    let mut seen = Vec::new();
    let writer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        api.create(&PostParams::default(), &cm("after", json!({})))
            .await
            .unwrap();
        api.patch(
            "after",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"x": "1"}})),
        )
        .await
        .unwrap();
    });
    tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(obj) = stream.try_next().await.unwrap() {
            seen.push((obj.name_any(), obj.data.clone().unwrap_or_default().len()));
            if seen.iter().any(|(n, len)| n == "after" && *len == 1) {
                break;
            }
        }
    })
    .await
    .expect("the watcher saw the write");
    writer.await.unwrap();
    assert!(seen.iter().any(|(n, _)| n == "before"), "{seen:?}");
}

async fn runtime_watcher_list_then_watch(store: Store) {
    let s = Server::start_on(store, &[]);
    expect_watcher_sees(s.client().await, watcher::Config::default()).await;
}

async fn runtime_watcher_streaming_lists(store: Store) {
    let s = Server::start_on(store, &[]);
    expect_watcher_sees(
        s.client().await,
        watcher::Config::default().streaming_lists(),
    )
    .await;
}

async fn a_controller_reconciles(store: Store) {
    let s = Server::start_on(store, &[]);
    let client = s.client().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    for i in 0..3 {
        api.create(&PostParams::default(), &cm(&format!("c{i}"), json!({})))
            .await
            .unwrap();
    }
    async fn reconcile(
        obj: Arc<ConfigMap>,
        api: Arc<Api<ConfigMap>>,
    ) -> Result<Action, kube::Error> {
        if obj.labels().get("reconciled").is_none() {
            api.patch(
                &obj.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"reconciled": "yes"}}})),
            )
            .await?;
        }
        Ok(Action::await_change())
    }
    let ctx = Arc::new(api.clone());
    let controller = tokio::spawn(
        Controller::new(api.clone(), watcher::Config::default())
            .run(
                reconcile,
                |_, _, _| Action::requeue(Duration::from_secs(1)),
                ctx,
            )
            .for_each(|_| async {}),
    );
    api.create(&PostParams::default(), &cm("late", json!({})))
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let done = api
                .list(&ListParams::default().labels("reconciled=yes"))
                .await
                .unwrap();
            let mine = done
                .items
                .iter()
                .filter(|c| !common::is_cluster_default(&c.name_any()))
                .count();
            if mine == 4 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("every configmap reconciled");
    controller.abort();
}

async fn raw(
    client: &Client,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: Vec<u8>,
) -> (u16, serde_json::Value) {
    let mut req = http::Request::builder().method(method).uri(path);
    if let Some(ct) = content_type {
        req = req.header("content-type", ct);
    }
    let req = req.body(body).unwrap();
    match client.request_text(req).await {
        Ok(text) => (200, serde_json::from_str(&text).unwrap_or(json!(text))),
        Err(kube::Error::Api(s)) => (s.code, serde_json::to_value(&*s).unwrap()),
        Err(e) => panic!("transport error: {e}"),
    }
}

/// One raw request and the Status it must get back.
struct Case {
    method: &'static str,
    path: String,
    content_type: Option<&'static str>,
    body: Vec<u8>,
    code: u16,
    reason: Option<&'static str>,
}

impl Case {
    fn new(
        method: &'static str,
        path: &str,
        content_type: Option<&'static str>,
        body: impl Into<Vec<u8>>,
    ) -> Self {
        Case {
            method,
            path: path.to_string(),
            content_type,
            body: body.into(),
            code: 200,
            reason: None,
        }
    }

    fn expect(mut self, code: u16, reason: &'static str) -> Self {
        self.code = code;
        self.reason = Some(reason);
        self
    }

    /// Sends the request, checks code and reason, returns the body.
    async fn check(self, client: &Client) -> serde_json::Value {
        let (code, body) = raw(
            client,
            self.method,
            &self.path,
            self.content_type,
            self.body,
        )
        .await;
        assert_eq!(code, self.code, "{} {}: {body}", self.method, self.path);
        if let Some(reason) = self.reason {
            assert_eq!(
                body["reason"].as_str(),
                Some(reason),
                "{} {}: {body}",
                self.method,
                self.path
            );
        }
        body
    }
}

async fn bad_input_gets_status_errors(store: Store) {
    let s = Server::start_on(store, &[]);
    let c = s.client().await;
    let cms = "/api/v1/namespaces/default/configmaps";
    let named = &format!("{cms}/named");
    let json = Some("application/json");

    Case::new("POST", cms, json, "{not json")
        .expect(400, "BadRequest")
        .check(&c)
        .await;
    Case::new("POST", cms, Some("application/yaml"), "a: [b")
        .expect(400, "BadRequest")
        .check(&c)
        .await;
    Case::new("GET", "/api/v1/namespaces/default/nosuchthings", None, "")
        .expect(404, "NotFound")
        .check(&c)
        .await;
    Case::new(
        "POST",
        cms,
        json,
        r#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"x"}}"#,
    )
    .expect(400, "BadRequest")
    .check(&c)
    .await;
    Case::new(
        "POST",
        cms,
        json,
        r#"{"apiVersion":"apps/v1","kind":"ConfigMap","metadata":{"name":"x"}}"#,
    )
    .expect(400, "BadRequest")
    .check(&c)
    .await;
    let st = Case::new("POST", cms, json, r#"{"metadata":{"name":"Not_Valid"}}"#)
        .expect(422, "Invalid")
        .check(&c)
        .await;
    assert_eq!(st["details"]["causes"][0]["field"], "metadata.name");
    let st = Case::new(
        "POST",
        "/api/v1/namespaces/nope/configmaps",
        json,
        r#"{"metadata":{"name":"x"}}"#,
    )
    .expect(404, "NotFound")
    .check(&c)
    .await;
    assert_eq!(
        st["message"].as_str(),
        Some("namespaces \"nope\" not found")
    );
    Case::new("POST", cms, json, r#"{"metadata":{"name":"named"}}"#)
        .check(&c)
        .await;
    Case::new("PUT", named, json, r#"{"metadata":{"name":"other"}}"#)
        .expect(400, "BadRequest")
        .check(&c)
        .await;
    Case::new("PATCH", named, Some("application/xml"), "<x/>")
        .expect(415, "UnsupportedMediaType")
        .check(&c)
        .await;
    let big = format!(
        r#"{{"metadata":{{"name":"big"}},"data":{{"x":"{}"}}}}"#,
        "a".repeat(3 * 1024 * 1024 + 1)
    );
    Case::new("POST", cms, json, big)
        .expect(413, "RequestEntityTooLarge")
        .check(&c)
        .await;
    Case::new("GET", cms, None, "").check(&c).await;
    // Only a media type the server does not write: 406.
    let accept_protobuf_only = http::Request::get(cms)
        .header("accept", "application/xml")
        .body(Vec::new())
        .unwrap();
    match c.request_text(accept_protobuf_only).await {
        Err(kube::Error::Api(st)) => {
            assert_eq!((st.code, st.reason.as_str()), (406, "NotAcceptable"))
        }
        other => panic!("expected 406, got {other:?}"),
    }

    // Nothing half-written: only the one valid object exists.
    let api: Api<ConfigMap> = Api::namespaced(c.clone(), "default");
    let names = common::names(&api).await;
    assert_eq!(names, vec!["named"]);
    // Built-ins accept strategic merge (custom resources answer 415: see the CRD test).
    Case::new(
        "PATCH",
        named,
        Some("application/strategic-merge-patch+json"),
        r#"{"data":{"k":"v"}}"#,
    )
    .check(&c)
    .await;
}

/// A watch from a revision older than the in-memory window: the embedded
/// store reads the log and sends every event since (410 only past a
/// compaction, which the store suite covers); a replica on etcd, like
/// kube-apiserver's watch cache, answers with an in-stream 410.
async fn watch_from_before_the_window(store: Store) {
    let etcd = matches!(store, Store::Etcd);
    let s = Server::start_on(store, &["--watch-history", "5"]);
    let c = s.client().await;
    let api: Api<ConfigMap> = Api::namespaced(c.clone(), "default");
    let first = api
        .create(&PostParams::default(), &cm("h0", json!({})))
        .await
        .unwrap();
    for i in 1..20 {
        api.create(&PostParams::default(), &cm(&format!("h{i}"), json!({})))
            .await
            .unwrap();
    }
    let rv = first.resource_version().unwrap();
    if etcd {
        match common::first_watch_event(&api, &rv).await {
            kube::api::WatchEvent::Error(e) => assert_eq!(e.code, 410),
            other => panic!("expected an in-stream 410, got {other:?}"),
        }
        return;
    }
    let mut stream = api
        .watch(&kube::api::WatchParams::default(), &rv)
        .await
        .expect("watch starts")
        .boxed();
    let mut seen = Vec::new();
    while seen.len() < 19 {
        let event = tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .expect("an event within 10s")
            .expect("the stream has an event")
            .expect("the event decodes");
        match event {
            kube::api::WatchEvent::Added(cm) => seen.push(cm.name_any()),
            other => panic!("expected ADDED, got {other:?}"),
        }
    }
    let expected: Vec<String> = (1..20).map(|i| format!("h{i}")).collect();
    assert_eq!(seen, expected);
}

async fn discovery_and_custom_resources(store: Store) {
    let s = Server::start_on(store, &[]);
    let client = s.client().await;
    let gadget = kube::api::GroupVersionKind::gvk("demo.example.com", "v1", "Gadget");
    let before = kube::Discovery::new(client.clone())
        .run_aggregated()
        .await
        .unwrap();
    assert!(before.resolve_gvk(&gadget).is_none());
    // The aggregated document carries an ETag; asked again with it, the
    // server answers 304 until the kinds change.
    let ask_apis = |etag: Option<&str>| {
        let mut r = http::Request::get("/apis").header(
            http::header::ACCEPT,
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
        );
        if let Some(etag) = etag {
            r = r.header(http::header::IF_NONE_MATCH, etag);
        }
        let client = client.clone();
        let request = r.body(kube::client::Body::empty()).unwrap();
        async move { client.send(request).await.unwrap() }
    };
    let first = ask_apis(None).await;
    assert_eq!(first.status(), 200);
    let etag = first.headers()[http::header::ETAG]
        .to_str()
        .unwrap()
        .to_string();
    assert_eq!(ask_apis(Some(&etag)).await.status(), 304);
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> = Api::all(client.clone());
    let crd = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.demo.example.com"},
        "spec": {"group": "demo.example.com", "scope": "Cluster",
                 "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                   "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object",
                     "required": ["size"], "properties": {"size": {"type": "integer", "minimum": 1}}}}}}}]}})).unwrap();
    let crd = crds.create(&PostParams::default(), &crd).await.unwrap();
    // Defaulted as apiextensions' SetDefaults: no conversion is None.
    assert_eq!(
        crd.spec.conversion.as_ref().map(|c| c.strategy.as_str()),
        Some("None")
    );
    let conditions = crd.status.unwrap().conditions.unwrap();
    assert!(
        conditions
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
    );

    let discovery = kube::Discovery::new(client.clone())
        .run_aggregated()
        .await
        .unwrap();
    let (ar, caps) = discovery.resolve_gvk(&gadget).expect("gadget discovered");
    let changed = ask_apis(Some(&etag)).await;
    assert_eq!(changed.status(), 200, "the kinds changed");
    assert_ne!(changed.headers()[http::header::ETAG], etag.as_str());
    assert_eq!(caps.scope, kube::discovery::Scope::Cluster);
    let legacy = kube::Discovery::new(client.clone()).run().await.unwrap();
    assert!(
        legacy
            .resolve_gvk(&kube::api::GroupVersionKind::gvk(
                "apps",
                "v1",
                "Deployment"
            ))
            .is_some()
    );

    let gadgets: Api<kube::api::DynamicObject> = Api::all_with(client.clone(), &ar);
    let bad: kube::api::DynamicObject = serde_json::from_value(
        json!({"apiVersion": "demo.example.com/v1", "kind": "Gadget",
        "metadata": {"name": "g"}, "spec": {"size": 0, "extra": true}}),
    )
    .unwrap();
    let e = status_of(
        gadgets
            .create(&PostParams::default(), &bad)
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    let good: kube::api::DynamicObject = serde_json::from_value(
        json!({"apiVersion": "demo.example.com/v1", "kind": "Gadget",
        "metadata": {"name": "g"}, "spec": {"size": 2, "extra": true}}),
    )
    .unwrap();
    let stored = gadgets.create(&PostParams::default(), &good).await.unwrap();
    assert_eq!(
        stored.data["spec"],
        json!({"size": 2}),
        "unknown fields are pruned"
    );

    let e = status_of(
        gadgets
            .patch(
                "g",
                &PatchParams::default(),
                &Patch::Strategic(json!({"spec": {"size": 3}})),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 415);

    crds.delete("gadgets.demo.example.com", &DeleteParams::default())
        .await
        .unwrap();
    let e = status_of(gadgets.get("g").await.unwrap_err());
    assert_eq!(e.code, 404);
}
