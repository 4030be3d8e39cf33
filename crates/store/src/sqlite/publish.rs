//! Committed groups on their way out: the write-ahead log synced, then
//! the group's events applied to the window (watches and reads see them)
//! and its writes answered, in commit order.
//!
//! The writer's connection commits without syncing
//! (`synchronous=NORMAL`); this is where the log is synced, as SQLite
//! would at each commit with `synchronous=FULL`: no write is answered,
//! and no read or watch sees it, before a sync that began after its
//! commit has returned. While the writer is idle it does this itself, at
//! once; under load it hands its groups to the publishing thread and goes
//! on to write the next, whose checks and rows it writes while the sync
//! runs and which it commits once the publishing thread is free again
//! (the thread says so in the writer's queue). One sync there covers
//! every group committed before it began.
//!
//! A sync that fails leaves the log in a state the process cannot vouch
//! for (Linux may drop the unsynced pages and forget the error: see
//! PostgreSQL's "fsyncgate"), so the store stops taking writes, as etcd
//! stops, and says so in every refusal until the process is restarted;
//! SQLite recovers the log from the file on the next open.

use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, mpsc};
use std::time::Instant;

use tracing::{debug, error, warn};

use super::Request;
use super::writer::{Reply, WriterCounters, refused};
use crate::cache::{EventWindow, Prepacked};
use crate::{Event, KeyValue, Result};

/// A committed group: its events for the window and its writes' answers
/// (refusals among them, answered in the same order).
pub(super) struct Group {
    pub events: Vec<(Event, Prepacked)>,
    pub replies: Vec<(Reply, Result<KeyValue>)>,
}

/// The store's write-ahead log file, synced through a handle of our own:
/// an fsync writes back the file's pages whichever descriptor wrote them.
/// SQLite made the file when the store was opened, and keeps it while a
/// connection is open.
struct Wal {
    path: PathBuf,
    file: File,
}

struct Shared {
    window: Arc<EventWindow>,
    wal: Wal,
    stats: Arc<WriterCounters>,
    /// Why the store stopped taking writes, once a sync failed.
    failed: OnceLock<String>,
    /// Groups handed to the publishing thread and not yet published.
    outstanding: AtomicUsize,
}

impl Shared {
    /// Syncs the log if any group wrote something, then publishes the
    /// groups in order; on a failed sync refuses them all and stops the
    /// store.
    fn publish(&self, groups: Vec<Group>) {
        if groups.iter().any(|g| !g.events.is_empty()) {
            let started = Instant::now();
            let synced = self.wal.file.sync_data();
            self.stats.add_sync(started.elapsed());
            if let Err(error) = synced {
                self.fail(&error, groups);
                return;
            }
            // Tests of recovery stop here: durable, not yet acknowledged.
            flotilla_failpoint::hit("store-after-commit");
        }
        for group in groups {
            self.window.apply_packed(group.events);
            for (reply, outcome) in group.replies {
                let _ = reply.send(outcome);
            }
        }
    }

    fn fail(&self, error: &std::io::Error, groups: Vec<Group>) {
        error!(
            %error,
            wal = %self.wal.path.display(),
            "syncing the store's write-ahead log failed; the store takes no more writes"
        );
        let cause = self
            .failed
            .get_or_init(|| {
                format!(
                    "syncing the store's write-ahead log {} failed ({error}): the store takes \
                     no more writes; restart the process once the disk is healthy",
                    self.wal.path.display()
                )
            })
            .clone();
        // Watches end: what they would be sent next may not be durable.
        self.window.close();
        for group in groups {
            for (reply, _) in group.replies {
                let _ = reply.send(Err(refused(&cause)));
            }
        }
    }
}

/// The writer's side of publishing.
pub(super) struct Publisher {
    shared: Arc<Shared>,
    /// The publishing thread's queue, once the thread runs: it starts at
    /// the first hand-over, so a store whose writes never queue up (an
    /// idle member among a thousand in one process) runs no thread for it.
    groups: Option<mpsc::Sender<Group>>,
    done: Done,
}

/// Where the publisher says it has published what it was handed: the
/// writer's own queue, which a writer holding a group open waits on.
pub(super) type Done = mpsc::Sender<Request>;

impl Publisher {
    /// The publisher of the log at `wal`.
    pub(super) fn start(
        window: Arc<EventWindow>,
        wal: PathBuf,
        stats: Arc<WriterCounters>,
        done: Done,
    ) -> std::io::Result<Publisher> {
        let file = File::open(&wal)?;
        let shared = Arc::new(Shared {
            window,
            wal: Wal { path: wal, file },
            stats,
            failed: OnceLock::new(),
            outstanding: AtomicUsize::new(0),
        });
        Ok(Publisher {
            shared,
            groups: None,
            done,
        })
    }

    /// Why the store takes no more writes, if it does not.
    pub(super) fn failed(&self) -> Option<String> {
        self.shared.failed.get().cloned()
    }

    /// Whether every group handed over has been published: only then may
    /// the writer publish one itself without overtaking them.
    pub(super) fn idle(&self) -> bool {
        self.shared.outstanding.load(Ordering::Acquire) == 0
    }

