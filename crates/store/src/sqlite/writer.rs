//! The writer thread, the one owner of the connection that writes. It
//! checks each queued write against its key's current value, inserts the
//! group's rows and commits them in one transaction, then hands the group
//! on to be synced and published ([`super::publish`]): under load the next
//! group is checked and written while the last one's fsync runs.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior, params};
use tokio::sync::oneshot;
use tracing::{debug, warn};

use super::publish::{Group, Publisher};
use super::stored::{LogDictionaries, columns, insert_dictionary};
use super::{Base, LogReader, Op, Request, newest_row};
use crate::cache::{EventWindow, Prepacked};
use crate::packed::Packed;
use crate::{Event, EventKind, KeyValue, Result, Revision, StoreError, WriterStats};

/// `d` in whole nanoseconds, as the writer's counters add them.
fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The writer's and the publisher's running totals ([`WriterStats`]),
/// nanoseconds as integers.
#[derive(Default)]
pub(super) struct WriterCounters {
    commits: AtomicU64,
    writes: AtomicU64,
    busy_nanos: AtomicU64,
    syncs: AtomicU64,
    sync_nanos: AtomicU64,
    publisher_busy_nanos: AtomicU64,
}

impl WriterCounters {
    /// A committed group's writes that took a revision; a group whose
    /// every write was refused commits nothing.
    fn record_commit(&self, writes: usize) {
        if writes > 0 {
            self.commits.fetch_add(1, Ordering::Relaxed);
            self.writes.fetch_add(writes as u64, Ordering::Relaxed);
        }
    }

    /// Time the writer thread spent on a group or a compaction: writes
    /// arriving meanwhile wait.
    fn add_busy(&self, busy: Duration) {
        self.busy_nanos.fetch_add(nanos(busy), Ordering::Relaxed);
    }

    /// One sync of the write-ahead log, on whichever thread ran it.
    pub(super) fn add_sync(&self, sync: Duration) {
        self.syncs.fetch_add(1, Ordering::Relaxed);
        self.sync_nanos.fetch_add(nanos(sync), Ordering::Relaxed);
    }

    /// Time the publishing thread spent on groups handed to it.
    pub(super) fn add_publisher_busy(&self, busy: Duration) {
        self.publisher_busy_nanos
            .fetch_add(nanos(busy), Ordering::Relaxed);
    }

    pub(super) fn snapshot(&self) -> WriterStats {
        let seconds = |n: &AtomicU64| n.load(Ordering::Relaxed) as f64 / 1e9;
        WriterStats {
            commits: self.commits.load(Ordering::Relaxed),
            writes: self.writes.load(Ordering::Relaxed),
            busy_seconds: seconds(&self.busy_nanos),
            syncs: self.syncs.load(Ordering::Relaxed),
            sync_seconds: seconds(&self.sync_nanos),
            publisher_busy_seconds: seconds(&self.publisher_busy_nanos),
        }
    }
}

/// How long the writer looks for the next write before it sleeps.
const WRITER_SPIN: Duration = Duration::from_micros(300);

/// The writer's queue, counting the requests that wait in it.
#[derive(Clone)]
pub(super) struct Queue {
    requests: mpsc::Sender<Request>,
    waiting: Arc<AtomicUsize>,
}

impl Queue {
    /// Queues `request`; `false` once the writer is gone.
    pub(super) fn send(&self, request: Request) -> bool {
        self.waiting.fetch_add(1, Ordering::Relaxed);
        if self.requests.send(request).is_err() {
            self.waiting.fetch_sub(1, Ordering::Relaxed);
            return false;
        }
        true
    }
}

/// What the writer thread needs besides its connection.
pub(super) struct WriterParts {
    pub window: Arc<EventWindow>,
    pub log: Arc<LogReader>,
    pub stats: Arc<WriterCounters>,
    /// Where commits are counted and the checkpoint thread nudged.
    pub written: Arc<AtomicU64>,
    pub nudges: mpsc::SyncSender<()>,
    /// The write-ahead log the publisher syncs.
    pub wal: std::path::PathBuf,
    pub max_batch: usize,
    /// Writes waiting from which a committed group is handed to the
    /// publisher ([`super::SqliteOptions::pipeline_from`]). With fewer the
    /// hand-over (a sleeping thread woken) would cost the group's writers
    /// more than the wait it saves the next group.
    pub pipeline_from: usize,
    /// Writes of a committed group from which it is handed over whatever
    /// waits ([`super::SqliteOptions::pipeline_groups_from`]).
    pub pipeline_groups_from: usize,
}

