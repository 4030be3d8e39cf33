//! The per-host record of what Flotilla made on this machine: one entry
//! per prefix (a member's pod network `flt-<hash>`, an underlay
//! `flt-ul-<hash>`), saying which process made it. It lives outside any
//! data dir (`/run/flotilla/made`, gone with the namespaces at reboot), so
//! that what a process killed with SIGKILL left is found again whatever
//! became of its data dir: by the next `flotilla up`, the next netns
//! member, or `flotilla cleanup`.
//!
//! An entry is stale once its owner is gone (its pid no longer runs, or
//! runs another program since: the process's start time is recorded
//! too). Everything under a stale prefix goes: the processes in its
//! network namespaces and cgroups, the namespaces (and with them their
//! links, TUN devices and nftables tables), the cgroups. A live entry is
//! never touched. Claiming and sweeping an entry hold its lock file, so a
//! sweep never removes what a new owner of the same prefix just made.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};

/// Overrides where the record lives (tests, or a host whose `/run` is not
/// writable).
pub const RECORD_DIR_ENV: &str = "FLOTILLA_HOST_RECORD";
const DEFAULT_DIR: &str = "/run/flotilla/made";
const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// Where the record lives.
pub fn dir() -> PathBuf {
    std::env::var_os(RECORD_DIR_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_DIR))
}

/// One entry: what a process made under a prefix.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    pub prefix: String,
    /// What it is, for people ("netns member", "underlay").
    pub what: String,
    pub pid: i32,
    /// The owner's start time (clock ticks after boot, /proc's field 22),
    /// so a reused pid is not taken for the owner.
    pub start: u64,
    /// The owner's data dir, where it has one.
    pub data_dir: String,
    /// The PID namespace the pid is in (`pid:[inode]`): from another one
    /// (a container's, a test's), this process cannot tell whether the
    /// owner runs, and leaves the entry alone.
    pub pid_namespace: String,
}

impl Record {
    fn render(&self) -> String {
        format!(
            "prefix={}\nwhat={}\npid={}\nstart={}\ndata_dir={}\npid_namespace={}\n",
            self.prefix, self.what, self.pid, self.start, self.data_dir, self.pid_namespace
        )
    }

    fn parse(text: &str) -> Option<Record> {
        let field = |key: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
                .map(str::to_string)
        };
        Some(Record {
            prefix: field("prefix").filter(|p| valid_prefix(p))?,
            what: field("what").unwrap_or_default(),
            pid: field("pid")?.parse().ok()?,
            start: field("start")?.parse().ok()?,
            data_dir: field("data_dir").unwrap_or_default(),
            pid_namespace: field("pid_namespace").unwrap_or_default(),
        })
    }

    /// Whether the process that made it may still run: it does, or it is
    /// in another PID namespace than this process (where its pid means
    /// nothing here).
    pub fn owner_alive(&self) -> bool {
        self.in_another_pid_namespace() || start_time(self.pid) == Some(self.start)
    }

    /// Whether its owner's pid belongs to another PID namespace.
    pub fn in_another_pid_namespace(&self) -> bool {
        self.pid_namespace != pid_namespace()
    }
}

/// A prefix is a name the record's files and `/run/netns` can hold.
fn valid_prefix(prefix: &str) -> bool {
    !prefix.is_empty()
        && prefix.len() <= 64
        && prefix
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// This process's PID namespace, `pid:[inode]`.
fn pid_namespace() -> String {
    std::fs::read_link("/proc/self/ns/pid")
        .map(|p| p.display().to_string())
        .unwrap_or_default()
}

/// A process's start time, if it runs (a zombie, killed but not yet
/// reaped, does not: its parent may be gone too, and nothing reaps it
/// where PID 1 does not).
fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces: fields after its ')'.
    let mut rest = stat.get(stat.rfind(')')? + 1..)?.split_whitespace();
    if matches!(rest.next(), Some("Z" | "X" | "x")) {
        return None;
    }
    rest.nth(18)?.parse().ok()
}

fn lock(dir: &Path, prefix: &str) -> io::Result<Flock<File>> {
    std::fs::create_dir_all(dir)?;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(format!("{prefix}.lock")))?;
    Flock::lock(file, FlockArg::LockExclusive).map_err(|(_, errno)| io::Error::from(errno))
}

