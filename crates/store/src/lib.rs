//! Flotilla's storage layer: a revisioned key-value store with etcd's semantics.
//!
//! There is one global revision counter. Every successful write (create,
//! update, delete) takes the next revision; that number is what the API layer
//! exposes as `metadata.resourceVersion`. The current state is the newest
//! entry per key; history since the last compaction can be listed and watched.
//!
//! [`Store`] is the contract the API server is written against. The embedded
//! backend, [`SqliteStore`], keeps the durable revision log in SQLite (WAL mode,
//! one fsync per group of writes), reads gets and lists from it, and serves
//! watches from an in-memory [`EventWindow`] of recent events, so memory
//! grows with the rate of change rather than with the number of objects.
//! The etcd backend, [`EtcdStore`], keeps every key in a [`WatchCache`], as
//! kube-apiserver does in front of etcd.
#![forbid(unsafe_code)]

mod cache;
mod etcd;
pub mod packed;
mod sqlite;
pub mod testing;

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;

pub use cache::{Backfill, EventWindow, Prepacked, Watch, WatchCache};
pub use etcd::{DEFAULT_ENDPOINT as DEFAULT_ETCD_ENDPOINT, DEFAULT_PREFIX as DEFAULT_ETCD_PREFIX};
pub use etcd::{EtcdOptions, EtcdStore};
pub use packed::Packed;
pub use sqlite::{PIPELINE_GROUPS_CORES, PIPELINE_GROUPS_FROM, SqliteOptions, SqliteStore};

/// The CPUs this process may use (its CPU affinity and cgroup quota), 2
/// when that cannot be told; read once. What the store's writer and the
/// federation controllers size themselves for.
pub fn usable_cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(2, |n| n.get()))
}

/// A store revision; the API layer's resourceVersion.
pub type Revision = i64;

/// One key at one revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyValue {
    pub key: Arc<str>,
    pub value: Bytes,
    /// Revision at which the key was created (unchanged by updates).
    pub create_revision: Revision,
    /// Revision of the last write to the key. For a deletion event, the
    /// revision of the deletion itself.
    pub mod_revision: Revision,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    Put,
    Delete,
}

/// One change in the revision log.
#[derive(Clone, Debug)]
pub struct Event {
    pub kind: EventKind,
    /// The new state. For a deletion: the last value, at the deletion's revision.
    pub kv: KeyValue,
    /// The state before this event, if the key existed.
    pub prev: Option<KeyValue>,
}

impl Event {
    pub fn revision(&self) -> Revision {
        self.kv.mod_revision
    }
}

/// Options for [`Store::list`].
#[derive(Clone, Debug, Default)]
pub struct ListOptions {
    /// Read the state as of this revision; `None` reads the newest state.
    pub revision: Option<Revision>,
    /// Only keys strictly greater than this one (pagination).
    pub start_after: Option<String>,
    /// At most this many items; `None` or 0 means all.
    pub limit: Option<usize>,
}

#[derive(Clone, Debug)]
pub struct ListResult {
    pub items: Vec<KeyValue>,
    /// The revision the list was read at.
    pub revision: Revision,
    /// Whether keys remain after the last item returned.
    pub more: bool,
}

