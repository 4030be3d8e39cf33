//! What a container's processes use, read from `/proc`: the CPU time and
//! resident memory of its process and every descendant (what a kubelet
//! reads from the container's cgroup; here a container's processes are
//! the host's, found by parentage from the shim's pid).

use std::collections::HashMap;
use std::time::Duration;

/// Linux reports CPU times in USER_HZ ticks, 100 a second on every
/// architecture (the ABI fixes it; sysconf(_SC_CLK_TCK) answers 100).
const TICKS_PER_SECOND: u64 = 100;

/// One process as `/proc/PID/stat` tells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stat {
    parent: i32,
    /// utime + stime + cutime + cstime, in ticks.
    ticks: u64,
}

/// Parses `/proc/PID/stat`: the fields after the command's closing
/// parenthesis (the command itself may hold spaces and parentheses).
fn parse_stat(line: &str) -> Option<Stat> {
    let rest = &line[line.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the command: state(0) ppid(1) ... utime(11) stime(12)
    // cutime(13) cstime(14). The children's times are those of children
    // that ended and were waited for: with them a tree's sum does not drop
    // when a process of it exits.
    let parent = fields.get(1)?.parse().ok()?;
    let mut ticks = 0u64;
    for i in 11..=14 {
        ticks = ticks.saturating_add(fields.get(i)?.parse().ok()?);
    }
    Some(Stat { parent, ticks })
}

/// The resident set in bytes, from `/proc/PID/status`'s `VmRSS: N kB`.
fn parse_rss(status: &str) -> u64 {
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Every process of the host, by pid, read once for many containers.
pub struct ProcessTable {
    stats: HashMap<i32, Stat>,
    children: HashMap<i32, Vec<i32>>,
}

impl ProcessTable {
    pub fn read() -> ProcessTable {
        let mut stats = HashMap::new();
        if let Ok(dir) = std::fs::read_dir("/proc") {
            for entry in dir.flatten() {
                let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
                    continue;
                };
                // A process may end between the listing and the read.
                if let Some(stat) = std::fs::read_to_string(entry.path().join("stat"))
                    .ok()
                    .and_then(|s| parse_stat(&s))
                {
                    stats.insert(pid, stat);
                }
            }
        }
        Self::from_stats(stats)
    }

    fn from_stats(stats: HashMap<i32, Stat>) -> ProcessTable {
        let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
        for (pid, s) in &stats {
            children.entry(s.parent).or_default().push(*pid);
        }
        ProcessTable { stats, children }
    }

    /// `pid` and its descendants.
    fn tree(&self, pid: i32) -> Vec<i32> {
        let mut out = Vec::new();
        let mut seen = std::collections::HashSet::new();
        let mut todo = vec![pid];
        while let Some(p) = todo.pop() {
            if !self.stats.contains_key(&p) || !seen.insert(p) {
                continue;
            }
            out.push(p);
            todo.extend(self.children.get(&p).into_iter().flatten());
        }
        out
    }

    /// CPU time used by `pid`'s tree: its live processes' and what those
    /// waited for.
    pub fn cpu(&self, pid: i32) -> Duration {
        let ticks: u64 = self
            .tree(pid)
            .iter()
            .filter_map(|p| self.stats.get(p))
            .map(|s| s.ticks)
            .sum();
        Duration::from_millis(ticks.saturating_mul(1000) / TICKS_PER_SECOND)
    }

    /// Resident memory of `pid`'s tree, bytes.
    pub fn memory(&self, pid: i32) -> u64 {
        self.tree(pid)
            .iter()
            .map(|p| {
                std::fs::read_to_string(format!("/proc/{p}/status")).map_or(0, |s| parse_rss(&s))
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_with_odd_commands_parse() {
        let line = "4242 (my (odd) cmd) S 4241 4242 4242 0 -1 4194304 100 0 0 0 250 40 7 3 20 0 1 0 100 1000 200";
        assert_eq!(
            parse_stat(line),
            Some(Stat {
                parent: 4241,
                ticks: 300
            })
        );
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_rss("Name:\tsh\nVmRSS:\t    1532 kB\n"), 1532 * 1024);
        assert_eq!(parse_rss("Name:\tkthreadd\n"), 0);
    }

    #[test]
    fn a_tree_sums_its_descendants_only() {
        let stats = HashMap::from([
            (
                1,
                Stat {
                    parent: 0,
                    ticks: 1000,
                },
            ),
            (
                10,
                Stat {
                    parent: 1,
                    ticks: 100,
                },
            ),
            (
                11,
                Stat {
                    parent: 10,
                    ticks: 50,
                },
            ),
            (
                12,
                Stat {
                    parent: 11,
                    ticks: 25,
                },
            ),
            (
                20,
                Stat {
                    parent: 1,
                    ticks: 7,
                },
            ),
        ]);
        let table = ProcessTable::from_stats(stats);
        assert_eq!(table.cpu(10), Duration::from_millis(1750));
        assert_eq!(table.cpu(20), Duration::from_millis(70));
        assert_eq!(table.cpu(99), Duration::ZERO, "gone");
    }

    #[test]
    fn this_process_is_measured() {
        let table = ProcessTable::read();
        let me = std::process::id() as i32;
        assert!(table.memory(me) > 0);
    }
}
