//! Following a resource that may not be served: the MCS and Globalnet
//! CRDs are installed in a member only once it joins a fleet (or by
//! hand). Until then the watch gets 404s, which read as an empty list;
//! it says so once, keeps trying every few seconds without noise, and
//! picks the resource up as soon as its CRD appears. What else follows
//! the cluster never waits for it.

use std::time::Duration;

use std::hash::Hash;

use futures::StreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::utils::Backoff;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource};
use tracing::{debug, info};

use flotilla_core::followable::Followable;

/// Retries from half a second up to every 5 s: a CRD installed later is
/// picked up quickly, and a missing one costs one cheap list per 5 s.
struct Patient {
    next: Duration,
}

const FIRST: Duration = Duration::from_millis(500);
const MOST: Duration = Duration::from_secs(5);

impl Iterator for Patient {
    type Item = Duration;
    fn next(&mut self) -> Option<Duration> {
        let now = self.next;
        self.next = (now * 2).min(MOST);
        Some(now)
    }
}

impl Backoff for Patient {
    fn reset(&mut self) {
        self.next = FIRST;
    }
}

/// Whether a watch error says the resource is not served (no CRD).
pub fn is_missing(error: &watcher::Error) -> bool {
    let api = match error {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => e,
        watcher::Error::WatchError(status) => return status.code == 404,
        watcher::Error::NoResourceVersion => return false,
    };
    matches!(api, kube::Error::Api(status) if status.code == 404)
}

/// Follows `api` into a store, calling `changed` whenever the store
/// changes. A missing resource reads as empty (a CRD removed empties the
/// store too) and is logged once per absence.
pub fn follow_optional<K>(
    api: Api<K>,
    config: watcher::Config,
    changed: impl Fn() + Send + 'static,
) -> Store<K>
where
    K: Followable,
{
    follow_optional_with(api, config, (), changed)
}

/// [`follow_optional`] for a kind known only at run time
/// (`DynamicObject`), of type `dyntype`.
pub fn follow_optional_with<K>(
    api: Api<K>,
    config: watcher::Config,
    dyntype: K::DynamicType,
    changed: impl Fn() + Send + 'static,
) -> Store<K>
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Send + Sync,
{
    let kind = K::kind(&dyntype).into_owned();
    let mut writer = reflector::store::Writer::new(dyntype);
    let store = writer.as_reader();
    let mut missing = false;
    let stream = watcher(api, config)
        .backoff(Patient { next: FIRST })
        .for_each(move |event| {
            match event {
                Err(error) if is_missing(&error) => {
                    if !missing {
                        info!(%kind, "not served here (its CRD is not installed); followed once it is");
                        missing = true;
                        // An empty list: what was there is gone with its CRD.
                        writer.apply_watcher_event(&watcher::Event::Init);
                        writer.apply_watcher_event(&watcher::Event::InitDone);
                        changed();
                    }
                }
                Err(error) => debug!(%kind, %error, "watch failed; retrying"),
                // Every (re)list starts with Init, before the list is even
                // asked for: it says nothing of the resource, and the
                // store changes only once the list is done.
                Ok(watcher::Event::Init) => writer.apply_watcher_event(&watcher::Event::Init),
                Ok(event) => {
                    if missing {
                        info!(%kind, "now served; followed");
                        missing = false;
                    }
                    writer.apply_watcher_event(&event);
                    changed();
                }
            }
            async {}
        });
    tokio::spawn(stream);
    store
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_to_five_seconds_and_resets() {
        let mut b = Patient { next: FIRST };
        let first: Vec<u64> = b.by_ref().take(6).map(|d| d.as_millis() as u64).collect();
        assert_eq!(first, [500, 1000, 2000, 4000, 5000, 5000]);
        b.reset();
        assert_eq!(b.next(), Some(FIRST));
    }

    #[test]
    fn a_404_means_not_installed() {
        let status = |code| kube::core::Status {
            code,
            ..Default::default()
        };
        let missing = watcher::Error::InitialListFailed(kube::Error::Api(Box::new(status(404))));
        assert!(is_missing(&missing));
        let forbidden = watcher::Error::InitialListFailed(kube::Error::Api(Box::new(status(403))));
        assert!(!is_missing(&forbidden));
    }
}