/// Starts the writer thread on `conn`, which commits without syncing
/// (`synchronous=NORMAL`), and the publisher, which syncs the log before
/// any write of a group is answered.
pub(super) fn spawn(conn: Connection, parts: WriterParts) -> std::io::Result<Queue> {
    let (requests, incoming) = mpsc::channel();
    let waiting = Arc::new(AtomicUsize::new(0));
    let publisher = Publisher::start(
        parts.window.clone(),
        parts.wal,
        parts.stats.clone(),
        requests.clone(),
    )?;
    let writer = Writer {
        dictionaries_written: parts.log.dictionaries.ids(),
        revision: parts.window.revision(),
        window: parts.window,
        log: parts.log,
        committed: Committed {
            written: parts.written,
            nudges: parts.nudges,
        },
        stats: parts.stats,
        publisher,
        unpublished: Unpublished::default(),
        waiting: waiting.clone(),
        pipeline_from: parts.pipeline_from,
        pipeline_groups_from: parts.pipeline_groups_from,
        max_batch: parts.max_batch.max(1),
    };
    std::thread::Builder::new()
        .name("store-writer".into())
        .spawn(move || writer_loop(conn, writer, &incoming))?;
    Ok(Queue { requests, waiting })
}

struct Writer {
    window: Arc<EventWindow>,
    log: Arc<LogReader>,
    committed: Committed,
    stats: Arc<WriterCounters>,
    publisher: Publisher,
    /// What groups handed to the publisher wrote, until the window has it.
    unpublished: Unpublished,
    /// The dictionaries committed to the log.
    dictionaries_written: HashSet<i64>,
    /// The revision of the newest committed write.
    revision: Revision,
    /// Requests queued and not yet taken.
    waiting: Arc<AtomicUsize>,
    pipeline_from: usize,
    pipeline_groups_from: usize,
    max_batch: usize,
}

/// What ended a group's gathering besides the writes themselves.
enum Then {
    Continue,
    Compact(Revision, oneshot::Sender<Result<()>>),
    Close,
}

impl Writer {
    /// `request`, counted as taken where it came from the store's queue.
    fn take(&self, request: Option<Request>) -> Option<Request> {
        if matches!(request, Some(Request::Write(..) | Request::Compact(..))) {
            self.waiting.fetch_sub(1, Ordering::Relaxed);
        }
        request
    }

    /// Writes a group from `first` and the writes queued behind it, and
    /// commits it. While the publisher still syncs the group before, the
    /// group stays open and takes the writes that arrive meanwhile: its
    /// checks and rows are written while the sync runs, and it commits
    /// once the publisher is free (or the group is full), so that each
    /// sync covers about one commit, as many writes as a sync's time
    /// brings.
    fn write_group(
        &mut self,
        conn: &mut Connection,
        (op, reply): (Op, Reply),
        requests: &mpsc::Receiver<Request>,
    ) -> Then {
        if let Some(cause) = self.publisher.failed() {
            let _ = reply.send(Err(refused(&cause)));
            return Then::Continue;
        }
        let started = Instant::now();
        let mut waited = Duration::ZERO;
        self.unpublished.forget_through(self.window.revision());
        let mut group = match OpenGroup::begin(conn, self.revision) {
            Ok(group) => group,
            Err(error) => {
                warn!(%error, "store transaction failed to begin; rejecting the write");
                let _ = reply.send(Err(error));
                return Then::Continue;
            }
        };
        let mut then = Then::Continue;
        let mut next = Some(Request::Write(op, reply));
        'gather: loop {
            while let Some(request) = next.take() {
                match request {
                    Request::Write(op, reply) => {
                        let outside = Outside {
                            unpublished: &self.unpublished,
                            window: &self.window,
                            dictionaries: &self.log.dictionaries,
                            dictionaries_written: &self.dictionaries_written,
                        };
                        if let Err((error, reply)) = group.add(op, reply, outside) {
                            group.abort(&error, reply);
                            self.stats
                                .add_busy(started.elapsed().saturating_sub(waited));
                            return then;
                        }
                    }
                    Request::Compact(revision, reply) => {
                        then = Then::Compact(revision, reply);
                        break 'gather;
                    }
                    Request::Close => {
                        then = Then::Close;
                        break 'gather;
                    }
                    Request::Published => {}
                }
                if group.len() >= self.max_batch {
                    break 'gather;
                }
                next = self.take(requests.try_recv().ok());
            }
            if self.publisher.idle() {
                break;
            }
            // The publisher is syncing the group before: wait for more
            // writes, or for it to be done (it says so in this queue).
            let waiting = Instant::now();
            next = self.take(requests.recv().ok());
            waited += waiting.elapsed();
            if next.is_none() {
                break;
            }
        }
        self.committed.count(group.len());
        if let Some(committed) = group.commit() {
            self.dictionaries_written
                .extend(committed.dictionaries.iter().copied());
            self.stats.record_commit(committed.group.events.len());
            self.revision = committed.revision;
            // A group that took every write waiting may still be a burst's:
            // handed over too where there are cores to spare
            // (`pipeline_groups_from`).
            let waiting = self.waiting.load(Ordering::Relaxed) >= self.pipeline_from;
            let large = committed.group.replies.len() >= self.pipeline_groups_from;
            if self.publisher.idle() && !waiting && !large {
                self.publisher.publish_here(committed.group);
            } else {
                self.unpublished
                    .remember(committed.revision, committed.written);
                self.publisher.hand_off(committed.group);
            }
        }
        self.stats
            .add_busy(started.elapsed().saturating_sub(waited));
        then
    }

    fn compact(&self, conn: &mut Connection, revision: Revision) -> Result<()> {
        if let Some(cause) = self.publisher.failed() {
            return Err(refused(&cause));
        }
        let started = Instant::now();
        let result = compact(conn, &self.window, &self.log, revision);
        self.stats.add_busy(started.elapsed());
        result
    }
}