    /// Syncs and publishes `group` on the caller's thread. Only while
    /// [`Publisher::idle`].
    pub(super) fn publish_here(&self, group: Group) {
        self.shared.publish(vec![group]);
    }

    /// Hands `group` to the publishing thread, started if it is not yet.
    pub(super) fn hand_off(&mut self, group: Group) {
        self.start_thread();
        let Some(groups) = &self.groups else {
            // No thread to hand it to: publish here rather than leave the
            // writes unanswered.
            self.shared.publish(vec![group]);
            return;
        };
        self.shared.outstanding.fetch_add(1, Ordering::AcqRel);
        if let Err(mpsc::SendError(group)) = groups.send(group) {
            self.shared.outstanding.fetch_sub(1, Ordering::AcqRel);
            self.shared.publish(vec![group]);
        }
    }

    /// Starts the publishing thread unless it runs.
    fn start_thread(&mut self) {
        if self.groups.is_some() {
            return;
        }
        let (groups, handed) = mpsc::channel();
        let (publishing, done) = (self.shared.clone(), self.done.clone());
        match std::thread::Builder::new()
            .name("store-publisher".into())
            .spawn(move || publish_loop(&publishing, &handed, &done))
        {
            Ok(_) => self.groups = Some(groups),
            Err(error) => {
                warn!(%error, "cannot start the store's publishing thread; the writer syncs itself");
            }
        }
    }
}

/// Publishes what the writer hands over, all that has gathered at once,
/// until the writer is gone.
fn publish_loop(shared: &Shared, handed: &mpsc::Receiver<Group>, done: &Done) {
    while let Ok(first) = handed.recv() {
        let started = Instant::now();
        let mut groups = vec![first];
        groups.extend(handed.try_iter());
        let count = groups.len();
        shared.publish(groups);
        shared.outstanding.fetch_sub(count, Ordering::AcqRel);
        shared.stats.add_publisher_busy(started.elapsed());
        let _ = done.send(Request::Published);
    }
    debug!("store publisher stopped");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{EventKind, Revision};
    use bytes::Bytes;
    use tokio::sync::oneshot;

    fn window() -> Arc<EventWindow> {
        super::super::test_window(Vec::new(), 0)
    }

    fn put(key: &str, revision: Revision) -> Event {
        Event {
            kind: EventKind::Put,
            kv: KeyValue {
                key: Arc::from(key),
                value: Bytes::from_static(b"{}"),
                create_revision: revision,
                mod_revision: revision,
            },
            prev: None,
        }
    }

    fn group(key: &str, revision: Revision) -> (Group, oneshot::Receiver<Result<KeyValue>>) {
        let event = put(key, revision);
        let (reply, answer) = oneshot::channel();
        let outcome = Ok(event.kv.clone());
        (
            Group {
                events: vec![(event, Prepacked::default())],
                replies: vec![(reply, outcome)],
            },
            answer,
        )
    }

    #[tokio::test]
    async fn a_group_is_answered_and_seen_once_the_log_is_synced() {
        let dir = tempfile::tempdir().expect("a temporary dir");
        let wal = dir.path().join("store.db-wal");
        std::fs::write(&wal, b"frames").expect("a log file");
        let window = window();
        let stats = Arc::new(WriterCounters::default());
        let (done, published) = mpsc::channel();
        let mut publisher =
            Publisher::start(window.clone(), wal, stats.clone(), done).expect("started");
        let (first, first_answer) = group("/k/1", 1);
        let (second, second_answer) = group("/k/2", 2);
        publisher.hand_off(first);
        publisher.hand_off(second);
        assert_eq!(
            first_answer
                .await
                .expect("answered")
                .expect("ok")
                .mod_revision,
            1
        );
        assert_eq!(
            second_answer
                .await
                .expect("answered")
                .expect("ok")
                .mod_revision,
            2
        );
        assert_eq!(window.revision(), 2, "both groups applied, in order");
        assert!(stats.snapshot().syncs >= 1);
        assert!(publisher.failed().is_none());
        assert!(
            matches!(published.recv(), Ok(Request::Published)),
            "the writer is told"
        );
    }

    #[tokio::test]
    async fn a_failed_sync_refuses_the_group_and_stops_the_store() {
        // A log whose sync fails: Linux refuses fdatasync on /dev/null.
        let wal = PathBuf::from("/dev/null");
        let window = window();
        let stats = Arc::new(WriterCounters::default());
        let (done, _published) = mpsc::channel();
        let publisher = Publisher::start(window.clone(), wal, stats, done).expect("started");
        let (lost, answer) = group("/k/1", 1);
        publisher.publish_here(lost);
        let refusal = answer.await.expect("answered").expect_err("not durable");
        assert!(
            refusal.to_string().contains("takes no more writes"),
            "{refusal}"
        );
        assert_eq!(window.revision(), 0, "nothing unsynced is seen");
        let cause = publisher.failed().expect("the store stopped");
        assert!(cause.contains("restart the process"), "{cause}");
        assert!(
            window.watch("/k/", 0).is_err(),
            "watches end with the store"
        );
    }
}
