//! The embedded backend: a revision log in SQLite, as kine keeps it.
//!
//! One table holds every write; the newest row per key is the current state
//! and a row with `deleted = 1` is a tombstone. A single writer thread owns
//! the connection and commits queued writes in groups: one transaction and
//! one fsync (WAL, `synchronous=FULL`) per group, and no write is
//! acknowledged before its group is durable. Reads never touch SQLite: the
//! writer feeds each committed group into the [`WatchCache`].

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use rusqlite::{Connection, OptionalExtension, params};
use tokio::sync::oneshot;
use tracing::{debug, info, warn};

use crate::cache::{Watch, WatchCache};
use crate::{
    DeletePrecondition, Event, EventKind, KeyValue, ListOptions, ListResult, Result, Revision,
    Store, StoreError,
};

/// Tuning for [`SqliteStore`].
#[derive(Clone, Debug)]
pub struct SqliteOptions {
    /// How many recent events the watch cache keeps for watch resumption and
    /// reads at older revisions.
    pub history_capacity: usize,
    /// How often history older than one interval is compacted; `None` never.
    pub compaction_interval: Option<Duration>,
    /// Most writes committed in one transaction.
    pub max_batch: usize,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            history_capacity: 100_000,
            compaction_interval: Some(Duration::from_secs(300)),
            max_batch: 1024,
        }
    }
}

enum Op {
    Create {
        key: String,
        value: Bytes,
    },
    Update {
        key: String,
        value: Bytes,
        expected: Revision,
    },
    Delete {
        key: String,
        precondition: DeletePrecondition,
    },
}

enum Request {
    Write(Op, oneshot::Sender<Result<KeyValue>>),
    Compact(Revision, oneshot::Sender<Result<()>>),
}