/// The error of a write refused for `cause`, a failure of the store's
/// rather than of the write (a failed commit or sync), as each write of a
/// refused group gets it.
pub(super) fn refused(cause: &str) -> StoreError {
    StoreError::Io(std::io::Error::other(cause.to_string()))
}

fn writer_loop(mut conn: Connection, mut writer: Writer, requests: &mpsc::Receiver<Request>) {
    let mut look = NextWriteLook::default();
    while let Some(request) = writer.take(look.next_request(requests)) {
        let then = match request {
            Request::Write(op, reply) => writer.write_group(&mut conn, (op, reply), requests),
            Request::Compact(revision, reply) => Then::Compact(revision, reply),
            Request::Published => continue,
            Request::Close => Then::Close,
        };
        writer.committed.nudge();
        match then {
            Then::Continue => {}
            Then::Compact(revision, reply) => {
                let _ = reply.send(writer.compact(&mut conn, revision));
            }
            Then::Close => break,
        }
    }
    debug!("store writer stopped");
}

/// A key's newest committed value as the writer knows it: its revision
/// and the value (`None`: deleted).
type Written = (Revision, Option<KeyValue>);

/// What committed groups wrote that the window has not applied yet (they
/// are with the publisher): later writes are checked against these, not
/// against the window's older values.
#[derive(Default)]
struct Unpublished {
    newest: HashMap<Arc<str>, Written>,
    /// Each group's last revision and the keys it wrote, oldest first.
    groups: VecDeque<(Revision, Vec<Arc<str>>)>,
}

impl Unpublished {
    fn get(&self, key: &str) -> Option<&Written> {
        self.newest.get(key)
    }

    fn remember(&mut self, last: Revision, written: HashMap<Arc<str>, Written>) {
        let keys = written.keys().cloned().collect();
        self.newest.extend(written);
        self.groups.push_back((last, keys));
    }

    /// Forgets the groups the window has applied, up to `published`; a key
    /// a later group wrote again stays.
    fn forget_through(&mut self, published: Revision) {
        while let Some((last, _)) = self.groups.front() {
            if *last > published {
                break;
            }
            let Some((last, keys)) = self.groups.pop_front() else {
                break;
            };
            for key in keys {
                if self.newest.get(&key).is_some_and(|(rev, _)| *rev <= last) {
                    self.newest.remove(&key);
                }
            }
        }
    }
}

/// What the writer tells the checkpoint thread.
struct Committed {
    /// Writes since the last checkpoint.
    written: Arc<AtomicU64>,
    nudges: mpsc::SyncSender<()>,
}

