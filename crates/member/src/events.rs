//! The Events the member's own components record about pods (the
//! kubelet's Created, Started, Killing, BackOff, Failed, Unhealthy; the
//! scheduler's Scheduled and FailedScheduling), as upstream's components
//! record them with client-go: core/v1 Events from the component, an
//! event repeated with the same reason and message counted on the one
//! Event (`count`, `lastTimestamp`: what `kubectl describe` shows as "x4
//! over 20s"), and events that differ in message kept apart ("Created
//! container main" and "Created container sidecar" are two, and so are a
//! probe's timeout and its HTTP 500). kube-runtime's recorder folds every
//! note of one reason into one series, which is not what these do.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use tokio::sync::mpsc;

/// Something a pod's runtime has to say: (reason, message).
pub type Notify = Arc<dyn Fn(&'static str, String) + Send + Sync>;

/// How many distinct events one recorder remembers for counting repeats
/// (client-go's correlator keeps 4096; a member process may host a
/// thousand clusters, each with its recorders).
const REMEMBERED: usize = 1024;

/// How many Events may wait to be written; beyond, new ones are dropped,
/// as client-go's broadcaster drops them when its queue of 1000 is full
/// (a burst of ten thousand pods must not queue ten thousand writes).
const QUEUED: usize = 1000;

/// The reasons recorded as Warnings.
const WARNINGS: &[&str] = &[
    "Failed",
    "UnparseableSchedule",
    "FailedDelete",
    "BackOff",
    "Unhealthy",
    "FailedCreatePodSandBox",
    "FailedMount",
    "FailedScheduling",
    "FailedCreate",
    "FailedBinding",
    "ProvisioningFailed",
    "BackoffLimitExceeded",
    "DeadlineExceeded",
    "FailedGetScale",
    "FailedRescale",
    "FailedGetResourceMetric",
    "FailedGetContainerResourceMetric",
    "FailedGetPodsMetric",
    "FailedGetObjectMetric",
    "FailedGetExternalMetric",
    "FailedComputeMetricsReplicas",
    "SelectorRequired",
    "InvalidSelector",
];

/// Records Events as one component (`kubelet`, `default-scheduler`) of
/// one member.
#[derive(Clone)]
pub struct EventRecorder {
    queue: mpsc::Sender<(ObjectReference, &'static str, String)>,
}

impl EventRecorder {
    /// Starts the writer of `component`'s Events in `cluster` (one task,
    /// so that a repeat always finds the Event its first occurrence made).
    pub fn new(client: Client, component: &'static str, cluster: &str) -> Self {
        let (queue, mut rx) = mpsc::channel(QUEUED);
        let mut writer = Writer {
            client,
            component,
            instance: cluster.to_string(),
            seen: HashMap::new(),
        };
        tokio::spawn(async move {
            while let Some((pod, reason, message)) = rx.recv().await {
                writer.record(pod, reason, message).await;
            }
        });
        EventRecorder { queue }
    }

    /// Records an Event about `pod` in the background (an Event that
    /// cannot be written is not worth failing anything for).
    pub fn emit(&self, pod: &ObjectReference, reason: &'static str, message: String) {
        if self.queue.try_send((pod.clone(), reason, message)).is_err() {
            tracing::debug!(reason, "the event queue is full; dropping an event");
        }
    }

    /// A notifier for one pod, for what runs apart from the kubelet (probes).
    pub fn for_pod(&self, pod: ObjectReference) -> Notify {
        let me = self.clone();
        Arc::new(move |reason, note| me.emit(&pod, reason, note))
    }
}

/// (pod uid, reason, message): what makes two events the same.
type Key = (String, &'static str, String);

struct Writer {
    client: Client,
    component: &'static str,
    instance: String,
    /// Events written: (namespace, name, count).
    seen: HashMap<Key, (String, String, i32)>,
}

impl Writer {
    async fn record(&mut self, pod: ObjectReference, reason: &'static str, message: String) {
        let namespace = pod.namespace.clone().unwrap_or_else(|| "default".into());
        let key = (pod.uid.clone().unwrap_or_default(), reason, message.clone());
        let now = crate::podutil::now();
        if let Some((ns, name, count)) = self.seen.get_mut(&key) {
            *count += 1;
            let api: Api<Event> = Api::namespaced(self.client.clone(), ns);
            let patch = json!({"count": *count, "lastTimestamp": now});
            match api
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => return,
                // Expired or deleted: a new one, as the correlator would.
                Err(error) => tracing::debug!(%error, reason, "cannot count a repeated event"),
            }
        }
        let warning = WARNINGS.contains(&reason);
        let name = format!(
            "{}.{:x}",
            pod.name.as_deref().unwrap_or_default(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or_default()
        );
        let event = Event {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace.clone()),
                ..Default::default()
            },
            involved_object: pod,
            type_: Some(if warning { "Warning" } else { "Normal" }.into()),
            reason: Some(reason.into()),
            message: Some(message),
            source: Some(EventSource {
                component: Some(self.component.into()),
                host: None,
            }),
            reporting_component: Some(self.component.into()),
            reporting_instance: Some(self.instance.clone()),
            count: Some(1),
            first_timestamp: Some(now.clone()),
            last_timestamp: Some(now),
            ..Default::default()
        };
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        match api.create(&PostParams::default(), &event).await {
            Ok(_) => {
                if self.seen.len() >= REMEMBERED {
                    self.seen.clear();
                }
                self.seen.insert(key, (namespace, name, 1));
            }
            Err(error) => tracing::debug!(%error, reason, "cannot record an event"),
        }
    }
}
