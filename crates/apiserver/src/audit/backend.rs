//! Where events go: a file rotated by size (lumberjack's naming, as
//! kube-apiserver's log backend), or stdout; written by a thread of its
//! own from a bounded queue, so that no request waits on the disk.
//!
//! Rotation: before a line would take the file past `max_size` bytes, the
//! file is renamed to `NAME-<UTC time>.EXT` (`audit-2026-11-26T07-05-36.123.log`
//! for `audit.log`) and a new one started. Then the oldest backups beyond
//! `max_backups` (0: keep all) and those older than `max_age` (by the time
//! in their name; `None`: kept) are removed.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tracing::warn;

/// How a log file rotates.
#[derive(Clone, Debug)]
pub struct Rotation {
    /// Bytes before rotation; 0 never rotates.
    pub max_size: u64,
    /// Rotated files kept; 0 keeps all (subject to `max_age`).
    pub max_backups: usize,
    /// Rotated files older than this are removed; `None` keeps them.
    pub max_age: Option<Duration>,
}

/// The time format of a backup's name (lumberjack's, `:` replaced).
const BACKUP_TIME: &str = "%Y-%m-%dT%H-%M-%S%.3f";

/// An append-only log file that rotates by size.
pub struct RotatingFile {
    path: PathBuf,
    rotation: Rotation,
    file: BufWriter<File>,
    size: u64,
}

impl RotatingFile {
    /// Opens (creating, 0600, its directory 0700) `path` for appending.
    pub fn open(path: &Path, rotation: Rotation) -> io::Result<RotatingFile> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            create_dir(dir)?;
        }
        let file = open_append(path)?;
        let size = file.metadata()?.len();
        Ok(RotatingFile {
            path: path.to_path_buf(),
            rotation,
            file: BufWriter::new(file),
            size,
        })
    }

    /// Appends `line`, rotating first if it would not fit.
    pub fn write_line(&mut self, line: &[u8]) -> io::Result<()> {
        let len = line.len() as u64;
        if self.rotation.max_size > 0 && self.size > 0 && self.size + len > self.rotation.max_size {
            self.rotate()?;
        }
        self.file.write_all(line)?;
        self.size += len;
        Ok(())
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }

    fn rotate(&mut self) -> io::Result<()> {
        self.file.flush()?;
        let mut now = jiff::Timestamp::now();
        let backup = loop {
            let candidate = backup_name(&self.path, now);
            if !candidate.exists() {
                break candidate;
            }
            // Two rotations within a millisecond: the next free one.
            now = now
                .checked_add(jiff::SignedDuration::from_millis(1))
                .map_err(io::Error::other)?;
        };
        std::fs::rename(&self.path, &backup)?;
        self.file = BufWriter::new(open_append(&self.path)?);
        self.size = 0;
        self.prune(jiff::Timestamp::now());
        Ok(())
    }

    /// Removes backups beyond `max_backups` and older than `max_age`.
    fn prune(&self, now: jiff::Timestamp) {
        let mut backups = backups(&self.path);
        // Newest first.
        backups.sort_by_key(|b| std::cmp::Reverse(b.1));
        for (i, (path, time)) in backups.iter().enumerate() {
            let too_many = self.rotation.max_backups > 0 && i >= self.rotation.max_backups;
            let too_old = self.rotation.max_age.is_some_and(|age| {
                jiff::SignedDuration::try_from(age)
                    .ok()
                    .and_then(|age| now.checked_sub(age).ok())
                    .is_some_and(|cutoff| *time < cutoff)
            });
            if (too_many || too_old)
                && let Err(error) = std::fs::remove_file(path)
            {
                warn!(path = %path.display(), %error, "cannot remove an old audit log");
            }
        }
    }
}

fn create_dir(dir: &Path) -> io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir)
}

fn open_append(path: &Path) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.create(true).append(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options.open(path)
}

/// `dir/audit.log` → (`audit`, `.log`).
fn stem_and_ext(path: &Path) -> (String, String) {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    match name.rfind('.') {
        Some(dot) if dot > 0 => (name[..dot].to_string(), name[dot..].to_string()),
        _ => (name, String::new()),
    }
}