fn entry_path(dir: &Path, prefix: &str) -> PathBuf {
    dir.join(format!("{prefix}.owner"))
}

/// Records that this process owns what is made under `prefix` (before it
/// makes any of it).
pub fn claim(prefix: &str, what: &str, data_dir: &str) -> io::Result<()> {
    if !valid_prefix(prefix) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{prefix:?} is not a prefix the host record can hold"),
        ));
    }
    let dir = dir();
    let pid = std::process::id() as i32;
    let record = Record {
        prefix: prefix.to_string(),
        what: what.to_string(),
        pid,
        start: start_time(pid).unwrap_or_default(),
        data_dir: data_dir.to_string(),
        pid_namespace: pid_namespace(),
    };
    let _lock = lock(&dir, prefix)?;
    let path = entry_path(&dir, prefix);
    let partial = dir.join(format!("{prefix}.owner.partial"));
    std::fs::write(&partial, record.render())?;
    std::fs::rename(&partial, &path)
}

/// Forgets `prefix` once its owner has removed what it made, if this
/// process still owns it.
pub fn release(prefix: &str) {
    let dir = dir();
    let Ok(_lock) = lock(&dir, prefix) else {
        return;
    };
    let path = entry_path(&dir, prefix);
    let ours = std::fs::read_to_string(&path)
        .ok()
        .and_then(|t| Record::parse(&t))
        .is_some_and(|r| r.pid == std::process::id() as i32);
    if ours {
        let _ = std::fs::remove_file(path);
    }
}

/// Every entry of the record.
pub fn records() -> Vec<Record> {
    let Ok(entries) = std::fs::read_dir(dir()) else {
        return Vec::new();
    };
    let mut all: Vec<Record> = entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".owner"))
        .filter_map(|e| Record::parse(&std::fs::read_to_string(e.path()).ok()?))
        .collect();
    all.sort_by(|a, b| a.prefix.cmp(&b.prefix));
    all
}

/// What exists on the host under one prefix.
#[derive(Clone, Debug, Default)]
pub struct Made {
    /// Named network namespaces (pods' before nodes', before the prefix's own).
    pub namespaces: Vec<String>,
    /// Cgroup directories.
    pub cgroups: Vec<PathBuf>,
    /// Processes in those namespaces and cgroups.
    pub processes: Vec<i32>,
}

impl Made {
    pub fn is_empty(&self) -> bool {
        self.namespaces.is_empty() && self.cgroups.is_empty() && self.processes.is_empty()
    }
}

/// What exists under `prefix` now.
pub async fn made(prefix: &str) -> Made {
    let mut namespaces = crate::namespaces_with_prefix(prefix);
    namespaces.sort_by_key(|n| std::cmp::Reverse(n.len()));
    let cgroups = cgroup_dirs(prefix);
    let mut processes = Vec::new();
    for ns in &namespaces {
        processes.extend(crate::pids_in(ns).await);
    }
    for dir in &cgroups {
        processes.extend(cgroup_processes(dir));
    }
    processes.sort_unstable();
    processes.dedup();
    Made {
        namespaces,
        cgroups,
        processes,
    }
}

/// The cgroup directories the netns runtime makes for `prefix` (v2, and
/// v1's memory and cpu hierarchies).
fn cgroup_dirs(prefix: &str) -> Vec<PathBuf> {
    let name = format!("flotilla-{prefix}");
    let root = Path::new(CGROUP_ROOT);
    [
        root.join(&name),
        root.join("memory").join(&name),
        root.join("cpu").join(&name),
    ]
    .into_iter()
    .filter(|d| d.is_dir())
    .collect()
}

/// Processes in a cgroup directory and the groups under it.
fn cgroup_processes(dir: &Path) -> Vec<i32> {
    let mut pids: Vec<i32> = std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    if let Ok(children) = std::fs::read_dir(dir) {
        for child in children.flatten() {
            if child.file_type().is_ok_and(|t| t.is_dir()) {
                pids.extend(cgroup_processes(&child.path()));
            }
        }
    }
    pids
}

