//! The in-memory side of a store: a bounded window of recent events that
//! every watch is served from, and, for a backend that cannot serve reads
//! itself (etcd, across the network), the current state of every key.
//! A backend feeds it committed events in revision order.
//!
//! - [`WatchCache`] holds every key and the window; gets and lists are
//!   served from it, as kube-apiserver's watch cache does in front of etcd.
//! - [`EventWindow`] holds the window only. The embedded store reads gets
//!   and lists from its own database and gives the window a [`Backfill`]
//!   for watches that start before the window, as kine does: an object
//!   costs memory only while it is changing.
//!
//! Values are held [`Packed`] (stored JSON objects shrink to about 40%),
//! and the newest events also as written (`Fresh`). Readers get plain
//! bytes.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
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

/// What a writer packed of its event before handing it to the store
/// ([`EventWindow::pack`]), so that the store's one writer thread need
/// not: a put's new value, and the value it replaced where the window no
/// longer holds that one (a key whose last change has left the window).
#[derive(Debug, Default)]
pub struct Prepacked {
    pub value: Option<Packed>,
    pub prev: Option<Packed>,
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

    /// A put's value as held: `prepacked` (packed by the writer's caller)
    /// when given, else packed now.
    fn packed_value(
        event: &Event,
        prepacked: Option<Packed>,
        dictionaries: &Dictionaries,
    ) -> Option<Entry> {
        (event.kind == EventKind::Put).then(|| match prepacked {
            Some(value) => Entry {
                key: event.kv.key.clone(),
                value,
                create_revision: event.kv.create_revision,
                mod_revision: event.kv.mod_revision,
            },
            None => Entry::pack(&event.kv, dictionaries),
        })
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
            let mut value = PackedEvent::packed_value(&event, None, dictionaries);
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

/// What a cache holds besides the window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Retention {
    /// The newest entry of every key: reads are served from memory.
    EveryKey,
    /// The newest entry of the keys that have an event in the window, so
    /// that an event's `prev` shares its bytes with the event before it.
    Window,
}

/// How many of the newest events the window also holds unpacked, and how
/// many bytes of values (and previous values) at most.
const FRESH_EVENTS: usize = 1024;
/// Most of the window's older (packed) events a watch unpacks at once. A
/// watcher that fell behind the plain part catches up in batches of this
/// many, instead of holding everything it missed unpacked at once: a heap
/// profile of 3,000 × 10 with 400 Work applies in flight found 47 MiB of
/// the hub's peak in two lagging watchers' batches.
const UNPACK_BATCH: usize = 1000;
const FRESH_BYTES: usize = 4 * 1024 * 1024;

/// Plain copies of the window's newest events: watchers and readers that
/// follow close behind the writer (every controller, under load) read them
/// without decompressing, each of them, the same values again.
#[derive(Default)]
struct Fresh {
    /// The newest `events.len()` events of the history, in order.
    events: VecDeque<Event>,
    /// The value of each key whose newest event is here and a put.
    values: HashMap<Arc<str>, KeyValue>,
    bytes: usize,
}

impl Fresh {
    fn push(&mut self, event: Event) {
        match event.kind {
            EventKind::Put => {
                self.values.insert(event.kv.key.clone(), event.kv.clone());
            }
            EventKind::Delete => {
                self.values.remove(&event.kv.key);
            }
        }
        self.bytes += Self::size(&event);
        self.events.push_back(event);
        while self.events.len() > FRESH_EVENTS || self.bytes > FRESH_BYTES {
            self.pop_oldest();
        }
    }

    /// The bytes an event holds: its value and its previous value (often
    /// the bytes of the event before it, counted again: a bound, not a
    /// measure).
    fn size(event: &Event) -> usize {
        event.kv.value.len() + event.prev.as_ref().map_or(0, |p| p.value.len())
    }

    fn pop_oldest(&mut self) {
        let Some(e) = self.events.pop_front() else {
            return;
        };
        self.bytes -= Self::size(&e);
        if self
            .values
            .get(&e.kv.key)
            .is_some_and(|v| v.mod_revision == e.kv.mod_revision)
        {
            self.values.remove(&e.kv.key);
        }
    }
}

struct Inner {
    /// The newest entry per key, of every key or of the window's keys.
    latest: OrdMap<Arc<str>, Entry>,
    history: VecDeque<Arc<PackedEvent>>,
    fresh: Fresh,
    revision: Revision,
    /// The window holds no event at or below this revision (compaction or
    /// window size).
    compacted: Revision,
    closed: bool,
}

impl Inner {
    /// Drops the oldest events beyond `capacity`.
    fn trim(&mut self, capacity: usize, retention: Retention) {
        while self.history.len() > capacity {
            let Some(e) = self.history.pop_front() else {
                break;
            };
            self.forget(&e, retention);
        }
    }