pub struct SqliteStore {
    cache: Arc<WatchCache>,
    writer: mpsc::Sender<Request>,
    path: PathBuf,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS log (
    revision        INTEGER PRIMARY KEY,
    key             TEXT    NOT NULL,
    deleted         INTEGER NOT NULL,
    create_revision INTEGER NOT NULL,
    prev_revision   INTEGER,
    value           BLOB    NOT NULL
);
CREATE INDEX IF NOT EXISTS log_key_revision ON log (key, revision);
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
";

impl SqliteStore {
    /// Opens (or creates) the store in `dir`, replaying the log into memory.
    pub fn open(dir: &Path, options: SqliteOptions) -> Result<Arc<Self>> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join("flotilla.db");
        let conn = Connection::open(&path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.busy_timeout(Duration::from_secs(5))?;
        conn.execute_batch(SCHEMA)?;

        let compacted: Revision = conn
            .query_row("SELECT value FROM meta WHERE name = 'compacted'", [], |r| {
                r.get(0)
            })
            .optional()?
            .unwrap_or(0);
        let newest: Revision =
            conn.query_row("SELECT COALESCE(MAX(revision), 0) FROM log", [], |r| {
                r.get(0)
            })?;
        let revision = newest.max(compacted);

        let mut state = Vec::new();
        {
            let mut stmt = conn.prepare(
                "SELECT key, value, create_revision, revision FROM log
                 WHERE revision IN (SELECT MAX(revision) FROM log GROUP BY key) AND deleted = 0",
            )?;
            let rows = stmt.query_map([], |r| {
                Ok(KeyValue {
                    key: Arc::from(r.get::<_, String>(0)?),
                    value: Bytes::from(r.get::<_, Vec<u8>>(1)?),
                    create_revision: r.get(2)?,
                    mod_revision: r.get(3)?,
                })
            })?;
            for row in rows {
                state.push(row?);
            }
        }

        // Reload the recent history so watches resume across restarts.
        let history_from = compacted.max(revision - options.history_capacity as Revision);
        let history = load_history(&conn, history_from)?;
        info!(
            path = %path.display(),
            revision,
            keys = state.len(),
            history = history.len(),
            "opened embedded store"
        );
        let cache = Arc::new(WatchCache::new(
            state,
            history,
            revision,
            history_from,
            options.history_capacity,
        ));

        let (writer, requests) = mpsc::channel();
        let writer_cache = cache.clone();
        let max_batch = options.max_batch.max(1);
        std::thread::Builder::new()
            .name("flotilla-store-writer".into())
            .spawn(move || writer_loop(conn, writer_cache, requests, max_batch))?;

        let store = Arc::new(SqliteStore {
            cache,
            writer,
            path,
        });
        if let Some(interval) = options.compaction_interval {
            crate::spawn_compactor(
                Arc::downgrade(&store) as std::sync::Weak<dyn Store>,
                interval,
            );
        }
        Ok(store)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    async fn write(&self, op: Op) -> Result<KeyValue> {
        let (tx, rx) = oneshot::channel();
        self.writer
            .send(Request::Write(op, tx))
            .map_err(|_| StoreError::Closed)?;
        rx.await.map_err(|_| StoreError::Closed)?
    }
}

impl Drop for SqliteStore {
    fn drop(&mut self) {
        self.cache.close();
    }
}

fn load_history(conn: &Connection, after: Revision) -> Result<Vec<Event>> {
    let mut stmt = conn.prepare(
        "SELECT l.revision, l.key, l.deleted, l.create_revision, l.value,
                p.revision, p.create_revision, p.value
         FROM log l LEFT JOIN log p ON p.revision = l.prev_revision
         WHERE l.revision > ?1 ORDER BY l.revision",
    )?;
    let rows = stmt.query_map([after], |r| {
        let key: Arc<str> = Arc::from(r.get::<_, String>(1)?);
        let deleted: bool = r.get(2)?;
        let kv = KeyValue {
            key: key.clone(),
            mod_revision: r.get(0)?,
            create_revision: r.get(3)?,
            value: Bytes::from(r.get::<_, Vec<u8>>(4)?),
        };
        let prev = match r.get::<_, Option<Revision>>(5)? {
            Some(mod_revision) => Some(KeyValue {
                key,
                mod_revision,
                create_revision: r.get(6)?,
                value: Bytes::from(r.get::<_, Vec<u8>>(7)?),
            }),
            None => None,
        };
        Ok(Event {
            kind: if deleted {
                EventKind::Delete
            } else {
                EventKind::Put
            },
            kv,
            prev,
        })
    })?;
    let mut events = Vec::new();
    for row in rows {
        events.push(row?);
    }
    Ok(events)
}

fn writer_loop(
    mut conn: Connection,
    cache: Arc<WatchCache>,
    requests: mpsc::Receiver<Request>,
    max_batch: usize,
) {
    while let Ok(first) = requests.recv() {
        let mut batch = Vec::new();
        let mut next = Some(first);
        while let Some(request) = next.take() {
            match request {
                Request::Write(op, reply) => batch.push((op, reply)),
                Request::Compact(rev, reply) => {
                    // Commit what is queued before compacting.
                    commit_batch(&mut conn, &cache, std::mem::take(&mut batch));
                    let _ = reply.send(compact(&mut conn, &cache, rev));
                }
            }
            if batch.len() < max_batch {
                next = requests.try_recv().ok();
            }
        }
        commit_batch(&mut conn, &cache, batch);
    }
    debug!("store writer stopped");
}

type Reply = oneshot::Sender<Result<KeyValue>>;

fn commit_batch(conn: &mut Connection, cache: &WatchCache, batch: Vec<(Op, Reply)>) {
    if batch.is_empty() {
        return;
    }
    let mut revision = cache.revision();
    // Keys written earlier in this batch, visible to later ops in it.
    let mut overlay: HashMap<String, Option<KeyValue>> = HashMap::new();
    let mut events = Vec::new();
    let mut outcomes: Vec<(Reply, Result<KeyValue>)> = Vec::with_capacity(batch.len());

    let result = (|| -> Result<()> {
        let tx = conn.transaction()?;
        {
            let mut insert = tx.prepare_cached(
                "INSERT INTO log (revision, key, deleted, create_revision, prev_revision, value)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?;
            for (op, reply) in batch {
                let key = match &op {
                    Op::Create { key, .. } | Op::Update { key, .. } | Op::Delete { key, .. } => {
                        key.clone()
                    }
                };
                let current = match overlay.get(&key) {
                    Some(v) => v.clone(),
                    None => cache.get(&key),
                };
                let planned = plan(op, &key, current, revision + 1);
                let event = match planned {
                    Ok(event) => event,
                    Err(e) => {
                        outcomes.push((reply, Err(e)));
                        continue;
                    }
                };
                revision += 1;
                insert.execute(params![
                    revision,
                    key,
                    event.kind == EventKind::Delete,
                    event.kv.create_revision,
                    event.prev.as_ref().map(|p| p.mod_revision),
                    &event.kv.value[..],
                ])?;
                overlay.insert(
                    key,
                    (event.kind == EventKind::Put).then(|| event.kv.clone()),
                );
                outcomes.push((reply, Ok(event.kv.clone())));
                events.push(event);
            }
        }
        tx.commit()?;
        Ok(())
    })();

    match result {
        Ok(()) => {
            cache.apply(events);
            for (reply, outcome) in outcomes {
                let _ = reply.send(outcome);
            }
        }
        Err(error) => {
            warn!(%error, "store commit failed; rejecting the whole batch");
            let message = error.to_string();
            for (reply, _) in outcomes {
                let _ = reply.send(Err(StoreError::Io(std::io::Error::other(message.clone()))));
            }
        }
    }
}

/// Checks an operation against the key's current value and builds its event.
fn plan(op: Op, key: &str, current: Option<KeyValue>, revision: Revision) -> Result<Event> {
    let key: Arc<str> = Arc::from(key);
    match op {
        Op::Create { value, .. } => match current {
            Some(_) => Err(StoreError::AlreadyExists(key.to_string())),
            None => Ok(Event {
                kind: EventKind::Put,
                kv: KeyValue {
                    key,
                    value,
                    create_revision: revision,
                    mod_revision: revision,
                },
                prev: None,
            }),
        },
        Op::Update {
            value, expected, ..
        } => {
            let prev = current.ok_or_else(|| StoreError::NotFound(key.to_string()))?;
            if prev.mod_revision != expected {
                return Err(StoreError::Conflict {
                    key: key.to_string(),
                    expected,
                    actual: prev.mod_revision,
                });
            }
            Ok(Event {
                kind: EventKind::Put,
                kv: KeyValue {
                    key,
                    value,
                    create_revision: prev.create_revision,
                    mod_revision: revision,
                },
                prev: Some(prev),
            })
        }
        Op::Delete { precondition, .. } => {
            let prev = current.ok_or_else(|| StoreError::NotFound(key.to_string()))?;
            if let Some(expected) = precondition.mod_revision
                && prev.mod_revision != expected
            {
                return Err(StoreError::Conflict {
                    key: key.to_string(),
                    expected,
                    actual: prev.mod_revision,
                });
            }
            Ok(Event {
                kind: EventKind::Delete,
                kv: KeyValue {
                    key,
                    value: prev.value.clone(),
                    create_revision: prev.create_revision,
                    mod_revision: revision,
                },
                prev: Some(prev),
            })
        }
    }
}

fn compact(conn: &mut Connection, cache: &WatchCache, revision: Revision) -> Result<()> {
    let revision = revision.min(cache.revision());
    let tx = conn.transaction()?;
    // Drop superseded rows and tombstones at or below the compaction point;
    // the newest live row of every key stays.
    let removed = tx.execute(
        "DELETE FROM log WHERE revision <= ?1 AND (deleted = 1 OR revision <
            (SELECT MAX(n.revision) FROM log n WHERE n.key = log.key AND n.revision <= ?1))",
        [revision],
    )?;
    tx.execute(
        "INSERT INTO meta (name, value) VALUES ('compacted', ?1)
         ON CONFLICT (name) DO UPDATE SET value = MAX(value, excluded.value)",
        [revision],
    )?;
    tx.commit()?;
    cache.compact(revision);
    debug!(revision, removed, "compacted");
    Ok(())
}

#[async_trait]
impl Store for SqliteStore {
    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue> {
        self.write(Op::Create {
            key: key.to_string(),
            value,
        })
        .await
    }

    async fn update(&self, key: &str, value: Bytes, expected: Revision) -> Result<KeyValue> {
        self.write(Op::Update {
            key: key.to_string(),
            value,
            expected,
        })
        .await
    }

    async fn delete(&self, key: &str, precondition: DeletePrecondition) -> Result<KeyValue> {
        self.write(Op::Delete {
            key: key.to_string(),
            precondition,
        })
        .await
    }

    fn get(&self, key: &str) -> Option<KeyValue> {
        self.cache.get(key)
    }

    fn list(&self, prefix: &str, options: &ListOptions) -> Result<ListResult> {
        self.cache.list(prefix, options)
    }

    fn watch(&self, prefix: &str, after: Revision) -> Result<Watch> {
        self.cache.watch(prefix, after)
    }

    fn current_revision(&self) -> Revision {
        self.cache.revision()
    }

    fn compacted_revision(&self) -> Revision {
        self.cache.compacted()
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        let (tx, rx) = oneshot::channel();
        self.writer
            .send(Request::Compact(revision, tx))
            .map_err(|_| StoreError::Closed)?;
        rx.await.map_err(|_| StoreError::Closed)?
    }
}
