//! The in-memory watch cache: the current state of every key, plus a bounded
//! window of recent events. Any backend feeds it committed events in revision
//! order; every read and watch is served from here.
//!
//! Values are held [`Packed`] (stored JSON objects shrink to about 40%),
//! since the cache holds every object of the cluster plus its recent
//! history: that is most of a server's memory. Readers get plain bytes.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use imbl::OrdMap;
use parking_lot::RwLock;
use tokio::sync::watch;

use crate::packed::{Dictionaries, Packed};
use crate::{Event, EventKind, KeyValue, ListOptions, ListResult, Result, Revision, StoreError};

/// A [`KeyValue`] as the cache holds it.
#[derive(Clone, Debug)]
struct Entry {
    key: Arc<str>,
    value: Packed,
    create_revision: Revision,
    mod_revision: Revision,
}

/// The family a key's value is compressed with: its first two segments,
/// the API server's `/group/resource/`.
fn family(key: &str) -> &str {
    match key.match_indices('/').nth(2) {
        Some((i, _)) => &key[..=i],
        None => key,
    }
}

impl Entry {
    fn pack(kv: &KeyValue, dictionaries: &Dictionaries) -> Entry {
        let dictionary = dictionaries.pick(family(&kv.key), &kv.value);
        Entry {
            key: kv.key.clone(),
            value: Packed::pack_with(&kv.value, dictionary),
            create_revision: kv.create_revision,
            mod_revision: kv.mod_revision,
        }
    }

    fn unpack(&self) -> KeyValue {
        KeyValue {
            key: self.key.clone(),
            value: self.value.unpack(),
            create_revision: self.create_revision,
            mod_revision: self.mod_revision,
        }
    }
}

/// An [`Event`] as the cache holds it. `prev` shares its bytes with the
/// state entry or event it was.
#[derive(Debug)]
struct PackedEvent {
    kind: EventKind,
    kv: Entry,
    prev: Option<Entry>,
}

impl PackedEvent {
    /// The event with its new value `packed` (puts) and `prev`, the entry
    /// it replaces. A deletion's value is the last one: `prev`'s bytes,
    /// shared rather than packed again.
    fn new(
        event: &Event,
        packed: Option<Entry>,
        prev: Option<Entry>,
        dictionaries: &Dictionaries,
    ) -> PackedEvent {
        let kv = match (packed, &prev) {
            (Some(kv), _) => kv,
            (None, Some(p)) => Entry {
                mod_revision: event.kv.mod_revision,
                ..p.clone()
            },
            (None, None) => Entry::pack(&event.kv, dictionaries),
        };
        PackedEvent {
            kind: event.kind,
            kv,
            prev,
        }
    }

    fn packed_value(event: &Event, dictionaries: &Dictionaries) -> Option<Entry> {
        (event.kind == EventKind::Put).then(|| Entry::pack(&event.kv, dictionaries))
    }

    fn revision(&self) -> Revision {
        self.kv.mod_revision
    }

    fn unpack(&self) -> Event {
        Event {
            kind: self.kind,
            kv: self.kv.unpack(),
            prev: self.prev.as_ref().map(Entry::unpack),
        }
    }
}

/// Packs events in order, reusing the packed value of an event's
/// predecessor for its `prev` (no second copy of the same bytes).
fn pack_events(
    events: impl IntoIterator<Item = Event>,
    latest: &mut HashMap<Arc<str>, Entry>,
    dictionaries: &Dictionaries,
) -> Vec<PackedEvent> {
    events
        .into_iter()
        .map(|event| {
            let prev = event.prev.as_ref().map(|p| match latest.get(&p.key) {
                Some(e) if e.mod_revision == p.mod_revision => e.clone(),
                _ => Entry::pack(p, dictionaries),
            });
            let mut value = PackedEvent::packed_value(&event, dictionaries);
            if let (Some(held), Some(kv)) = (latest.get(&event.kv.key), value.as_mut()) {
                kv.key = held.key.clone();
            }
            let packed = PackedEvent::new(&event, value, prev, dictionaries);
            match packed.kind {
                EventKind::Put => latest.insert(packed.kv.key.clone(), packed.kv.clone()),
                EventKind::Delete => latest.remove(&packed.kv.key),
            };
            packed
        })
        .collect()
}

struct Inner {
    state: OrdMap<Arc<str>, Entry>,
    history: VecDeque<Arc<PackedEvent>>,
    revision: Revision,
    /// History at or below this revision is gone (compaction or window size).
    compacted: Revision,
    closed: bool,
}

pub struct WatchCache {
    inner: RwLock<Inner>,
    dictionaries: Dictionaries,
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
        let mut latest = HashMap::new();
        let dictionaries = Dictionaries::default();
        let mut history: VecDeque<Arc<PackedEvent>> =
            pack_events(history, &mut latest, &dictionaries)
                .into_iter()
                .map(Arc::new)
                .collect();
        // The state shares its bytes with the newest event of each key.
        let state = state
            .into_iter()
            .map(|kv| {
                let entry = match latest.get(&kv.key) {
                    Some(e) if e.mod_revision == kv.mod_revision => e.clone(),
                    _ => Entry::pack(&kv, &dictionaries),
                };
                (entry.key.clone(), entry)
            })
            .collect();
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
            dictionaries,
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
        let entry = self.inner.read().state.get(key).cloned();
        entry.map(|e| e.unpack())
    }

    /// Applies committed events (ascending revisions) and wakes watchers.
    pub fn apply(&self, events: Vec<Event>) {
        if events.is_empty() {
            return;
        }
        // Compress before taking the lock: readers wait on it.
        let packed: Vec<(Event, Option<Entry>)> = events
            .into_iter()
            .map(|e| {
                let kv = PackedEvent::packed_value(&e, &self.dictionaries);
                (e, kv)
            })
            .collect();
        let revision = {
            let mut inner = self.inner.write();
            for (event, mut packed) in packed {
                // `prev` is the state's entry: share its bytes, and its key
                // with the new entry (a window of 100,000 events would
                // otherwise hold a copy of a key in each).
                let prev = inner.state.get(&event.kv.key).cloned();
                if let (Some(p), Some(kv)) = (&prev, packed.as_mut()) {
                    kv.key = p.key.clone();
                }
                let e = PackedEvent::new(&event, packed, prev, &self.dictionaries);
                match e.kind {
                    EventKind::Put => {
                        inner.state.insert(e.kv.key.clone(), e.kv.clone());
                    }
                    EventKind::Delete => {
                        inner.state.remove(&e.kv.key);
                    }
                }
                inner.revision = e.kv.mod_revision;
                inner.history.push_back(Arc::new(e));
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

    /// Waits until the cache holds `revision` (or is closed).
    pub async fn wait_for(&self, revision: Revision) -> Result<()> {
        let mut seen = self.notify.subscribe();
        loop {
            if *seen.borrow_and_update() >= revision {
                return Ok(());
            }
            if self.inner.read().closed {
                return Err(StoreError::Closed);
            }
            if seen.changed().await.is_err() {
                return Err(StoreError::Closed);
            }
        }
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
            items.push(kv.unpack());
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
    fn events_after(&self, prefix: &str, after: Revision) -> Result<(Vec<Event>, Revision)> {
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
        let events: Vec<Arc<PackedEvent>> = inner
            .history
            .range(start..)
            .filter(|e| e.kv.key.starts_with(prefix))
            .cloned()
            .collect();
        let revision = inner.revision;
        drop(inner);
        Ok((events.iter().map(|e| e.unpack()).collect(), revision))
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
    pub async fn next(&mut self) -> Result<Vec<Event>> {
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
