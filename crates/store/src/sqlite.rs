//! The embedded backend: a revision log in SQLite, as kine keeps it.
//!
//! One table holds every write; the newest row per key is the current state
//! and a row with `deleted = 1` is a tombstone. A single writer thread owns
//! the connection and commits queued writes in groups, one transaction a
//! group (`writer.rs`). No write is acknowledged before its group is
//! durable: the log is synced (fdatasync of the WAL) after the commit and
//! before the group's answers (`publish.rs`); under load one sync covers
//! several groups, and the writer commits the next while it runs. Between
//! groups the writer looks for the next write a moment before it sleeps,
//! while its writes come close together (`NextWriteLook`).
//!
//! Gets and lists read the table through a small pool of read-only
//! connections, each in its own snapshot (WAL readers never block the
//! writer). The writer feeds each committed group into the [`EventWindow`]
//! that watches are served from; a watch that starts before the window
//! reads its first events from the table. Memory holds only what changed
//! recently, never every object.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use parking_lot::Mutex;
use rusqlite::config::DbConfig;
use rusqlite::{Connection, OpenFlags, OptionalExtension, Row, TransactionBehavior, params};
use tokio::sync::oneshot;
use tracing::{debug, info, warn};

use crate::cache::{Backfill, EventWindow, Watch};
use crate::packed::{Dictionaries, Packed};
use crate::{
    DeletePrecondition, Event, EventKind, KeyValue, ListOptions, ListResult, Result, Revision,
    Store, StoreError, WriterStats,
};

/// Tuning for [`SqliteStore`].
#[derive(Clone, Debug)]
pub struct SqliteOptions {
    /// How many recent events the watch window keeps in memory. Watches
    /// from older revisions (back to the last compaction) read the log.
    pub history_capacity: usize,
    /// How often history older than one interval is compacted; `None` never.
    pub compaction_interval: Option<Duration>,
    /// Most writes committed in one transaction.
    pub max_batch: usize,
    /// Writes waiting from which the writer hands a committed group to the
    /// publishing thread, to be synced and answered there while it writes
    /// the next, rather than syncing and answering it itself (0: always).
    pub pipeline_from: usize,
    /// Writes of a committed group from which it is handed to the
    /// publishing thread whatever waits (`usize::MAX`: never). Writers
    /// that come at once, as in a burst, leave nothing waiting behind the
    /// group that took them all; handed over, its sync and its events'
    /// way into the window (a quarter of the writer's CPU in a burst) run
    /// on another core. Default: [`PIPELINE_GROUPS_FROM`] where more than
    /// [`PIPELINE_GROUPS_CORES`] cores may run this process, never on
    /// fewer, where that core is the request handlers'.
    pub pipeline_groups_from: usize,
}

/// Writes of a group handed over whatever waits, with cores to spare.
pub const PIPELINE_GROUPS_FROM: usize = 8;

/// Cores this process may use above which large groups are handed over.
/// On 2 cores it cost a burst through the control plane a sixth more time
/// and CPU (each hand-over wakes a thread and leaves the writer looking
/// for work), while saving the writer, not the bound there, a quarter of
/// its CPU (docs/benchmarks/history.md, "Fifth session of 2026-11-28").
pub const PIPELINE_GROUPS_CORES: usize = 4;

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            history_capacity: 100_000,
            compaction_interval: Some(Duration::from_secs(300)),
            max_batch: 1024,
            pipeline_from: 2,
            pipeline_groups_from: pipeline_groups_from_here(),
        }
    }
}

/// [`SqliteOptions::pipeline_groups_from`] for the cores this process may
/// use.
fn pipeline_groups_from_here() -> usize {
    if crate::usable_cores() > PIPELINE_GROUPS_CORES {
        PIPELINE_GROUPS_FROM
    } else {
        usize::MAX
    }
}

mod publish;
mod stored;
mod writer;

use stored::{LogDictionaries, StoredValue};
use writer::{Queue, WriterCounters, WriterParts};

/// SQLite's write-ahead log beside the database file `db`.
fn wal_path(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push("-wal");
    PathBuf::from(name)
}

enum Op {
    /// `packed`: the value as the event window will hold it, packed by the
    /// caller (`EventWindow::pack`) rather than by the writer.
    Create {
        key: String,
        value: Bytes,
        packed: Packed,
    },
    Update {
        key: String,
        value: Bytes,
        packed: Packed,
        expected: Revision,
        /// The value the caller read and changed, when it said which.
        base: Option<Base>,
    },
    Delete {
        key: String,
        precondition: DeletePrecondition,
    },
}

