//! Following a kind into a local cache: a reflector store kept by a watch
//! that relists with backoff when it falls behind, and a callback on every
//! event, for controllers that react to what changed.

mod optional;

pub use optional::{follow_optional, follow_optional_with, is_missing};

use futures::StreamExt;
use kube::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event};
use tokio::task::JoinHandle;

pub use flotilla_core::followable::Followable;

/// Follows `api` into a store, calling `on_event` with each watch event
/// once the store has it (the relist's own events included, so a caller
/// that recomputes on every event also sees what a relist removed). The
/// task runs until aborted; failed watches are retried with backoff.
pub fn follow<K>(
    api: Api<K>,
    config: watcher::Config,
    mut on_event: impl FnMut(&Event<K>) + Send + 'static,
) -> (Store<K>, JoinHandle<()>)
where
    K: Followable,
{
    let (store, writer) = reflector::store();
    let task = tokio::spawn(async move {
        let events = reflector::reflector(writer, watcher::watcher(api, config)).default_backoff();
        let mut events = std::pin::pin!(events);
        while let Some(event) = events.next().await {
            if let Ok(event) = event {
                on_event(&event);
            }
        }
    });
    (store, task)
}

/// The object an event brings, if it brings one: applied, deleted, or
/// listed by a relist (what kube-runtime calls touched).
pub fn touched<K>(event: &Event<K>) -> Option<&K> {
    match event {
        Event::Apply(o) | Event::Delete(o) | Event::InitApply(o) => Some(o),
        Event::Init | Event::InitDone => None,
    }
}
