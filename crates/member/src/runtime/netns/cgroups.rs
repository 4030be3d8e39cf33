//! Memory and CPU limits for containers, with whichever cgroup
//! controllers the machine has: cgroup v2 (`memory.max`, `cpu.max`) where
//! the unified hierarchy carries them, else cgroup v1's `memory` and `cpu`
//! hierarchies (`memory.limit_in_bytes`, `cpu.cfs_quota_us`); where
//! neither is writable, limits are not enforced and the member says so
//! once. Every group lives under one directory per member
//! (`flotilla-<prefix>`), so what an earlier run left is found and removed.
//!
//! The shim puts its own process into the container's groups before it
//! execs, so nothing the container starts escapes them.

use std::path::{Path, PathBuf};

use tracing::warn;

const ROOT: &str = "/sys/fs/cgroup";

/// Which hierarchy limits go to.
#[derive(Clone, Debug, PartialEq)]
pub enum Cgroups {
    /// cgroup v2 at this directory (the member's own).
    V2(PathBuf),
    /// cgroup v1: the member's directories in the memory and cpu hierarchies.
    V1 {
        memory: PathBuf,
        cpu: PathBuf,
    },
    None,
}

/// A container's limits: bytes, and millicores.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Limits {
    pub memory: Option<i64>,
    pub cpu_millis: Option<i64>,
}

impl Limits {
    pub fn any(&self) -> bool {
        self.memory.is_some() || self.cpu_millis.is_some()
    }
}

const PERIOD_US: i64 = 100_000;

fn writable(dir: &Path) -> bool {
    std::fs::create_dir_all(dir).is_ok()
}

impl Cgroups {
    /// Finds the controllers and makes the member's directories.
    pub fn detect(prefix: &str) -> Cgroups {
        let name = format!("flotilla-{prefix}");
        let v2 = Path::new(ROOT);
        let controllers =
            std::fs::read_to_string(v2.join("cgroup.controllers")).unwrap_or_default();
        if controllers.split_whitespace().any(|c| c == "memory")
            && controllers.split_whitespace().any(|c| c == "cpu")
        {
            let dir = v2.join(&name);
            if writable(&dir) {
                // Children get the controllers only when the parent delegates them.
                let _ = std::fs::write(dir.join("cgroup.subtree_control"), "+memory +cpu");
                return Cgroups::V2(dir);
            }
        }
        let (memory, cpu) = (v2.join("memory").join(&name), v2.join("cpu").join(&name));
        if v2.join("memory/memory.limit_in_bytes").exists()
            && v2.join("cpu/cpu.cfs_quota_us").exists()
            && writable(&memory)
            && writable(&cpu)
        {
            return Cgroups::V1 { memory, cpu };
        }
        warn!("no writable cgroup memory and cpu controllers: container limits are not enforced");
        Cgroups::None
    }

    /// Makes a container's groups with `limits`; returns the `cgroup.procs`
    /// files its process joins.
    pub fn create(&self, id: &str, limits: Limits) -> Vec<PathBuf> {
        if !limits.any() {
            return Vec::new();
        }
        let result = match self {
            Cgroups::V2(dir) => {
                let g = dir.join(id);
                make(&g).and_then(|()| {
                    if let Some(m) = limits.memory {
                        std::fs::write(g.join("memory.max"), m.to_string())?;
                        // No swap to escape the limit into.
                        let _ = std::fs::write(g.join("memory.swap.max"), "0");
                    }
                    if let Some(c) = limits.cpu_millis {
                        std::fs::write(g.join("cpu.max"), format!("{} {PERIOD_US}", quota(c)))?;
                    }
                    Ok(vec![g.join("cgroup.procs")])
                })
            }
            Cgroups::V1 { memory, cpu } => {
                let (m, c) = (memory.join(id), cpu.join(id));
                make(&m).and_then(|()| make(&c)).and_then(|()| {
                    if let Some(bytes) = limits.memory {
                        std::fs::write(m.join("memory.limit_in_bytes"), bytes.to_string())?;
                        let _ = std::fs::write(
                            m.join("memory.memsw.limit_in_bytes"),
                            bytes.to_string(),
                        );
                    }
                    if let Some(millis) = limits.cpu_millis {
                        std::fs::write(c.join("cpu.cfs_period_us"), PERIOD_US.to_string())?;
                        std::fs::write(c.join("cpu.cfs_quota_us"), quota(millis).to_string())?;
                    }
                    Ok(vec![m.join("cgroup.procs"), c.join("cgroup.procs")])
                })
            }
            Cgroups::None => return Vec::new(),
        };
        result.unwrap_or_else(|error| {
            warn!(%error, container = id, "cannot make the container's cgroup; it runs without limits");
            Vec::new()
        })
    }

    /// Whether the container's group saw the OOM killer.
    pub fn oom_killed(&self, id: &str) -> bool {
        let (file, key) = match self {
            Cgroups::V2(dir) => (dir.join(id).join("memory.events"), "oom_kill"),
            Cgroups::V1 { memory, .. } => (memory.join(id).join("memory.oom_control"), "oom_kill"),
            Cgroups::None => return false,
        };
        std::fs::read_to_string(file)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split_once(' '))
            .any(|(k, v)| k == key && v.trim().parse::<u64>().is_ok_and(|n| n > 0))
            || matches!(self, Cgroups::V1 { memory, .. }
                if std::fs::read_to_string(memory.join(id).join("memory.failcnt"))
                    .is_ok_and(|n| n.trim().parse::<u64>().is_ok_and(|n| n > 0)))
    }

    /// Removes a container's groups (its processes have ended).
    pub fn remove(&self, id: &str) {
        for dir in self.dirs() {
            let _ = std::fs::remove_dir(dir.join(id));
        }
    }

    /// Removes the member's groups, and everything in them.
    pub fn destroy(&self) {
        for dir in self.dirs() {
            flotilla_host::record::remove_cgroup_tree(&dir);
        }
    }

    fn dirs(&self) -> Vec<PathBuf> {
        match self {
            Cgroups::V2(d) => vec![d.clone()],
            Cgroups::V1 { memory, cpu } => vec![memory.clone(), cpu.clone()],
            Cgroups::None => Vec::new(),
        }
    }
}

fn make(dir: &Path) -> std::io::Result<()> {
    match std::fs::create_dir(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(e),
        _ => Ok(()),
    }
}

/// CFS quota per period for millicores (at least 1 ms).
fn quota(millis: i64) -> i64 {
    (millis * PERIOD_US / 1000).max(1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn millicores_become_a_quota_per_period() {
        assert_eq!(quota(500), 50_000);
        assert_eq!(quota(2000), 200_000);
        assert_eq!(quota(1), 1000, "at least a millisecond");
        assert!(!Limits::default().any());
    }
}