impl Committed {
    fn count(&self, writes: usize) {
        self.written.fetch_add(writes as u64, Ordering::Relaxed);
    }

    fn nudge(&self) {
        // A nudge already waiting is enough.
        let _ = self.nudges.try_send(());
    }
}

/// Whether the writer looks for the next write for [`WRITER_SPIN`] before
/// it sleeps: on a machine whose idle cores halt, waking a sleeping writer
/// costs more than its commit, and a pipeline's writes follow each other a
/// fraction of a millisecond apart. A store whose writes come tens of
/// milliseconds apart (a member written to by the hub alone) would only
/// burn the look: it looks while one of its last eight writes came within
/// the look's time of the one before, found by looking or by the time a
/// sleep lasted.
#[derive(Debug)]
struct NextWriteLook {
    /// One bit per recent write, newest lowest: it came within WRITER_SPIN.
    soon: u8,
}

impl Default for NextWriteLook {
    fn default() -> Self {
        // Look at first: a fresh store is being written to.
        NextWriteLook { soon: 1 }
    }
}

impl NextWriteLook {
    /// The next request, or `None` once the store is gone.
    fn next_request(&mut self, requests: &mpsc::Receiver<Request>) -> Option<Request> {
        let started = Instant::now();
        if self.looks() {
            let until = started + WRITER_SPIN;
            while Instant::now() < until {
                match requests.try_recv() {
                    Ok(request) => {
                        self.record(true);
                        return Some(request);
                    }
                    Err(mpsc::TryRecvError::Empty) => std::thread::yield_now(),
                    Err(mpsc::TryRecvError::Disconnected) => return None,
                }
            }
        }
        let request = requests.recv().ok()?;
        self.record(started.elapsed() < WRITER_SPIN);
        Some(request)
    }

    fn record(&mut self, soon: bool) {
        self.soon = (self.soon << 1) | u8::from(soon);
    }

    fn looks(&self) -> bool {
        self.soon != 0
    }
}

pub(super) type Reply = oneshot::Sender<Result<KeyValue>>;

/// A group committed to the log and not yet synced.
struct CommittedGroup {
    group: Group,
    /// The newest revision it wrote.
    revision: Revision,
    /// Each key it wrote, as it left it.
    written: HashMap<Arc<str>, Written>,
    /// The dictionaries it wrote.
    dictionaries: Vec<i64>,
}

/// A group being written: its transaction open, each write checked
/// against its key's current value and its row inserted as it comes.
struct OpenGroup<'c> {
    tx: Transaction<'c>,
    /// Keys written earlier in this group, visible to later writes in it.
    overlay: HashMap<Arc<str>, Written>,
    events: Vec<(Event, Prepacked)>,
    outcomes: Vec<(Reply, Result<KeyValue>)>,
    revision: Revision,
    /// Dictionaries written in this transaction.
    dictionaries: Vec<i64>,
}

