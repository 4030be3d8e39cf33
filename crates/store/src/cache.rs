//! The in-memory watch cache: the current state of every key, plus a bounded
//! window of recent events. Any backend feeds it committed events in revision
//! order; every read and watch is served from here.

use std::collections::VecDeque;
use std::sync::Arc;

use imbl::OrdMap;
use parking_lot::RwLock;
use tokio::sync::watch;

use crate::{Event, EventKind, KeyValue, ListOptions, ListResult, Result, Revision, StoreError};

struct Inner {
    state: OrdMap<Arc<str>, KeyValue>,
    history: VecDeque<Arc<Event>>,
    revision: Revision,
    /// History at or below this revision is gone (compaction or window size).
    compacted: Revision,
    closed: bool,
}

pub struct WatchCache {
    inner: RwLock<Inner>,
    capacity: usize,
    notify: watch::Sender<Revision>,
}

impl WatchCache {
    /// A cache holding `state` at `revision`, with `history` (ascending, all
    /// events after `compacted`) and room for `capacity` events.
    pub fn new(
        state: impl IntoIterator<Item = KeyValue>,
        history: Vec<Event>,
        revision: Revision,
        compacted: Revision,
        capacity: usize,
    ) -> Self {
        let state = state.into_iter().map(|kv| (kv.key.clone(), kv)).collect();
        let mut history: VecDeque<Arc<Event>> = history.into_iter().map(Arc::new).collect();
        let mut compacted = compacted;
        while history.len() > capacity {
            if let Some(e) = history.pop_front() {
                compacted = compacted.max(e.revision());
            }
        }
        if history.is_empty() {
            compacted = compacted.max(revision);
        }
        let (notify, _) = watch::channel(revision);
        WatchCache {
            inner: RwLock::new(Inner {
                state,
                history,
                revision,
                compacted,
                closed: false,
            }),
            capacity: capacity.max(1),
            notify,
        }
    }

    pub fn revision(&self) -> Revision {
        self.inner.read().revision
    }

    pub fn compacted(&self) -> Revision {
        self.inner.read().compacted
    }

    pub fn get(&self, key: &str) -> Option<KeyValue> {
        self.inner.read().state.get(key).cloned()
    }

    /// Applies committed events (ascending revisions) and wakes watchers.
    pub fn apply(&self, events: Vec<Event>) {
        if events.is_empty() {
            return;
        }
        let revision = {
            let mut inner = self.inner.write();
            for event in events {
                match event.kind {
                    EventKind::Put => {
                        inner.state.insert(event.kv.key.clone(), event.kv.clone());
                    }
                    EventKind::Delete => {
                        inner.state.remove(&event.kv.key);
                    }
                }
                inner.revision = event.revision();
                inner.history.push_back(Arc::new(event));
            }
            while inner.history.len() > self.capacity {
                if let Some(e) = inner.history.pop_front() {
                    inner.compacted = inner.compacted.max(e.revision());
                }
            }
            inner.revision
        };
        self.notify.send_replace(revision);
    }

    /// Forgets history at or below `revision`.
    pub fn compact(&self, revision: Revision) {
        let mut inner = self.inner.write();
        let revision = revision.min(inner.revision);
        while inner
            .history
            .front()
            .is_some_and(|e| e.revision() <= revision)
        {
            inner.history.pop_front();
        }
        inner.compacted = inner.compacted.max(revision);
    }

    /// Ends every watch; later calls fail with `Closed`.
    pub fn close(&self) {
        self.inner.write().closed = true;
        let rev = self.revision();
        self.notify.send_replace(rev);
    }

    pub fn list(&self, prefix: &str, options: &ListOptions) -> Result<ListResult> {
        let (state, revision) = {
            let inner = self.inner.read();
            match options.revision {
                None => (inner.state.clone(), inner.revision),
                Some(rev) if rev >= inner.revision => (inner.state.clone(), inner.revision),
                Some(rev) => {
                    if rev < inner.compacted {
                        return Err(StoreError::Compacted {
                            requested: rev,
                            oldest: inner.compacted,
                        });
                    }
                    // Roll the current state back to `rev` by undoing newer events.
                    let mut state = inner.state.clone();
                    for event in inner.history.iter().rev() {
                        if event.revision() <= rev {
                            break;
                        }
                        match &event.prev {
                            Some(prev) => {
                                state.insert(prev.key.clone(), prev.clone());
                            }
                            None => {
                                state.remove(&event.kv.key);
                            }
                        }
                    }
                    (state, rev)
                }
            }
        };
        let limit = options.limit.filter(|l| *l > 0).unwrap_or(usize::MAX);
        let start: &str = match &options.start_after {
            Some(after) if after.as_str() >= prefix => after,
            _ => prefix,
        };
        let mut items = Vec::new();
        let mut more = false;
        for (key, kv) in
            state.range::<_, str>((std::ops::Bound::Included(start), std::ops::Bound::Unbounded))
        {
            if !key.starts_with(prefix) {
                break;
            }
            if options.start_after.as_deref() == Some(&**key) {
                continue;
            }
            if items.len() == limit {
                more = true;
                break;
            }
            items.push(kv.clone());
        }
        Ok(ListResult {
            items,
            revision,
            more,
        })
    }

    pub fn watch(self: &Arc<Self>, prefix: &str, after: Revision) -> Result<Watch> {
        let inner = self.inner.read();
        if inner.closed {
            return Err(StoreError::Closed);
        }
        if after < inner.compacted {
            return Err(StoreError::Compacted {
                requested: after,
                oldest: inner.compacted,
            });
        }
        Ok(Watch {
            cache: self.clone(),
            prefix: prefix.to_string(),
            after,
            wakeup: self.notify.subscribe(),
        })
    }

    /// Events under `prefix` newer than `after`, or `Compacted`.
    fn events_after(&self, prefix: &str, after: Revision) -> Result<(Vec<Arc<Event>>, Revision)> {
        let inner = self.inner.read();
        if inner.closed {
            return Err(StoreError::Closed);
        }
        if after < inner.compacted {
            return Err(StoreError::Compacted {
                requested: after,
                oldest: inner.compacted,
            });
        }
        let start = inner.history.partition_point(|e| e.revision() <= after);
        let events = inner
            .history
            .range(start..)
            .filter(|e| e.kv.key.starts_with(prefix))
            .cloned()
            .collect();
        Ok((events, inner.revision))
    }
}

/// A stream of events under a prefix, resumable from any revision the cache
/// still holds. A watcher that falls behind the window gets `Compacted`.
pub struct Watch {
    cache: Arc<WatchCache>,
    prefix: String,
    after: Revision,
    wakeup: watch::Receiver<Revision>,
}

impl Watch {
    /// The revision this watch has delivered up to.
    pub fn revision(&self) -> Revision {
        self.after
    }

    /// Waits for and returns the next batch of events (never empty).
    pub async fn next(&mut self) -> Result<Vec<Arc<Event>>> {
        loop {
            self.wakeup.borrow_and_update();
            let (events, seen) = self.cache.events_after(&self.prefix, self.after)?;
            if let Some(last) = events.last() {
                self.after = last.revision();
                return Ok(events);
            }
            // Nothing under our prefix up to `seen`; skip ahead so we stay
            // inside the window even when other prefixes are busy.
            self.after = self.after.max(seen);
            if self.wakeup.changed().await.is_err() {
                return Err(StoreError::Closed);
            }
        }
    }
}