/// The name `path` is renamed to when rotated at `at`.
pub fn backup_name(path: &Path, at: jiff::Timestamp) -> PathBuf {
    let (stem, ext) = stem_and_ext(path);
    let time = jiff::fmt::strtime::format(BACKUP_TIME, at).unwrap_or_else(|_| at.to_string());
    path.with_file_name(format!("{stem}-{time}{ext}"))
}

/// The backups of `path` in its directory, with the time in their names.
pub fn backups(path: &Path) -> Vec<(PathBuf, jiff::Timestamp)> {
    let (stem, ext) = stem_and_ext(path);
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            let time = name
                .strip_prefix(&format!("{stem}-"))?
                .strip_suffix(ext.as_str())?;
            let time = jiff::civil::DateTime::strptime(BACKUP_TIME, time).ok()?;
            let time = time.to_zoned(jiff::tz::TimeZone::UTC).ok()?.timestamp();
            Some((entry.path(), time))
        })
        .collect()
}

/// Where the writer puts lines.
pub enum Sink {
    Stdout,
    File(RotatingFile),
    /// Lines kept in memory (tests).
    #[cfg(test)]
    Memory(Arc<parking_lot::Mutex<Vec<u8>>>),
}

impl Sink {
    fn write_line(&mut self, line: &[u8]) -> io::Result<()> {
        match self {
            Sink::Stdout => io::stdout().lock().write_all(line),
            Sink::File(f) => f.write_line(line),
            #[cfg(test)]
            Sink::Memory(m) => {
                m.lock().extend_from_slice(line);
                Ok(())
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Sink::Stdout => io::stdout().lock().flush(),
            Sink::File(f) => f.flush(),
            #[cfg(test)]
            Sink::Memory(_) => Ok(()),
        }
    }
}

pub(crate) enum Message {
    Line(Vec<u8>),
    /// Answered once every line before it is written and flushed.
    Flush(oneshot::Sender<()>),
    /// The same, for a thread that cannot await (the panic hook).
    FlushBlocking(std::sync::mpsc::Sender<()>),
}

/// The queue in front of the writer thread.
pub struct Writer {
    tx: mpsc::Sender<Message>,
    /// Events given to the writer.
    pub(crate) written: AtomicU64,
    /// Events dropped because the queue was full.
    pub(crate) dropped: AtomicU64,
    /// Events the sink refused (disk full, closed stdout).
    pub(crate) errors: Arc<AtomicU64>,
}

/// How many events wait for the writer before new ones are dropped
/// (upstream's batch buffer size).
pub const QUEUE: usize = 10_000;

impl Writer {
    /// Starts the writer thread over `sink`.
    pub fn start(mut sink: Sink, capacity: usize) -> io::Result<Writer> {
        let (tx, mut rx) = mpsc::channel::<Message>(capacity.max(1));
        let errors = Arc::new(AtomicU64::new(0));
        let failures = errors.clone();
        std::thread::Builder::new()
            .name("audit-writer".into())
            .spawn(move || {
                while let Some(message) = rx.blocking_recv() {
                    match message {
                        Message::Line(line) => {
                            if let Err(error) = sink.write_line(&line) {
                                let n = failures.fetch_add(1, Ordering::Relaxed);
                                if n.is_power_of_two() || n == 0 {
                                    warn!(%error, failed = n + 1, "cannot write the audit log");
                                }
                            }
                        }
                        Message::Flush(done) => {
                            let _ = sink.flush();
                            let _ = done.send(());
                        }
                        Message::FlushBlocking(done) => {
                            let _ = sink.flush();
                            let _ = done.send(());
                        }
                    }
                    // Written out as soon as nothing more waits.
                    if rx.is_empty() {
                        let _ = sink.flush();
                    }
                }
                let _ = sink.flush();
            })?;
        Ok(Writer {
            tx,
            written: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            errors,
        })
    }

    /// Queues `line`; never waits. A full queue drops it, counted and warned of.
    pub fn send(&self, line: Vec<u8>) {
        match self.tx.try_send(Message::Line(line)) {
            Ok(()) => {
                self.written.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                let n = self.dropped.fetch_add(1, Ordering::Relaxed);
                if n.is_power_of_two() || n == 0 {
                    warn!(
                        dropped = n + 1,
                        queue = QUEUE,
                        "the audit log writer is behind: audit events dropped"
                    );
                }
            }
        }
    }

