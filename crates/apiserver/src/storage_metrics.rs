//! The embedded store's writer in the exposition of the control plane's
//! `/metrics`: whether the one thread that commits every write keeps up.
//! etcd exports the like for itself (`etcd_disk_backend_commit_duration_seconds`);
//! a store without a writer of this process exports nothing here.

use std::fmt::Write;

use flotilla_store::WriterStats;

/// The counter families, by their OpenMetrics names (samples add
/// `_total`), as the bench reads them.
pub const COMMITS: &str = "flotilla_store_commits";
pub const WRITES: &str = "flotilla_store_writes";
pub const BUSY_SECONDS: &str = "flotilla_store_writer_busy_seconds";
pub const SYNCS: &str = "flotilla_store_wal_syncs";
pub const SYNC_SECONDS: &str = "flotilla_store_wal_sync_seconds";
pub const PUBLISHER_BUSY_SECONDS: &str = "flotilla_store_publisher_busy_seconds";

/// `exposition` (OpenMetrics text from the embedding process, or empty)
/// with the counters of `stats` added: before its `# EOF`, which ends an
/// OpenMetrics exposition.
pub fn append(exposition: String, stats: &WriterStats) -> String {
    let families = render(stats);
    match exposition.strip_suffix("# EOF\n") {
        Some(body) => format!("{body}{families}# EOF\n"),
        None => exposition + &families,
    }
}

/// The counter families of `stats`.
fn render(stats: &WriterStats) -> String {
    let mut out = String::new();
    let mut counter = |name: &str, help: &str, value: String| {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} counter");
        let _ = writeln!(out, "{name}_total {value}");
    };
    counter(
        COMMITS,
        "Transactions the embedded store's writer committed.",
        stats.commits.to_string(),
    );
    counter(
        WRITES,
        "Writes that took a revision in those transactions.",
        stats.writes.to_string(),
    );
    counter(
        BUSY_SECONDS,
        "Time the writer spent on groups of writes and on compactions; writes arriving meanwhile wait.",
        format!("{:.6}", stats.busy_seconds),
    );
    counter(
        SYNCS,
        "Syncs of the write-ahead log; under load one covers several commits.",
        stats.syncs.to_string(),
    );
    counter(
        SYNC_SECONDS,
        "Time in those syncs, on the writer's thread or the publisher's.",
        format!("{:.6}", stats.sync_seconds),
    );
    counter(
        PUBLISHER_BUSY_SECONDS,
        "Time the publishing thread spent syncing, applying and answering groups the writer handed it under load.",
        format!("{:.6}", stats.publisher_busy_seconds),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats() -> WriterStats {
        WriterStats {
            commits: 3,
            writes: 40,
            busy_seconds: 0.25,
            syncs: 2,
            sync_seconds: 0.125,
            publisher_busy_seconds: 0.5,
        }
    }

    #[test]
    fn renders_each_counter_with_its_help_and_type() {
        let text = render(&stats());
        assert!(
            text.contains(
                "# TYPE flotilla_store_commits counter\nflotilla_store_commits_total 3\n"
            )
        );
        assert!(text.contains("\nflotilla_store_writes_total 40\n"));
        assert!(text.contains("\nflotilla_store_writer_busy_seconds_total 0.250000\n"));
        assert!(text.contains("\nflotilla_store_wal_syncs_total 2\n"));
        assert!(text.contains("\nflotilla_store_wal_sync_seconds_total 0.125000\n"));
        assert!(text.contains("\nflotilla_store_publisher_busy_seconds_total 0.500000\n"));
    }

    #[test]
    fn the_counters_go_before_the_end_of_an_openmetrics_exposition() {
        let text = append("# TYPE a counter\na_total 1\n# EOF\n".into(), &stats());
        assert!(text.starts_with("# TYPE a counter\na_total 1\n# HELP flotilla_store_commits "));
        assert!(text.ends_with("flotilla_store_publisher_busy_seconds_total 0.500000\n# EOF\n"));
        assert_eq!(text.matches("# EOF").count(), 1);
        // Text without an end marker gets them at its end.
        assert!(append(String::new(), &stats()).ends_with("0.500000\n"));
    }
}