    /// The fresh events are the history's newest: none older.
    fn trim_fresh(&mut self) {
        while self.fresh.events.len() > self.history.len() {
            self.fresh.pop_oldest();
        }
    }

    fn forget(&mut self, event: &PackedEvent, retention: Retention) {
        self.compacted = self.compacted.max(event.revision());
        if retention == Retention::Window
            && self
                .latest
                .get(&event.kv.key)
                .is_some_and(|l| l.mod_revision == event.kv.mod_revision)
        {
            self.latest.remove(&event.kv.key);
        }
    }
}

/// Older events for a watch that starts before the window: the embedded
/// store's revision log.
pub trait Backfill: Send + Sync {
    /// Up to a batch of events under `prefix` after `after` and at or
    /// below `until` (what the window has applied), oldest first, and the
    /// revision read up to. `Compacted` when `after` is older than the
    /// history kept.
    fn events_after(
        &self,
        prefix: &str,
        after: Revision,
        until: Revision,
    ) -> Result<(Vec<Event>, Revision)>;
    /// History at or below this revision is gone.
    fn compacted(&self) -> Revision;
}

struct Core {
    inner: RwLock<Inner>,
    retention: Retention,
    dictionaries: Dictionaries,
    capacity: usize,
    notify: watch::Sender<Revision>,
}

impl Core {
    /// `state` (empty for [`Retention::Window`]) at `revision`, with
    /// `history` (ascending, all events after `compacted`) and room for
    /// `capacity` events, packed with `dictionaries`.
    fn new(
        retention: Retention,
        state: impl IntoIterator<Item = KeyValue>,
        history: Vec<Event>,
        (revision, compacted): (Revision, Revision),
        capacity: usize,
        dictionaries: Dictionaries,
    ) -> Core {
        let mut latest = HashMap::new();
        let history: VecDeque<Arc<PackedEvent>> = pack_events(history, &mut latest, &dictionaries)
            .into_iter()
            .map(Arc::new)
            .collect();
        let latest: OrdMap<Arc<str>, Entry> = match retention {
            // The state shares its bytes with the newest event of each key.
            Retention::EveryKey => state
                .into_iter()
                .map(|kv| {
                    let entry = match latest.get(&kv.key) {
                        Some(e) if e.mod_revision == kv.mod_revision => e.clone(),
                        _ => Entry::pack(&kv, &dictionaries),
                    };
                    (entry.key.clone(), entry)
                })
                .collect(),
            Retention::Window => latest.into_iter().collect(),
        };
        let capacity = capacity.max(1);
        let mut inner = Inner {
            latest,
            history,
            fresh: Fresh::default(),
            revision,
            compacted,
            closed: false,
        };
        inner.trim(capacity, retention);
        if inner.history.is_empty() {
            inner.compacted = inner.compacted.max(revision);
        }
        let (notify, _) = watch::channel(revision);
        Core {
            inner: RwLock::new(inner),
            retention,
            dictionaries,
            capacity,
            notify,
        }
    }

    fn revision(&self) -> Revision {
        self.inner.read().revision
    }

    fn compacted(&self) -> Revision {
        self.inner.read().compacted
    }

    /// The newest value held for `key`, if it is live.
    fn latest(&self, key: &str) -> Option<KeyValue> {
        let entry = {
            let inner = self.inner.read();
            if let Some(kv) = inner.fresh.values.get(key) {
                return Some(kv.clone());
            }
            inner.latest.get(key).cloned()
        };
        entry.map(|e| e.unpack())
    }

    /// The revision of `key`'s newest value held, if it is live: whether
    /// the window holds a value, without unpacking it.
    fn held_revision(&self, key: &str) -> Option<Revision> {
        let inner = self.inner.read();
        if let Some(kv) = inner.fresh.values.get(key) {
            return Some(kv.mod_revision);
        }
        inner.latest.get(key).map(|e| e.mod_revision)
    }