    /// Blocks the thread until every event queued so far is written and
    /// flushed, or `limit` has passed: the panic hook's, before the
    /// process aborts.
    pub fn flush_blocking(&self, limit: std::time::Duration) {
        let (done, wait) = std::sync::mpsc::channel();
        if self.tx.try_send(Message::FlushBlocking(done)).is_ok() {
            let _ = wait.recv_timeout(limit);
        }
    }

    /// Waits until every event queued so far is written and flushed.
    pub async fn flush(&self) {
        let (done, wait) = oneshot::channel();
        if self.tx.send(Message::Flush(done)).await.is_ok() {
            let _ = wait.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    #[test]
    fn rotates_by_size_and_keeps_max_backups() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("logs/audit.log");
        let mut file = RotatingFile::open(
            &path,
            Rotation {
                max_size: 100,
                max_backups: 2,
                max_age: None,
            },
        )
        .expect("open");
        let line = [b'x'; 39];
        let mut line = line.to_vec();
        line.push(b'\n');
        // Two lines per file: 10 lines make 5 files, of which 2 backups stay.
        for _ in 0..10 {
            file.write_line(&line).expect("write");
        }
        file.flush().expect("flush");
        let names = names(path.parent().expect("dir"));
        assert_eq!(names.len(), 3, "{names:?}");
        assert!(names.contains(&"audit.log".to_string()), "{names:?}");
        let re =
            regex::Regex::new(r"^audit-\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d\.\d{3}\.log$").expect("re");
        for name in names.iter().filter(|n| *n != "audit.log") {
            assert!(re.is_match(name), "{name}");
        }
        for name in &names {
            let len = std::fs::metadata(path.with_file_name(name))
                .expect("stat")
                .len();
            assert_eq!(len, 80, "{name}");
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).expect("stat").permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }

    #[test]
    fn a_line_larger_than_max_size_gets_a_file_of_its_own() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("audit");
        let mut file = RotatingFile::open(
            &path,
            Rotation {
                max_size: 10,
                max_backups: 0,
                max_age: None,
            },
        )
        .expect("open");
        file.write_line(b"0123456789abcdef\n").expect("write");
        file.write_line(b"short\n").expect("write");
        file.flush().expect("flush");
        assert_eq!(std::fs::read(&path).expect("read"), b"short\n");
        assert_eq!(backups(&path).len(), 1);
    }

    #[test]
    fn removes_backups_older_than_max_age() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("audit.log");
        let now = jiff::Timestamp::now();
        let day = jiff::SignedDuration::from_hours(24);
        let old = backup_name(&path, now.checked_sub(day * 3).expect("time"));
        let recent = backup_name(&path, now.checked_sub(day / 2).expect("time"));
        let unrelated = dir.path().join("audit-notatime.log");
        for p in [&old, &recent, &unrelated] {
            std::fs::write(p, "x\n").expect("write");
        }
        let mut file = RotatingFile::open(
            &path,
            Rotation {
                max_size: 4,
                max_backups: 0,
                max_age: Some(Duration::from_secs(24 * 3600)),
            },
        )
        .expect("open");
        file.write_line(b"abc\n").expect("write");
        file.write_line(b"def\n").expect("write");
        assert!(!old.exists(), "the 3-day-old backup is removed");
        assert!(recent.exists());
        assert!(
            unrelated.exists(),
            "files not named as backups are left alone"
        );
        assert_eq!(backups(&path).len(), 2);
    }

    #[tokio::test]
    async fn the_writer_flushes_and_drops_when_full() {
        let memory = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let writer = Writer::start(Sink::Memory(memory.clone()), 4).expect("start");
        for i in 0..3 {
            writer.send(format!("{i}\n").into_bytes());
        }
        writer.flush().await;
        assert_eq!(&*memory.lock(), b"0\n1\n2\n");
        // A burst far beyond the queue: some are dropped, and counted.
        for _ in 0..10_000 {
            writer.send(b"y\n".to_vec());
        }
        writer.flush().await;
        let written = writer.written.load(Ordering::Relaxed);
        let dropped = writer.dropped.load(Ordering::Relaxed);
        assert_eq!(written + dropped, 10_003);
        assert_eq!(memory.lock().len() as u64, 2 * written);
    }
}
