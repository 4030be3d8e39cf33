//! The embedded store's writer in Prometheus text, appended to `/metrics`:
//! whether the one thread that commits every write keeps up. etcd exports
//! the like for itself (`etcd_disk_backend_commit_duration_seconds`); a
//! store without a writer of this process exports nothing here.

use std::fmt::Write;

use flotilla_store::WriterStats;

/// The exposition of `stats`: four counters since the store opened.
pub fn render(stats: &WriterStats) -> String {
    let mut out = String::new();
    let mut counter = |name: &str, help: &str, value: String| {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} counter");
        let _ = writeln!(out, "{name} {value}");
    };
    counter(
        "flotilla_store_commits_total",
        "Transactions the embedded store's writer committed, one fsync each.",
        stats.commits.to_string(),
    );
    counter(
        "flotilla_store_writes_total",
        "Writes committed in those transactions.",
        stats.writes.to_string(),
    );
    counter(
        "flotilla_store_writer_busy_seconds_total",
        "Time the writer spent committing groups of writes; writes arriving meanwhile wait for the next group.",
        format!("{:.6}", stats.busy_seconds),
    );
    counter(
        "flotilla_store_commit_sync_seconds_total",
        "The part of it in SQLite's commit: the write-ahead log written and synced.",
        format!("{:.6}", stats.sync_seconds),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_each_counter_with_its_help_and_type() {
        let text = render(&WriterStats {
            commits: 3,
            writes: 40,
            busy_seconds: 0.25,
            sync_seconds: 0.125,
        });
        assert!(text.contains(
            "# TYPE flotilla_store_commits_total counter\nflotilla_store_commits_total 3\n"
        ));
        assert!(text.contains("\nflotilla_store_writes_total 40\n"));
        assert!(text.contains("\nflotilla_store_writer_busy_seconds_total 0.250000\n"));
        assert!(text.contains("\nflotilla_store_commit_sync_seconds_total 0.125000\n"));
    }
}