    /// Applies committed events, each with what the writer's caller packed
    /// already.
    fn apply(&self, events: Vec<(Event, Prepacked)>) {
        if events.is_empty() {
            return;
        }
        // Compress before taking the lock: readers wait on it. The `prev`
        // of an event is found under the lock among the entries held (the
        // state's, or the window's newest of the key); one that is not
        // there (a key whose last change left the window) comes packed by
        // the writer's caller, or is packed here.
        let held_prev: Vec<bool> = {
            let inner = self.inner.read();
            let mut in_batch = std::collections::HashSet::new();
            events
                .iter()
                .map(|(e, _)| {
                    let held = self.retention == Retention::EveryKey
                        || e.prev.as_ref().is_none_or(|p| {
                            in_batch.contains(&(&*p.key, p.mod_revision))
                                || inner
                                    .latest
                                    .get(&p.key)
                                    .is_some_and(|l| l.mod_revision == p.mod_revision)
                        });
                    in_batch.insert((&*e.kv.key, e.kv.mod_revision));
                    held
                })
                .collect()
        };
        let packed: Vec<(Event, Option<Entry>, Option<Entry>)> = events
            .into_iter()
            .zip(held_prev)
            .map(|((e, prepacked), held)| {
                let kv = PackedEvent::packed_value(&e, prepacked.value, &self.dictionaries);
                let prev = match (&e.prev, held) {
                    (Some(p), false) => Some(match prepacked.prev {
                        Some(value) => Entry {
                            key: p.key.clone(),
                            value,
                            create_revision: p.create_revision,
                            mod_revision: p.mod_revision,
                        },
                        None => Entry::pack(p, &self.dictionaries),
                    }),
                    _ => None,
                };
                (e, kv, prev)
            })
            .collect();
        let revision = {
            let mut inner = self.inner.write();
            for (event, mut packed, packed_prev) in packed {
                // Share the held entry's bytes, and its key with the new
                // entry (a window of events would otherwise hold a copy of
                // a key in each).
                let held = inner.latest.get(&event.kv.key).cloned();
                let prev = match self.retention {
                    Retention::EveryKey => held,
                    Retention::Window => match (&event.prev, held, packed_prev) {
                        (None, _, _) => None,
                        (Some(p), Some(h), _) if h.mod_revision == p.mod_revision => Some(h),
                        (Some(_), _, Some(packed)) => Some(packed),
                        (Some(p), _, None) => Some(Entry::pack(p, &self.dictionaries)),
                    },
                };
                if let (Some(p), Some(kv)) = (&prev, packed.as_mut()) {
                    kv.key = p.key.clone();
                }
                let e = PackedEvent::new(&event, packed, prev, &self.dictionaries);
                match e.kind {
                    EventKind::Put => {
                        inner.latest.insert(e.kv.key.clone(), e.kv.clone());
                    }
                    EventKind::Delete => {
                        inner.latest.remove(&e.kv.key);
                    }
                }
                inner.revision = e.kv.mod_revision;
                inner.history.push_back(Arc::new(e));
                inner.fresh.push(event);
            }
            inner.trim(self.capacity, self.retention);
            inner.trim_fresh();
            inner.revision
        };
        self.notify.send_replace(revision);
    }

