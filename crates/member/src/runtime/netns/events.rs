//! The Events a kubelet records about pods (Created, Started, Killing,
//! BackOff, Failed, Unhealthy, FailedCreatePodSandBox), through
//! kube-runtime's recorder, which folds repeats into a series.

use std::sync::Arc;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

/// Records Events as the kubelet of one member.
#[derive(Clone)]
pub struct KubeletEvents {
    recorder: Arc<Recorder>,
}

/// Something a pod's runtime has to say: (reason, message).
pub type Notify = Arc<dyn Fn(&'static str, String) + Send + Sync>;

impl KubeletEvents {
    pub fn new(client: Client, cluster: &str) -> Self {
        let reporter = Reporter {
            controller: "kubelet".into(),
            instance: Some(cluster.to_string()),
        };
        KubeletEvents {
            recorder: Arc::new(Recorder::new(client, reporter)),
        }
    }

    /// Records an Event about `pod` in the background (an Event that
    /// cannot be written is not worth failing the pod for).
    pub fn emit(&self, pod: &ObjectReference, reason: &'static str, note: String) {
        let warning = matches!(
            reason,
            "Failed" | "BackOff" | "Unhealthy" | "FailedCreatePodSandBox" | "FailedMount"
        );
        let event = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.into(),
            note: Some(note),
            action: reason.into(),
            secondary: None,
        };
        let recorder = self.recorder.clone();
        let reference = pod.clone();
        tokio::spawn(async move {
            if let Err(error) = recorder.publish(&event, &reference).await {
                tracing::debug!(%error, reason = event.reason, "cannot record an event");
            }
        });
    }

    /// A notifier for one pod, for what runs apart from the kubelet (probes).
    pub fn for_pod(&self, pod: ObjectReference) -> Notify {
        let me = self.clone();
        Arc::new(move |reason, note| me.emit(&pod, reason, note))
    }
}