impl<'c> OpenGroup<'c> {
    /// A group whose first write takes the revision after `revision`.
    fn begin(conn: &'c mut Connection, revision: Revision) -> Result<OpenGroup<'c>> {
        // IMMEDIATE: take the write lock before the first read. A deferred
        // transaction that reads first and then writes gets SQLITE_BUSY at
        // once, without waiting, when a reader holds the WAL lock briefly.
        Ok(OpenGroup {
            tx: conn.transaction_with_behavior(TransactionBehavior::Immediate)?,
            overlay: HashMap::new(),
            events: Vec::new(),
            outcomes: Vec::new(),
            revision,
            dictionaries: Vec::new(),
        })
    }

    /// Writes taken, refused ones included.
    fn len(&self) -> usize {
        self.outcomes.len()
    }

    /// Checks `op` and writes its row if it passes; its answer waits for
    /// the group's. An error is the transaction's: the group cannot be
    /// committed, and `reply` comes back to be answered with the rest
    /// ([`OpenGroup::abort`]).
    fn add(
        &mut self,
        mut op: Op,
        reply: Reply,
        outside: Outside<'_>,
    ) -> std::result::Result<(), (StoreError, Reply)> {
        let key = match &op {
            Op::Create { key, .. } | Op::Update { key, .. } | Op::Delete { key, .. } => key.clone(),
        };
        let base = match &mut op {
            Op::Update { base, .. } => base.take(),
            Op::Create { .. } | Op::Delete { .. } => None,
        };
        let known = Known {
            group: &self.overlay,
            unpublished: outside.unpublished,
            window: outside.window,
            dictionaries: outside.dictionaries,
        };
        let (current, prev) = match current_value(&self.tx, known, &key, base) {
            Ok(found) => found,
            // A value of the key's that does not unpack (a damaged row) is
            // this write's refusal, not the group's: the transaction is
            // sound.
            Err(error @ StoreError::Incompatible(_)) => {
                self.outcomes.push((reply, Err(error)));
                return Ok(());
            }
            Err(error) => return Err((error, reply)),
        };
        let value = match &op {
            Op::Create { packed, .. } | Op::Update { packed, .. } => Some(packed.clone()),
            Op::Delete { .. } => None,
        };
        let event = match plan(op, &key, current, self.revision + 1) {
            Ok(event) => event,
            Err(refusal) => {
                self.outcomes.push((reply, Err(refusal)));
                return Ok(());
            }
        };
        // A put keeps its value as the caller packed it; a tombstone (its
        // key's last value, read back unpacked) is kept as it is.
        let kept = value.as_ref();
        if let Err(error) = self.write_dictionary(kept, outside) {
            return Err((error, reply));
        }
        let (bytes, packing, dictionary) = columns(kept, &event.kv.value);
        let inserted = self
            .tx
            .prepare_cached(
                "INSERT INTO log (revision, key, deleted, create_revision, prev_revision,
                                  value, packing, dictionary)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )
            .and_then(|mut insert| {
                insert.execute(params![
                    event.kv.mod_revision,
                    key,
                    event.kind == EventKind::Delete,
                    event.kv.create_revision,
                    event.prev.as_ref().map(|p| p.mod_revision),
                    bytes,
                    packing,
                    dictionary,
                ])
            });
        if let Err(error) = inserted {
            return Err((error.into(), reply));
        }
        self.outcomes.push((reply, Ok(event.kv.clone())));
        self.revision = event.kv.mod_revision;
        self.overlay.insert(
            event.kv.key.clone(),
            (
                self.revision,
                (event.kind == EventKind::Put).then(|| event.kv.clone()),
            ),
        );
        self.events.push((event, Prepacked { value, prev }));
        Ok(())
    }

    /// Writes the dictionary `packed` was packed against, in this
    /// transaction, unless the log has it.
    fn write_dictionary(&mut self, packed: Option<&Packed>, outside: Outside<'_>) -> Result<()> {
        let Some(Packed::Dict(dictionary, _)) = packed else {
            return Ok(());
        };
        let id = dictionary.id();
        if outside.dictionaries_written.contains(&id) || self.dictionaries.contains(&id) {
            return Ok(());
        }
        insert_dictionary(&self.tx, dictionary)?;
        // Readers learn it before the row that needs it is committed.
        outside.dictionaries.remember(dictionary);
        self.dictionaries.push(id);
        Ok(())
    }

    /// Commits the group to the log without syncing it. `None` if the
    /// commit failed: every write of the group has been answered with the
    /// error.
    fn commit(self) -> Option<CommittedGroup> {
        let OpenGroup {
            tx,
            overlay,
            events,
            outcomes,
            revision,
            dictionaries,
        } = self;
        // Tests of recovery stop here: nothing of the group written.
        flotilla_failpoint::hit("store-before-commit");
        match tx.commit() {
            Ok(()) => Some(CommittedGroup {
                group: Group {
                    events,
                    replies: outcomes,
                },
                revision,
                written: overlay,
                dictionaries,
            }),
            Err(error) => {
                reject(outcomes, &StoreError::from(error));
                None
            }
        }
    }

    /// Rolls the group back and answers each of its writes, and `last`,
    /// with `error`.
    fn abort(self, error: &StoreError, last: Reply) {
        let OpenGroup {
            tx, mut outcomes, ..
        } = self;
        drop(tx);
        outcomes.push((last, Err(StoreError::Closed)));
        reject(outcomes, error);
    }
}

/// Answers every write of a group that could not be committed; nothing of
/// it was written.
fn reject(outcomes: Vec<(Reply, Result<KeyValue>)>, error: &StoreError) {
    warn!(%error, "store commit failed; rejecting the whole group");
    let message = error.to_string();
    for (reply, _) in outcomes {
        let _ = reply.send(Err(refused(&message)));
    }
}