    async fn wait_for(&self, revision: Revision) -> Result<()> {
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

    fn compact(&self, revision: Revision) {
        let mut inner = self.inner.write();
        let revision = revision.min(inner.revision);
        while inner
            .history
            .front()
            .is_some_and(|e| e.revision() <= revision)
        {
            if let Some(e) = inner.history.pop_front() {
                inner.forget(&e, self.retention);
            }
        }
        inner.trim_fresh();
        inner.compacted = inner.compacted.max(revision);
    }

    fn close(&self) {
        self.inner.write().closed = true;
        let rev = self.revision();
        self.notify.send_replace(rev);
    }

    fn watch(
        self: &Arc<Self>,
        prefix: &str,
        after: Revision,
        backfill: Option<Arc<dyn Backfill>>,
    ) -> Result<Watch> {
        let inner = self.inner.read();
        if inner.closed {
            return Err(StoreError::Closed);
        }
        let oldest = match &backfill {
            Some(b) => b.compacted().min(inner.compacted),
            None => inner.compacted,
        };
        if after < oldest {
            return Err(StoreError::Compacted {
                requested: after,
                oldest,
            });
        }
        Ok(Watch {
            core: self.clone(),
            backfill,
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
        // History from `fresh_from` on is held plain as well.
        let fresh_from = inner.history.len() - inner.fresh.events.len();
        let packed: Vec<Arc<PackedEvent>> = inner
            .history
            .range(start.min(fresh_from)..fresh_from)
            .filter(|e| e.kv.key.starts_with(prefix))
            .take(UNPACK_BATCH)
            .cloned()
            .collect();
        // A full batch of older events may not be all of them: the watch
        // asks again after its last one before it reads the newest.
        let fresh: Vec<Event> = if packed.len() == UNPACK_BATCH {
            Vec::new()
        } else {
            inner
                .fresh
                .events
                .range(start.saturating_sub(fresh_from)..)
                .filter(|e| e.kv.key.starts_with(prefix))
                .cloned()
                .collect()
        };
        let revision = inner.revision;
        drop(inner);
        let mut events: Vec<Event> = packed.iter().map(|e| e.unpack()).collect();
        events.extend(fresh);
        Ok((events, revision))
    }
}

/// The state of every key and a window of recent events: reads and
/// watches for a backend that cannot serve them itself.
pub struct WatchCache {
    core: Arc<Core>,
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
        WatchCache {
            core: Arc::new(Core::new(
                Retention::EveryKey,
                state,
                history,
                (revision, compacted),
                capacity,
                Dictionaries::default(),
            )),
        }
    }

    pub fn revision(&self) -> Revision {
        self.core.revision()
    }

    pub fn compacted(&self) -> Revision {
        self.core.compacted()
    }

    pub fn get(&self, key: &str) -> Option<KeyValue> {
        self.core.latest(key)
    }

    /// Applies committed events (ascending revisions) and wakes watchers.
    pub fn apply(&self, events: Vec<Event>) {
        self.core.apply(
            events
                .into_iter()
                .map(|e| (e, Prepacked::default()))
                .collect(),
        )
    }

    /// Waits until the cache holds `revision` (or is closed).
    pub async fn wait_for(&self, revision: Revision) -> Result<()> {
        self.core.wait_for(revision).await
    }

    /// Forgets history at or below `revision`.
    pub fn compact(&self, revision: Revision) {
        self.core.compact(revision)
    }

    /// Ends every watch; later calls fail with `Closed`.
    pub fn close(&self) {
        self.core.close()
    }

    pub fn list(&self, prefix: &str, options: &ListOptions) -> Result<ListResult> {
        let (state, revision) = {
            let inner = self.core.inner.read();
            match options.revision {
                None => (inner.latest.clone(), inner.revision),
                Some(rev) if rev >= inner.revision => (inner.latest.clone(), inner.revision),
                Some(rev) => {
                    if rev < inner.compacted {
                        return Err(StoreError::Compacted {
                            requested: rev,
                            oldest: inner.compacted,
                        });
                    }
                    // Roll the current state back to `rev` by undoing newer events.
                    let mut state = inner.latest.clone();
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

    pub fn watch(&self, prefix: &str, after: Revision) -> Result<Watch> {
        self.core.watch(prefix, after, None)
    }
}

/// A window of recent events only, in front of a backend that serves
/// reads, and older events through its [`Backfill`], itself.
pub struct EventWindow {
    core: Arc<Core>,
    backfill: Arc<dyn Backfill>,
}

impl EventWindow {
    /// A window of `history` (ascending, the events after `compacted`) at
    /// `revision`, with room for `capacity` events.
    /// `dictionaries`: what the store kept from its last run, taken up
    /// ([`Dictionaries::seed`]) before `history` is packed, so that the
    /// history replayed does not make new ones of its own.
    pub fn new(
        history: Vec<Event>,
        (revision, compacted): (Revision, Revision),
        capacity: usize,
        backfill: Arc<dyn Backfill>,
        dictionaries: Dictionaries,
    ) -> Self {
        EventWindow {
            core: Arc::new(Core::new(
                Retention::Window,
                std::iter::empty(),
                history,
                (revision, compacted),
                capacity,
                dictionaries,
            )),
            backfill,
        }
    }

    /// The revision of the newest event applied: what reads may show.
    pub fn revision(&self) -> Revision {
        self.core.revision()
    }

    /// The current value of `key` when its newest event is in the window
    /// and is not a deletion. `None` tells nothing: read the backend.
    pub fn recent(&self, key: &str) -> Option<KeyValue> {
        self.core.latest(key)
    }

    /// Applies committed events (ascending revisions) and wakes watchers.
    pub fn apply(&self, events: Vec<Event>) {
        self.core.apply(
            events
                .into_iter()
                .map(|e| (e, Prepacked::default()))
                .collect(),
        )
    }

    /// Packs a value about to be written under `key` as the window will
    /// hold it. The store's writer commits alone on one thread; a caller
    /// that packs its value on its own thread takes that work off it.
    pub fn pack(&self, key: &str, value: &Bytes) -> Packed {
        Packed::pack_with(value, self.core.dictionaries.pick(family(key), value))
    }

    /// The revision of `key`'s current value when the window holds it
    /// (its newest event is in the window and is not a deletion), without
    /// reading the value. `None` tells nothing: read the backend.
    pub fn held_revision(&self, key: &str) -> Option<Revision> {
        self.core.held_revision(key)
    }

    /// As [`EventWindow::apply`], with what the writers packed
    /// ([`EventWindow::pack`]) on their own threads.
    pub fn apply_packed(&self, events: Vec<(Event, Prepacked)>) {
        self.core.apply(events)
    }

    /// Forgets the window's events at or below `revision`.
    pub fn compact(&self, revision: Revision) {
        self.core.compact(revision)
    }

    /// Ends every watch; later calls fail with `Closed`.
    pub fn close(&self) {
        self.core.close()
    }

    pub fn watch(&self, prefix: &str, after: Revision) -> Result<Watch> {
        self.core.watch(prefix, after, Some(self.backfill.clone()))
    }
}

/// A stream of events under a prefix, resumable from any revision the
/// window (or its backfill) still holds. A watcher that falls behind what
/// is held gets `Compacted`.
pub struct Watch {
    core: Arc<Core>,
    backfill: Option<Arc<dyn Backfill>>,
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
            let from_window = self.core.events_after(&self.prefix, self.after);
            let (events, seen) = match (from_window, &self.backfill) {
                (Err(StoreError::Compacted { .. }), Some(backfill)) => {
                    let (events, seen) =
                        backfill.events_after(&self.prefix, self.after, self.core.revision())?;
                    if events.is_empty() {
                        // Read up to `seen`, which the window has reached:
                        // go on from the window.
                        self.after = self.after.max(seen);
                        continue;
                    }
                    (events, seen)
                }
                (from_window, _) => from_window?,
            };
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

/// A log with nothing before the window, for tests of what reads the
/// window alone.
#[cfg(test)]
pub(crate) struct NoBackfill;

#[cfg(test)]
impl Backfill for NoBackfill {
    fn events_after(
        &self,
        _: &str,
        _: Revision,
        until: Revision,
    ) -> Result<(Vec<Event>, Revision)> {
        Ok((Vec::new(), until))
    }
    fn compacted(&self) -> Revision {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(key: &str, revision: Revision) -> Event {
        Event {
            kind: EventKind::Put,
            kv: KeyValue {
                key: Arc::from(key),
                value: Bytes::from(format!("{{\"n\":{revision}}}")),
                create_revision: revision,
                mod_revision: revision,
            },
            prev: None,
        }
    }

    #[tokio::test]
    async fn a_watch_far_behind_catches_up_in_bounded_batches_missing_nothing() {
        let window = EventWindow::new(
            Vec::new(),
            (0, 0),
            10_000,
            Arc::new(NoBackfill),
            Dictionaries::default(),
        );
        let total = 3 * UNPACK_BATCH + FRESH_EVENTS;
        let events: Vec<Event> = (1..=total as Revision)
            .map(|r| put(&format!("/k/{r:05}"), r))
            .collect();
        window.apply(events);
        let mut watch = window.watch("/k/", 0).expect("in the window");
        let mut seen = Vec::new();
        let mut largest_older = 0;
        while seen.len() < total {
            let batch = watch.next().await.expect("a batch");
            // Until the plain newest part, each batch unpacks at most a batch.
            if batch
                .first()
                .is_some_and(|e| e.revision() as usize <= total - FRESH_EVENTS)
            {
                largest_older = largest_older.max(batch.len());
            }
            seen.extend(batch.iter().map(|e| e.revision()));
        }
        assert_eq!(largest_older, UNPACK_BATCH);
        assert_eq!(seen, (1..=total as Revision).collect::<Vec<_>>());
        assert_eq!(watch.revision(), total as Revision);
    }
}