/// The value an update was made from ([`Store::update_from`]): where it
/// is still the key's newest, the writer takes it as the previous value
/// instead of reading that back from the log and packing it for the
/// window on its own thread, the one every write of the process waits on.
struct Base {
    kv: KeyValue,
    /// Packed by the caller where the window no longer held it.
    packed: Option<Packed>,
}

enum Request {
    Write(Op, oneshot::Sender<Result<KeyValue>>),
    Compact(Revision, oneshot::Sender<Result<()>>),
    /// From the publisher: it has published what it was handed.
    Published,
    /// From the store as it is dropped: the writer stops after what is
    /// queued before it.
    Close,
}

pub struct SqliteStore {
    window: Arc<EventWindow>,
    log: Arc<LogReader>,
    writer: Queue,
    path: PathBuf,
    stats: Arc<WriterCounters>,
}

/// Idle read connections kept for reuse; more are opened under load and
/// closed after.
const IDLE_READERS: usize = 4;
/// Page cache of each read connection (KiB). The operating system caches
/// the file too; this only saves system calls on hot pages.
const READER_CACHE_KIB: i64 = 1024;
/// Most events a watch reads from the log at once.
const BACKFILL_BATCH: usize = 1000;

/// Reads of the revision log: gets, lists and watch backfill, each in a
/// snapshot of its own.
struct LogReader {
    path: PathBuf,
    /// What the log's packed values were packed against.
    dictionaries: Arc<LogDictionaries>,
    idle: Mutex<Vec<Connection>>,
    /// History at or below this revision is compacted away.
    compacted: AtomicI64,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS log (
    revision        INTEGER PRIMARY KEY,
    key             TEXT    NOT NULL,
    deleted         INTEGER NOT NULL,
    create_revision INTEGER NOT NULL,
    prev_revision   INTEGER,
    value           BLOB    NOT NULL,
    packing         INTEGER NOT NULL DEFAULT 0,
    dictionary      INTEGER
);
CREATE INDEX IF NOT EXISTS log_key_revision ON log (key, revision);
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS dictionaries (
    id      INTEGER PRIMARY KEY,
    family  TEXT    NOT NULL,
    made_at INTEGER NOT NULL,
    content BLOB    NOT NULL
);
";

/// The on-disk format this build reads and writes, kept in SQLite's
/// `user_version`: 2 keeps values packed (`stored.rs`). A store of format
/// 1, or of before the format was recorded (0), gets the columns and the
/// table format 2 adds on open (its rows stay plain, as they were) and is
/// stamped 2: from then on only a build that reads format 2 opens it.
const FORMAT: i64 = 2;

/// Brings the schema of a format 0 or 1 store up to [`FORMAT`], in the
/// transaction that stamps it: adding a column with a constant default
/// rewrites no row.
fn upgrade_schema(conn: &Connection) -> Result<()> {
    let packed: i64 = conn.query_row(
        "SELECT COUNT(*) FROM pragma_table_info('log') WHERE name = 'packing'",
        [],
        |r| r.get(0),
    )?;
    if packed == 0 {
        conn.execute_batch(
            "ALTER TABLE log ADD COLUMN packing INTEGER NOT NULL DEFAULT 0;
             ALTER TABLE log ADD COLUMN dictionary INTEGER;",
        )?;
    }
    Ok(())
}

/// Refuses a store written in a format this build does not know, before
/// anything is written to it.
fn check_format(conn: &Connection, path: &Path) -> Result<()> {
    let found: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    if found > FORMAT {
        return Err(StoreError::Incompatible(format!(
            "{} was written by a newer Flotilla (store format {found}; this one reads up to {FORMAT}): \
             run that version, or choose another --data-dir",
            path.display()
        )));
    }
    if found == 0 {
        let tables: i64 = conn.query_row(
            "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table'",
            [],
            |r| r.get(0),
        )?;
        let ours: i64 = conn.query_row(
            "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name IN ('log', 'meta')",
            [],
            |r| r.get(0),
        )?;
        if tables > 0 && ours != 2 {
            return Err(StoreError::Incompatible(format!(
                "{} is a SQLite database but not Flotilla's store: choose another --data-dir",
                path.display()
            )));
        }
    }
    Ok(())
}

impl SqliteStore {
    /// Opens (or creates) the store in `dir`, loading the recent history
    /// into the event window; state stays on disk.
    pub fn open(dir: &Path, options: SqliteOptions) -> Result<Arc<Self>> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join("flotilla.db");
        let mut conn = Connection::open(&path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.busy_timeout(Duration::from_secs(5))?;
        stable_plans(&conn)?;
        check_format(&conn, &path)?;
        {
            // IMMEDIATE: the write lock before the schema is read.
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            tx.execute_batch(SCHEMA)?;
            upgrade_schema(&tx)?;
            tx.pragma_update(None, "user_version", FORMAT)?;
            tx.commit()?;
        }
        let dictionaries = Arc::new(LogDictionaries::load(&conn)?);

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

        // Reload the recent history so that watches resume across restarts
        // without reading the log.
        let history_from = compacted.max(revision - options.history_capacity as Revision);
        let history = load_history(&conn, &dictionaries, (history_from, revision), None, None)?;
        info!(
            path = %path.display(),
            revision,
            history = history.len(),
            "opened embedded store"
        );
        let log = Arc::new(LogReader {
            path: path.clone(),
            dictionaries: dictionaries.clone(),
            idle: Mutex::new(Vec::new()),
            compacted: AtomicI64::new(compacted),
        });
        // Values pack against the dictionaries of the last run, the
        // history replayed included, not against new ones made from it.
        let packing = Dictionaries::default();
        for dictionary in dictionaries.newest_of_each_family() {
            packing.seed(dictionary);
        }
        let window = Arc::new(EventWindow::new(
            history,
            (revision, history_from),
            options.history_capacity,
            log.clone(),
            packing,
        ));

        // The writer leaves checkpoints to a thread of their own, unless
        // that one falls far behind.
        conn.pragma_update(None, "wal_autocheckpoint", WRITER_CHECKPOINT_PAGES)?;
        // A WAL grown while readers held a checkpoint off is cut back to
        // this size once it is reused.
        conn.pragma_update(None, "journal_size_limit", WAL_SIZE_LIMIT)?;
        let (nudges, commits) = mpsc::sync_channel(1);
        let written = Arc::new(AtomicU64::new(0));
        let checkpoint_written = written.clone();
        let checkpoints = Connection::open(&path)?;
        // The database file is synced before the WAL may be reused.
        checkpoints.pragma_update(None, "synchronous", "FULL")?;
        checkpoints.pragma_update(None, "journal_size_limit", WAL_SIZE_LIMIT)?;
        checkpoints.busy_timeout(Duration::from_secs(5))?;
        std::thread::Builder::new()
            .name("store-checkpoints".into())
            .spawn(move || checkpoint_loop(checkpoints, commits, checkpoint_written))?;

        // The writer commits without syncing; the publisher syncs the log
        // before anything of a group is answered or seen (`publish.rs`).
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        let stats = Arc::new(WriterCounters::default());
        let writer = writer::spawn(
            conn,
            WriterParts {
                window: window.clone(),
                log: log.clone(),
                stats: stats.clone(),
                written,
                nudges,
                wal: wal_path(&path),
                max_batch: options.max_batch,
                pipeline_from: options.pipeline_from,
                pipeline_groups_from: options.pipeline_groups_from,
            },
        )?;

        let store = Arc::new(SqliteStore {
            window,
            log,
            writer,
            path,
            stats,
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
        if !self.writer.send(Request::Write(op, tx)) {
            return Err(StoreError::Closed);
        }
        rx.await.map_err(|_| StoreError::Closed)?
    }
}

impl Drop for SqliteStore {
    fn drop(&mut self) {
        self.window.close();
        // The publisher holds a sender of the writer's queue too: the
        // queue does not close by itself.
        self.writer.send(Request::Close);
    }
}

/// Plans that do not depend on bound values. Without this SQLite
/// re-prepares a cached statement such as `newest_row`'s on every run
/// (its plan may depend on the key bound), which cost more than the read.
fn stable_plans(conn: &Connection) -> Result<()> {
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
    Ok(())
}

/// The first key after every key under `prefix` (`None`: no bound).
/// SQLite compares text as bytes, and UTF-8 bytes sort as code points do.
fn prefix_end(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        let next = (last as u32 + 1..=char::MAX as u32).find_map(char::from_u32);
        if let Some(next) = next {
            chars.push(next);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

const HISTORY_SELECT: &str = "SELECT l.revision, l.key, l.deleted, l.create_revision,
        l.value, l.packing, l.dictionary,
        p.revision, p.create_revision, p.value, p.packing, p.dictionary
     FROM log l LEFT JOIN log p ON p.revision = l.prev_revision
     WHERE l.revision > ?1 AND l.revision <= ?2 AND l.key >= ?3 AND (?4 IS NULL OR l.key < ?4)
     ORDER BY l.revision LIMIT ?5";

/// Events after revision `after` up to `until`, oldest first: under
/// `prefix` if given, at most `limit` if given.
fn load_history(
    conn: &Connection,
    dictionaries: &LogDictionaries,
    (after, until): (Revision, Revision),
    prefix: Option<&str>,
    limit: Option<usize>,
) -> Result<Vec<Event>> {
    let prefix = prefix.unwrap_or("");
    let end = prefix_end(prefix);
    let limit = limit.map_or(-1, |l| l as i64);
    let mut stmt = conn.prepare_cached(HISTORY_SELECT)?;
    let rows = stmt.query_map(params![after, until, prefix, end, limit], |r| {
        let prev = match r.get::<_, Option<Revision>>(7)? {
            Some(mod_revision) => Some((mod_revision, r.get(8)?, StoredValue::read(r, 9)?)),
            None => None,
        };
        Ok((
            Arc::<str>::from(r.get::<_, String>(1)?),
            r.get::<_, bool>(2)?,
            (r.get(0)?, r.get(3)?, StoredValue::read(r, 4)?),
            prev,
        ))
    })?;
    let mut events = Vec::new();
    for row in rows {
        let (key, deleted, (mod_revision, create_revision, value), prev) = row?;
        let prev = match prev {
            Some((mod_revision, create_revision, value)) => Some(KeyValue {
                key: key.clone(),
                mod_revision,
                create_revision,
                value: dictionaries.value(value)?,
            }),
            None => None,
        };
        events.push(Event {
            kind: if deleted {
                EventKind::Delete
            } else {
                EventKind::Put
            },
            kv: KeyValue {
                key,
                mod_revision,
                create_revision,
                value: dictionaries.value(value)?,
            },
            prev,
        });
    }
    Ok(events)
}

/// The newest row of `key` at or below revision `at` (a tombstone
/// included), read in `conn`'s current transaction.
fn newest_row(
    conn: &Connection,
    dictionaries: &LogDictionaries,
    key: &str,
    at: Revision,
) -> Result<Option<(bool, KeyValue)>> {
    let mut stmt = conn.prepare_cached(
        "SELECT revision, create_revision, deleted, value, packing, dictionary FROM log
         WHERE key = ?1 AND revision <= ?2 ORDER BY revision DESC LIMIT 1",
    )?;
    let row = stmt
        .query_row(params![key, at], |r| {
            Ok((
                r.get::<_, bool>(2)?,
                r.get::<_, Revision>(0)?,
                r.get::<_, Revision>(1)?,
                StoredValue::read(r, 3)?,
            ))
        })
        .optional()?;
    match row {
        Some((deleted, mod_revision, create_revision, value)) => Ok(Some((
            deleted,
            KeyValue {
                key: Arc::from(key),
                mod_revision,
                create_revision,
                value: dictionaries.value(value)?,
            },
        ))),
        None => Ok(None),
    }
}

/// The store's revision and compaction point as `conn`'s snapshot sees
/// them. A compacted tombstone may have been the newest row, so the
/// revision is at least the compaction point.
fn snapshot_revisions(conn: &Connection) -> Result<(Revision, Revision)> {
    let compacted: Revision = conn
        .prepare_cached("SELECT value FROM meta WHERE name = 'compacted'")?
        .query_row([], |r| r.get(0))
        .optional()?
        .unwrap_or(0);
    let newest: Revision = conn
        .prepare_cached("SELECT COALESCE(MAX(revision), 0) FROM log")?
        .query_row([], |r| r.get(0))?;
    Ok((newest.max(compacted), compacted))
}

/// The newest row of each key under the range, as of a revision, live
/// rows only, in key order.
/// The newest version of each key in [?1, ?3), after ?2, at ?4. The
/// upper bound is a plain `key < ?3`, never `(?3 IS NULL OR ...)`: with
/// plans fixed at prepare time (`stable_plans`), SQLite cannot use an
/// optional bound on the index, and every list scanned from its prefix to
/// the end of the log (each create's quota check listed half the store).
const LIST_SELECT: &str =
    "SELECT key, create_revision, revision, value, packing, dictionary FROM log l
     WHERE key >= ?1 AND key > ?2 AND key < ?3
       AND revision = (SELECT MAX(n.revision) FROM log n
                       WHERE n.key = l.key AND n.revision <= ?4)
       AND deleted = 0
     ORDER BY key LIMIT ?5";

/// [`LIST_SELECT`] for a prefix with no upper bound (the whole store).
const LIST_ALL_SELECT: &str =
    "SELECT key, create_revision, revision, value, packing, dictionary FROM log l
     WHERE key >= ?1 AND key > ?2
       AND revision = (SELECT MAX(n.revision) FROM log n
                       WHERE n.key = l.key AND n.revision <= ?3)
       AND deleted = 0
     ORDER BY key LIMIT ?4";

/// A row of [`LIST_SELECT`]: the key, its create and mod revisions, its
/// value as kept.
type ListRow = (Arc<str>, Revision, Revision, StoredValue);

fn list_row(r: &Row<'_>) -> rusqlite::Result<ListRow> {
    Ok((
        Arc::from(r.get::<_, String>(0)?),
        r.get(1)?,
        r.get(2)?,
        StoredValue::read(r, 3)?,
    ))
}

impl LogReader {
    fn open_connection(&self) -> Result<Connection> {
        let conn = Connection::open_with_flags(
            &self.path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.busy_timeout(Duration::from_secs(5))?;
        conn.pragma_update(None, "cache_size", -READER_CACHE_KIB)?;
        stable_plans(&conn)?;
        Ok(conn)
    }

    /// Runs `read` in one snapshot of the log on a pooled connection.
    fn read<T>(&self, read: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        self.read_on_connection(|conn| {
            let tx = conn.transaction()?;
            let value = read(&tx)?;
            tx.finish()?;
            Ok(value)
        })
    }

    /// Runs `read` on a pooled read-only connection without a transaction
    /// of its own: for one statement, which SQLite runs on one snapshot.
    fn read_on_connection<T>(&self, read: impl FnOnce(&mut Connection) -> Result<T>) -> Result<T> {
        let pooled = self.idle.lock().pop();
        let mut conn = match pooled {
            Some(conn) => conn,
            None => self.open_connection()?,
        };
        let result = read(&mut conn);
        let mut idle = self.idle.lock();
        if idle.len() < IDLE_READERS {
            idle.push(conn);
        }
        result
    }

    /// `key` as of revision `at`.
    fn get(&self, key: &str, at: Revision) -> Result<Option<KeyValue>> {
        self.read_on_connection(|conn| {
            Ok(newest_row(conn, &self.dictionaries, key, at)?
                .and_then(|(deleted, kv)| (!deleted).then_some(kv)))
        })
    }

    /// A list no newer than revision `at`.
    fn list(&self, prefix: &str, options: &ListOptions, at: Revision) -> Result<ListResult> {
        self.read(|conn| {
            let (newest, compacted) = snapshot_revisions(conn)?;
            let newest = newest.min(at);
            let revision = match options.revision {
                Some(rev) if rev < compacted => {
                    return Err(StoreError::Compacted {
                        requested: rev,
                        oldest: compacted,
                    });
                }
                Some(rev) => rev.min(newest),
                None => newest,
            };
            let limit = options.limit.filter(|l| *l > 0);
            let after = options.start_after.as_deref().unwrap_or("");
            // One more than asked, to tell whether more remain.
            let take = limit.map_or(-1, |l| l as i64 + 1);
            let mut rows = Vec::new();
            match prefix_end(prefix) {
                Some(end) => {
                    let mut stmt = conn.prepare_cached(LIST_SELECT)?;
                    for row in
                        stmt.query_map(params![prefix, after, end, revision, take], list_row)?
                    {
                        rows.push(row?);
                    }
                }
                None => {
                    let mut stmt = conn.prepare_cached(LIST_ALL_SELECT)?;
                    for row in stmt.query_map(params![prefix, after, revision, take], list_row)? {
                        rows.push(row?);
                    }
                }
            }
            let mut items = Vec::with_capacity(rows.len());
            for (key, create_revision, mod_revision, value) in rows {
                items.push(KeyValue {
                    key,
                    value: self.dictionaries.value(value)?,
                    create_revision,
                    mod_revision,
                });
            }
            let more = limit.is_some_and(|l| items.len() > l);
            if let Some(l) = limit {
                items.truncate(l);
            }
            Ok(ListResult {
                items,
                revision,
                more,
            })
        })
    }
}

impl Backfill for LogReader {
    fn events_after(
        &self,
        prefix: &str,
        after: Revision,
        until: Revision,
    ) -> Result<(Vec<Event>, Revision)> {
        self.read(|conn| {
            let (newest, compacted) = snapshot_revisions(conn)?;
            if after < compacted {
                return Err(StoreError::Compacted {
                    requested: after,
                    oldest: compacted,
                });
            }
            let until = until.min(newest);
            let events = load_history(
                conn,
                &self.dictionaries,
                (after, until),
                Some(prefix),
                Some(BACKFILL_BATCH),
            )?;
            let seen = match events.last() {
                Some(last) if events.len() == BACKFILL_BATCH => last.revision(),
                _ => until,
            };
            Ok((events, seen))
        })
    }

    fn compacted(&self) -> Revision {
        self.compacted.load(Ordering::Acquire)
    }
}

/// How long the checkpoint thread lets commits gather before it looks at
/// how much the WAL holds.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(200);
/// Writes since the last checkpoint that make the next one due at once.
/// A store written to in a burst (the hub: thousands a second) reaches it
/// within a look; one written to a few times a second (each of a hundred
/// simulated members) waits for [`CHECKPOINT_AT_MOST_AFTER`].
const CHECKPOINT_WRITES: u64 = 512;
/// The longest a committed write waits for its checkpoint.
const CHECKPOINT_AT_MOST_AFTER: Duration = Duration::from_secs(5);
/// The WAL size (pages) at which the writer checkpoints itself, as a
/// backstop: 64 MiB, against SQLite's default of 1,000 pages (4 MiB).
const WRITER_CHECKPOINT_PAGES: i64 = 16_384;
/// Bytes of WAL file kept once the WAL restarts.
const WAL_SIZE_LIMIT: i64 = 16 * 1024 * 1024;

/// Copies committed pages from the WAL into the database file, beside the
/// writer. With SQLite's automatic checkpoints the writer did it itself
/// every 4 MiB of WAL, and every write waited the tens of milliseconds that
/// took (the copy and an fsync of the database file): the longest
/// latencies of an idle control plane. A passive checkpoint waits for no
/// reader and no writer.
///
/// Each checkpoint syncs the WAL and the database file, whatever it
/// copies: a store with a few writes a second checkpoints once
/// [`CHECKPOINT_WRITES`] have gathered or [`CHECKPOINT_AT_MOST_AFTER`] has
/// passed, not after each of them (a hundred such stores in one process
/// spent more fsyncs on checkpoints than on commits). It ends with the
/// writer (its sender of commit nudges gone).
fn checkpoint_loop(conn: Connection, commits: mpsc::Receiver<()>, written: Arc<AtomicU64>) {
    let mut writer_gone = false;
    // Sleep until something was committed.
    while !writer_gone && commits.recv().is_ok() {
        let since = Instant::now();
        loop {
            // Let more gather; the writer's nudges say nothing new meanwhile.
            std::thread::sleep(CHECKPOINT_EVERY);
            // A closing store: copy what is left, then stop.
            writer_gone = drain_nudges(&commits);
            if writer_gone
                || written.load(Ordering::Relaxed) >= CHECKPOINT_WRITES
                || since.elapsed() >= CHECKPOINT_AT_MOST_AFTER
            {
                break;
            }
        }
        // Writes committed from here on count toward the next checkpoint.
        written.store(0, Ordering::Relaxed);
        if let Err(error) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
            warn!(%error, "checkpoint of the store's WAL failed; retrying after the next commit");
        }
    }
    debug!("store checkpoints stopped");
}

/// Takes the nudges waiting in `commits`; whether the writer is gone.
fn drain_nudges(commits: &mpsc::Receiver<()>) -> bool {
    loop {
        match commits.try_recv() {
            Ok(()) => {}
            Err(mpsc::TryRecvError::Empty) => return false,
            Err(mpsc::TryRecvError::Disconnected) => return true,
        }
    }
}

/// What the writer thread works with besides its connection.

#[async_trait]
impl Store for SqliteStore {
    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue> {
        self.write(Op::Create {
            key: key.to_string(),
            packed: self.window.pack(key, &value),
            value,
        })
        .await
    }

    async fn update(&self, key: &str, value: Bytes, expected: Revision) -> Result<KeyValue> {
        self.write(Op::Update {
            key: key.to_string(),
            packed: self.window.pack(key, &value),
            value,
            expected,
            base: None,
        })
        .await
    }

    async fn update_from(&self, current: &KeyValue, value: Bytes) -> Result<KeyValue> {
        let key = &current.key;
        // A key the window holds nothing of (its last change has left the
        // window: a Work's status written long after its create, in a
        // burst) has its value packed here, on the caller's thread. One it
        // holds at `current`'s revision needs no packing, and one it holds
        // at another is a conflict.
        let unheld = self.window.held_revision(key).is_none();
        self.write(Op::Update {
            key: key.to_string(),
            packed: self.window.pack(key, &value),
            value,
            expected: current.mod_revision,
            base: Some(Base {
                kv: current.clone(),
                packed: unheld.then(|| self.window.pack(key, &current.value)),
            }),
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

    // Reads show what the window has applied, no newer: a commit is in
    // the log a moment before its events reach the window and watchers,
    // and a read must not see a write that a later read (or watch) misses.
    fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        let at = self.window.revision();
        match self.window.recent(key) {
            Some(kv) => Ok(Some(kv)),
            None => self.log.get(key, at),
        }
    }

    fn list(&self, prefix: &str, options: &ListOptions) -> Result<ListResult> {
        self.log.list(prefix, options, self.window.revision())
    }

    fn watch(&self, prefix: &str, after: Revision) -> Result<Watch> {
        self.window.watch(prefix, after)
    }

    fn current_revision(&self) -> Revision {
        self.window.revision()
    }

    fn writer_stats(&self) -> Option<WriterStats> {
        Some(self.stats.snapshot())
    }

    fn compacted_revision(&self) -> Revision {
        self.log.compacted()
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        let (tx, rx) = oneshot::channel();
        if !self.writer.send(Request::Compact(revision, tx)) {
            return Err(StoreError::Closed);
        }
        rx.await.map_err(|_| StoreError::Closed)?
    }
}

/// A window of `history` up to `revision`, with no log behind it, for the
/// writer's and the publisher's own tests.
#[cfg(test)]
fn test_window(history: Vec<Event>, revision: Revision) -> Arc<EventWindow> {
    let log = Arc::new(crate::cache::NoBackfill);
    Arc::new(EventWindow::new(
        history,
        (revision, 0),
        100,
        log,
        Dictionaries::default(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_writer_counts_the_writes_that_took_a_revision_and_not_those_refused() {
        let dir = tempfile::tempdir().expect("a temporary dir");
        let store = SqliteStore::open(dir.path(), SqliteOptions::default()).expect("opened");
        let value = Bytes::from_static(b"{\"a\":1}");
        let kv = store.create("/k/1", value.clone()).await.expect("created");
        store
            .update("/k/1", value.clone(), kv.mod_revision)
            .await
            .expect("updated");
        // Refused: the key exists; the revision is not the key's.
        assert!(store.create("/k/1", value.clone()).await.is_err());
        assert!(store.update("/k/1", value, kv.mod_revision).await.is_err());
        let stats = store
            .writer_stats()
            .expect("the embedded store has a writer");
        assert_eq!((stats.commits, stats.writes), (2, 2), "{stats:?}");
        assert!(stats.busy_seconds > 0.0, "{stats:?}");
        // Written one after another: each group synced by the writer itself.
        assert_eq!(stats.syncs, 2, "{stats:?}");
        assert!(stats.sync_seconds <= stats.busy_seconds, "{stats:?}");
        // A compaction holds the writer up too.
        let before = stats.busy_seconds;
        store.compact(kv.mod_revision).await.expect("compacted");
        let stats = store.writer_stats().expect("a writer");
        assert!(stats.busy_seconds > before, "{stats:?}");
        assert_eq!(stats.commits, 2, "a compaction is not a commit of writes");
    }
}