/// What the writer knows of keys besides the log, newest first.
#[derive(Clone, Copy)]
struct Known<'a> {
    /// Earlier writes of the group being checked.
    group: &'a HashMap<Arc<str>, Written>,
    /// Groups committed and with the publisher.
    unpublished: &'a Unpublished,
    /// Every group published.
    window: &'a EventWindow,
    /// What the log's values are packed against.
    dictionaries: &'a LogDictionaries,
}

/// What a group being written sees of the writer beyond itself.
#[derive(Clone, Copy)]
struct Outside<'a> {
    unpublished: &'a Unpublished,
    window: &'a EventWindow,
    dictionaries: &'a LogDictionaries,
    /// The dictionaries committed to the log.
    dictionaries_written: &'a HashSet<i64>,
}

/// The current value of `key` in the writer's transaction (`None`: absent
/// or deleted), and its packed form where the caller packed it. What the
/// writer knows ([`Known`]) first, then the log. A `base` that is still
/// the newest is taken as it is: the window's copy need not be unpacked,
/// nor the log's read.
fn current_value(
    tx: &Connection,
    known: Known<'_>,
    key: &str,
    base: Option<Base>,
) -> Result<(Option<KeyValue>, Option<Packed>)> {
    if let Some((_, v)) = known.group.get(key).or_else(|| known.unpublished.get(key)) {
        return Ok((v.clone(), None));
    }
    let window = known.window;
    match (window.held_revision(key), base) {
        (Some(held), Some(base)) if held == base.kv.mod_revision => Ok((Some(base.kv), None)),
        (Some(_), _) => Ok((window.recent(key), None)),
        (None, Some(base)) if newest_revision(tx, key)? == Some(base.kv.mod_revision) => {
            Ok((Some(base.kv), base.packed))
        }
        (None, _) => Ok((
            newest_row(tx, known.dictionaries, key, Revision::MAX)?
                .and_then(|(deleted, kv)| (!deleted).then_some(kv)),
            None,
        )),
    }
}

