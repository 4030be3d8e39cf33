//! core/v1 Events the controllers record on the objects they act for, as
//! Karmada's and Liqo's do. Best effort: an Event that cannot be written is logged,
//! never retried, and never fails the reconcile that recorded it.

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use tracing::warn;

/// Records `(type, reason, message)` on `involved`, from `component`.
pub async fn record(
    hub: &Client,
    involved: ObjectReference,
    component: &str,
    (type_, reason, message): (&str, &str, &str),
) {
    // Events of cluster-scoped objects live in `default`, as upstream's.
    let namespace = involved
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let now = Time(Timestamp::now());
    let event = Event {
        metadata: ObjectMeta {
            name: Some(format!(
                "{}.{}",
                involved.name.as_deref().unwrap_or_default(),
                uuid::Uuid::new_v4().simple()
            )),
            namespace: Some(namespace.clone()),
            ..Default::default()
        },
        involved_object: involved,
        type_: Some(type_.into()),
        reason: Some(reason.into()),
        message: Some(message.into()),
        source: Some(EventSource {
            component: Some(component.into()),
            host: None,
        }),
        count: Some(1),
        first_timestamp: Some(now.clone()),
        last_timestamp: Some(now),
        ..Default::default()
    };
    let api: Api<Event> = Api::namespaced(hub.clone(), &namespace);
    if let Err(error) = api.create(&PostParams::default(), &event).await {
        warn!(%error, reason, "cannot record an event");
    }
}