/// Preconditions for a delete.
#[derive(Clone, Copy, Debug, Default)]
pub struct DeletePrecondition {
    pub mod_revision: Option<Revision>,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("key {0:?} already exists")]
    AlreadyExists(String),
    #[error("key {0:?} not found")]
    NotFound(String),
    #[error("key {key:?} was modified: expected revision {expected}, found {actual}")]
    Conflict {
        key: String,
        expected: Revision,
        actual: Revision,
    },
    #[error("revision {requested} has been compacted; oldest available is {oldest}")]
    Compacted {
        requested: Revision,
        oldest: Revision,
    },
    #[error("the store is closed")]
    Closed,
    #[error("storage I/O failed: {0}")]
    Backend(#[from] rusqlite::Error),
    #[error("storage I/O failed: {0}")]
    Io(#[from] std::io::Error),
    /// An etcd request failed: its gRPC status, in words.
    #[error("etcd request failed: {0}")]
    Etcd(String),
    #[error("storage unavailable: {0}")]
    Unavailable(String),
    /// The data on disk is not in a format this build reads.
    #[error("{0}")]
    Incompatible(String),
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// What a store's single writer has done since the store opened, for
/// `/metrics`: whether it keeps up with the writes, as etcd's
/// `etcd_disk_*` durations tell of etcd.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct WriterStats {
    /// Transactions committed that wrote something.
    pub commits: u64,
    /// Writes that took a revision in them (not those refused: a
    /// conflict, a key that exists).
    pub writes: u64,
    /// Time the writer thread spent on groups of writes (checked, written
    /// to the log, and synced and answered where it did that itself) and
    /// on compactions: while busy, arriving writes wait for the next group.
    pub busy_seconds: f64,
    /// Syncs of the write-ahead log: one per commit while writes come
    /// apart, fewer under load, when one sync covers every group
    /// committed before it.
    pub syncs: u64,
    /// Time in those syncs, on the writer's thread or the publisher's.
    pub sync_seconds: f64,
    /// Time the publishing thread spent on groups the writer handed it
    /// under load: the log synced, the events applied to the watch window
    /// and the writes answered, while the writer went on to the next group.
    pub publisher_busy_seconds: f64,
}

/// The storage contract of the API server, shaped after etcd: every write
/// is a compare-and-swap on one key that yields a new global revision.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Creates `key`; fails with `AlreadyExists` if it is present.
    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue>;
    /// Replaces `key` if its mod revision is still `expected`.
    async fn update(&self, key: &str, value: Bytes, expected: Revision) -> Result<KeyValue>;
    /// Replaces `current.key` with `value` if it is still at `current`'s
    /// revision: [`Store::update`] for a writer holding the value it read
    /// and changed, which a backend may take as the previous value rather
    /// than read it again. `current` is a live value as this store gave
    /// it (a get, a list, a create's or update's result), unchanged; a
    /// deletion's result names no live value, and an update from it is
    /// `NotFound`.
    async fn update_from(&self, current: &KeyValue, value: Bytes) -> Result<KeyValue> {
        self.update(&current.key, value, current.mod_revision).await
    }
    /// Removes `key`; returns its last value at the deletion's revision.
    async fn delete(&self, key: &str, precondition: DeletePrecondition) -> Result<KeyValue>;
    /// The newest value of `key`.
    fn get(&self, key: &str) -> Result<Option<KeyValue>>;
    /// Keys under `prefix`, consistent at one revision.
    fn list(&self, prefix: &str, options: &ListOptions) -> Result<ListResult>;
    /// Events under `prefix` with revisions greater than `after`.
    fn watch(&self, prefix: &str, after: Revision) -> Result<Watch>;
    /// The newest revision.
    fn current_revision(&self) -> Revision;
    /// History at or below this revision is no longer available.
    fn compacted_revision(&self) -> Revision;
    /// Drops history at or below `revision`.
    async fn compact(&self, revision: Revision) -> Result<()>;
    /// Waits until reads through this store show every write committed
    /// before the call, through this store or any other sharing the same
    /// data (another replica on the same etcd): what a read that asks for
    /// the latest state needs. A store that only it writes is always
    /// current.
    async fn sync(&self) -> Result<()> {
        Ok(())
    }
    /// The writer's figures, where this process commits the writes
    /// itself (the embedded store); etcd reports its own.
    fn writer_stats(&self) -> Option<WriterStats> {
        None
    }
}

/// Compacts, every interval, the history older than the previous interval,
/// as kube-apiserver's compactor does against etcd.
pub(crate) fn spawn_compactor(store: std::sync::Weak<dyn Store>, interval: std::time::Duration) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        tracing::warn!("no tokio runtime; periodic compaction disabled");
        return;
    };
    runtime.spawn(async move {
        let mut previous: Option<Revision> = None;
        loop {
            tokio::time::sleep(interval).await;
            let Some(store) = store.upgrade() else { return };
            if let Some(rev) = previous
                && let Err(error) = store.compact(rev).await
            {
                tracing::warn!(%error, revision = rev, "compaction failed");
            }
            previous = Some(store.current_revision());
        }
    });
}
