//! Every acknowledged write survives `kill -9`, with its resourceVersion,
//! and watches resume from before the crash.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::Server;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams, WatchEvent};
use std::sync::Mutex;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_kill_9() {
    let mut s = Server::start();
    let api: Api<ConfigMap> = Api::namespaced(s.client().await, "default");
    let acked: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..4 {
        let (api, acked, stop) = (api.clone(), acked.clone(), stop.clone());
        writers.push(tokio::spawn(async move {
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let obj: ConfigMap = serde_json::from_value(serde_json::json!({
                    "metadata": {"name": format!("w{w}-{i}")}, "data": {"i": i.to_string()}}))
                .unwrap();
                match api.create(&PostParams::default(), &obj).await {
                    Ok(c) => acked
                        .lock()
                        .unwrap()
                        .push((c.name_any(), c.resource_version().unwrap())),
                    Err(_) => return, // the server died mid-request: not acknowledged
                }
                i += 1;
            }
        }));
    }
    // Let writes flow, then kill the server in the middle of them.
    common::wait_for(Duration::from_secs(30), "some acknowledged writes", || {
        acked.lock().unwrap().len() >= 200
    });
    s.kill9();
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        let _ = w.await;
    }
    let acked = acked.lock().unwrap().clone();
    let earliest_rv = acked
        .iter()
        .map(|(_, rv)| rv.parse::<i64>().unwrap())
        .min()
        .unwrap();

    s.spawn();
    let api: Api<ConfigMap> = Api::namespaced(s.client().await, "default");
    let listed = api.list(&ListParams::default()).await.unwrap();
    let stored: std::collections::HashMap<String, String> = listed
        .items
        .iter()
        .map(|c| (c.name_any(), c.resource_version().unwrap()))
        .collect();
    for (name, rv) in &acked {
        assert_eq!(
            stored.get(name),
            Some(rv),
            "acknowledged {name} at {rv} was lost or changed"
        );
    }

    // A watch from a revision before the crash resumes with the later events.
    let event = common::first_watch_event(&api, &earliest_rv.to_string()).await;
    assert!(
        matches!(event, WatchEvent::Added(_)),
        "expected a replayed ADDED, got {event:?}"
    );
    // And the revision sequence continues past everything acknowledged.
    let obj: ConfigMap =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "after-restart"}})).unwrap();
    let created = api.create(&PostParams::default(), &obj).await.unwrap();
    let max_acked = acked
        .iter()
        .map(|(_, rv)| rv.parse::<i64>().unwrap())
        .max()
        .unwrap();
    assert!(created.resource_version().unwrap().parse::<i64>().unwrap() > max_acked);
}