/// Removes a cgroup directory and the groups under it (emptied first).
pub fn remove_cgroup_tree(dir: &Path) {
    if let Ok(children) = std::fs::read_dir(dir) {
        for child in children.flatten() {
            if child.file_type().is_ok_and(|t| t.is_dir()) {
                remove_cgroup_tree(&child.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// Removes what [`made`] found: processes killed, namespaces and cgroups
/// removed.
pub async fn remove(made: &Made) {
    for &pid in &made.processes {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    for ns in &made.namespaces {
        crate::remove_netns(ns).await;
    }
    for dir in &made.cgroups {
        // A killed process leaves its cgroup a moment after the signal.
        for _ in 0..50 {
            if cgroup_processes(dir).is_empty() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        remove_cgroup_tree(dir);
    }
}

/// A stale entry and what it left.
#[derive(Clone, Debug)]
pub struct Leftover {
    pub record: Record,
    pub made: Made,
}

/// Finds the entries whose owners are gone and, unless `dry_run`, removes
/// what they made and forgets them. Entries whose owners run are left.
pub async fn sweep_stale(dry_run: bool) -> Vec<Leftover> {
    let dir = dir();
    let mut out = Vec::new();
    for candidate in records() {
        if candidate.owner_alive() {
            continue;
        }
        let Ok(_lock) = lock(&dir, &candidate.prefix) else {
            continue;
        };
        // Read again under the lock: a new owner may have claimed it.
        let path = entry_path(&dir, &candidate.prefix);
        let Some(record) = std::fs::read_to_string(&path)
            .ok()
            .and_then(|t| Record::parse(&t))
        else {
            continue;
        };
        if record.owner_alive() {
            continue;
        }
        let made = made(&record.prefix).await;
        if !dry_run {
            if !made.is_empty() {
                tracing::info!(
                    prefix = %record.prefix,
                    what = %record.what,
                    pid = record.pid,
                    namespaces = made.namespaces.len(),
                    processes = made.processes.len(),
                    "removing what a process that is gone left on this host"
                );
            }
            remove(&made).await;
            let _ = std::fs::remove_file(&path);
        }
        out.push(Leftover { record, made });
    }
    out
}

/// Network namespaces that look like Flotilla's (`flt-`) but that no
/// entry of the record covers: made before the record existed, or by a
/// process whose entry was lost.
pub fn unrecorded_namespaces() -> Vec<String> {
    let prefixes: Vec<String> = records().into_iter().map(|r| r.prefix).collect();
    let mut names: Vec<String> = crate::namespaces_with_prefix("flt")
        .into_iter()
        .filter(|n| {
            !prefixes
                .iter()
                .any(|p| n == p || n.starts_with(&format!("{p}-")))
        })
        .collect();
    names.sort_by_key(|n| std::cmp::Reverse(n.len()));
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_reads_back_and_bad_ones_do_not() {
        let r = Record {
            prefix: "flt-0a1b2c3d".into(),
            what: "netns member".into(),
            pid: 42,
            start: 123456,
            data_dir: "/tmp/fleet/members/rome".into(),
            pid_namespace: "pid:[4026531836]".into(),
        };
        assert_eq!(Record::parse(&r.render()), Some(r));
        assert_eq!(Record::parse("prefix=../etc\npid=1\nstart=1\n"), None);
        assert_eq!(Record::parse("prefix=flt-x\npid=one\nstart=1\n"), None);
        assert_eq!(Record::parse(""), None);
    }

    #[test]
    fn this_process_is_alive_and_a_changed_start_is_not() {
        let pid = std::process::id() as i32;
        let start = start_time(pid).expect("our own start time");
        let mut r = Record {
            prefix: "flt-x".into(),
            what: String::new(),
            pid,
            start,
            data_dir: String::new(),
            pid_namespace: pid_namespace(),
        };
        assert!(r.owner_alive());
        r.start += 1;
        assert!(!r.owner_alive(), "a reused pid is not the owner");
        r.pid_namespace = "pid:[1]".into();
        assert!(
            r.owner_alive(),
            "an owner in another PID namespace cannot be judged from here"
        );
    }
}