/// The revision of `key`'s newest row if it is not a tombstone, read in
/// `conn`'s current transaction without the row's value. (A deletion's
/// result carries its tombstone's revision: a base made from one must not
/// match.)
fn newest_revision(conn: &Connection, key: &str) -> Result<Option<Revision>> {
    let mut stmt = conn.prepare_cached(
        "SELECT revision, deleted FROM log WHERE key = ?1 ORDER BY revision DESC LIMIT 1",
    )?;
    let row = stmt
        .query_row(params![key], |r| {
            Ok((r.get::<_, Revision>(0)?, r.get::<_, bool>(1)?))
        })
        .optional()?;
    Ok(row.and_then(|(revision, deleted)| (!deleted).then_some(revision)))
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

fn compact(
    conn: &mut Connection,
    window: &EventWindow,
    log: &LogReader,
    revision: Revision,
) -> Result<()> {
    let revision = revision.min(window.revision());
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
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
    log.compacted.fetch_max(revision, Ordering::AcqRel);
    window.compact(revision);
    debug!(revision, removed, "compacted");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn kv(key: &str, value: &'static str, create: Revision, revision: Revision) -> KeyValue {
        KeyValue {
            key: Arc::from(key),
            value: Bytes::from_static(value.as_bytes()),
            create_revision: create,
            mod_revision: revision,
        }
    }

    fn insert(conn: &Connection, row: &KeyValue, prev: Option<Revision>) {
        conn.execute(
            "INSERT INTO log (revision, key, deleted, create_revision, prev_revision, value)
             VALUES (?1, ?2, 0, ?3, ?4, ?5)",
            params![
                row.mod_revision,
                &*row.key,
                row.create_revision,
                prev,
                &row.value[..]
            ],
        )
        .expect("a row");
    }

    fn update(key: &str, value: &'static str, base: &KeyValue) -> Op {
        let value = Bytes::from_static(value.as_bytes());
        Op::Update {
            key: key.to_string(),
            packed: crate::packed::Packed::pack(&value),
            value,
            expected: base.mod_revision,
            base: Some(Base {
                kv: base.clone(),
                packed: None,
            }),
        }
    }

    /// A key the window holds at revision 1 was written again at 2 by a
    /// group still with the publisher: an update from revision 1 is a
    /// conflict, one from 2 replaces 2's value, and a create finds the
    /// key there.
    #[test]
    fn writes_are_checked_against_groups_the_window_has_not_applied_yet() {
        let mut conn = Connection::open_in_memory().expect("a database");
        conn.execute_batch(super::super::SCHEMA)
            .expect("the schema");
        let first = kv("/k", "1", 1, 1);
        insert(&conn, &first, None);
        let window = super::super::test_window(
            vec![Event {
                kind: EventKind::Put,
                kv: first.clone(),
                prev: None,
            }],
            1,
        );
        let second = kv("/k", "2", 1, 2);
        insert(&conn, &second, Some(1));
        let mut unpublished = Unpublished::default();
        unpublished.remember(
            2,
            HashMap::from([(second.key.clone(), (2, Some(second.clone())))]),
        );

        let stale = update("/k", "3", &first);
        let fresh = update("/k", "3", &second);
        let (create_reply, _) = oneshot::channel();
        let value = Bytes::from_static(b"0");
        let create = Op::Create {
            key: "/k".into(),
            packed: crate::packed::Packed::pack(&value),
            value,
        };
        let (stale_reply, _) = oneshot::channel();
        let (fresh_reply, _) = oneshot::channel();
        let dictionaries = LogDictionaries::default();
        let written = HashSet::new();
        let outside = Outside {
            unpublished: &unpublished,
            window: &window,
            dictionaries: &dictionaries,
            dictionaries_written: &written,
        };
        let mut group = OpenGroup::begin(&mut conn, 2).expect("a transaction");
        for (op, reply) in [
            (stale, stale_reply),
            (create, create_reply),
            (fresh, fresh_reply),
        ] {
            assert!(group.add(op, reply, outside).is_ok());
        }
        let committed = group.commit().expect("committed");
        let outcomes: Vec<_> = committed.group.replies.iter().map(|(_, o)| o).collect();
        assert!(
            matches!(outcomes[0], Err(StoreError::Conflict { actual: 2, .. })),
            "{:?}",
            outcomes[0]
        );
        assert!(
            matches!(outcomes[1], Err(StoreError::AlreadyExists(_))),
            "{:?}",
            outcomes[1]
        );
        assert_eq!(outcomes[2].as_ref().expect("written").mod_revision, 3);
        assert_eq!(committed.revision, 3);
        let (event, _) = &committed.group.events[0];
        assert_eq!(
            event.prev.as_ref().map(|p| p.value.clone()),
            Some(second.value)
        );
    }

    #[test]
    fn published_groups_are_forgotten_but_a_key_written_again_later_is_kept() {
        let mut unpublished = Unpublished::default();
        let a1 = kv("/a", "1", 1, 1);
        let b2 = kv("/b", "1", 2, 2);
        let a3 = kv("/a", "2", 1, 3);
        unpublished.remember(
            2,
            HashMap::from([
                (a1.key.clone(), (1, Some(a1))),
                (b2.key.clone(), (2, Some(b2))),
            ]),
        );
        unpublished.remember(3, HashMap::from([(a3.key.clone(), (3, Some(a3)))]));
        unpublished.forget_through(2);
        assert!(unpublished.get("/b").is_none());
        assert_eq!(unpublished.get("/a").map(|(rev, _)| *rev), Some(3));
        unpublished.forget_through(3);
        assert!(unpublished.get("/a").is_none());
        assert!(unpublished.groups.is_empty());
    }

    #[test]
    fn the_writer_stops_looking_for_writes_that_come_far_apart_and_looks_again_when_they_close_up()
    {
        let mut look = NextWriteLook::default();
        assert!(look.looks(), "a fresh store is being written to");
        for n in 1..=7 {
            look.record(false);
            assert!(
                look.looks(),
                "one of the last eight came soon after {n} far apart"
            );
        }
        look.record(false);
        assert!(!look.looks(), "eight writes far apart");
        look.record(true);
        assert!(look.looks(), "a write soon after the one before");
    }

    #[test]
    fn the_next_request_is_one_already_queued_or_none_once_the_store_is_gone() {
        let (requests, queue) = mpsc::channel();
        let mut look = NextWriteLook { soon: 0 };
        let (reply, _answer) = oneshot::channel();
        requests
            .send(Request::Compact(1, reply))
            .expect("the queue is open");
        assert!(matches!(
            look.next_request(&queue),
            Some(Request::Compact(1, _))
        ));
        drop(requests);
        let mut looking = NextWriteLook::default();
        assert!(looking.next_request(&queue).is_none());
        assert!(look.next_request(&queue).is_none());
    }
}
