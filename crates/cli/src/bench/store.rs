//! `flotilla bench store`: the embedded store's write path alone, through
//! the `Store` contract in this process (no HTTP, no encoding): how many
//! writes a second its one writer commits when writers wait on it, with
//! committed groups synced and answered by a publishing thread while the
//! writer writes the next (once writes wait behind a group, as the store
//! runs on few cores; also a group of many writes whatever waits, as it
//! runs with cores to spare) and with the writer doing it itself (as it
//! did before 2026-11-28). On a machine with cores to spare this is the
//! bound of a burst through the control plane (the writer was busy 97–99%
//! of one on 16 cores); the propagation bench shows how much of it a
//! burst uses.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use flotilla_store::{PIPELINE_GROUPS_FROM, SqliteOptions, SqliteStore, Store, WriterStats};
use serde_json::{Value, json};

#[derive(clap::Args)]
pub struct StoreArgs {
    /// Writes per measurement: half creates, half updates of what was
    /// created (a Work's create, then its status).
    #[arg(long, default_value_t = 100_000)]
    writes: usize,
    /// Writers at once.
    #[arg(long, default_value_t = 256)]
    concurrency: usize,
    /// Bytes of each value (a Work of one ConfigMap is about 1,800).
    #[arg(long, default_value_t = 1_800)]
    value_bytes: usize,
    #[command(flatten)]
    report: crate::bench::report::ReportArgs,
}

/// The ways the writer is measured, as (`pipeline_from`,
/// `pipeline_groups_from`): its groups handed to the publishing thread
/// once two writes wait (as the store runs on up to
/// [`flotilla_store::PIPELINE_GROUPS_CORES`] cores); also a group of
/// [`PIPELINE_GROUPS_FROM`] writes or more whatever waits (as it runs on
/// more); or synced and answered by the writer itself whatever waits.
const MODES: [(&str, usize, usize); 3] = [
    ("pipelined", 2, usize::MAX),
    ("pipelined_bursts", 2, PIPELINE_GROUPS_FROM),
    ("writer_syncs", usize::MAX, usize::MAX),
];

pub async fn run(args: StoreArgs) -> anyhow::Result<()> {
    let out = crate::bench::report::Reporter::from_args("store", &args.report);
    out.line(crate::bench::report::machine_line());
    let mut figures = serde_json::Map::new();
    for (mode, pipeline_from, pipeline_groups_from) in MODES {
        let figure = measure(&args, (pipeline_from, pipeline_groups_from)).await?;
        out.line(format!(
            "{mode}: {} writes in {:.2} s, {:.0}/s; {:.1} a commit, {:.1} a sync; writer busy {:.0}% ({:.1} µs of its CPU a write), publisher busy {:.0}%, syncing {:.0}%; latency p50 {:.2} ms, p99 {:.2} ms",
            figure["writes"],
            figure["seconds"].as_f64().unwrap_or(0.0),
            figure["writes_per_second"].as_f64().unwrap_or(0.0),
            figure["writes_per_commit"].as_f64().unwrap_or(0.0),
            figure["writes_per_sync"].as_f64().unwrap_or(0.0),
            figure["writer_busy_percent"].as_f64().unwrap_or(0.0),
            figure["writer_cpu_us_per_write"].as_f64().unwrap_or(0.0),
            figure["publisher_busy_percent"].as_f64().unwrap_or(0.0),
            figure["sync_percent"].as_f64().unwrap_or(0.0),
            figure["latency_ms"]["p50"].as_f64().unwrap_or(0.0),
            figure["latency_ms"]["p99"].as_f64().unwrap_or(0.0),
        ));
        figures.insert(mode.to_string(), figure);
    }
    let report = out.document(
        "embedded",
        json!({
            "writes": args.writes,
            "concurrency": args.concurrency,
            "value_bytes": args.value_bytes,
        }),
        Value::Object(figures),
    );
    out.finish(&report)
}

/// One measurement on a fresh store in a temporary directory.
async fn measure(
    args: &StoreArgs,
    (pipeline_from, pipeline_groups_from): (usize, usize),
) -> anyhow::Result<Value> {
    let dir = tempfile::tempdir().context("cannot make a temporary directory")?;
    let store = SqliteStore::open(
        dir.path(),
        SqliteOptions {
            compaction_interval: None,
            pipeline_from,
            pipeline_groups_from,
            ..SqliteOptions::default()
        },
    )
    .context("cannot open a store in a temporary directory")?;
    let concurrency = args.concurrency.max(1);
    let pairs = (args.writes / 2).max(1);
    let before = store.writer_stats().unwrap_or_default();
    let threads_before = store_threads_cpu();
    let started = Instant::now();
    let mut writers = tokio::task::JoinSet::new();
    for w in 0..concurrency {
        let store = store.clone();
        let mine: Vec<usize> = (w..pairs).step_by(concurrency).collect();
        let value_bytes = args.value_bytes;
        writers.spawn(async move { write_pairs(&*store, &mine, value_bytes).await });
    }
    let mut latencies = Vec::with_capacity(pairs * 2);
    while let Some(done) = writers.join_next().await {
        latencies.extend(done.context("a writer task failed")??);
    }
    let wall = started.elapsed();
    let after = store.writer_stats().unwrap_or_default();
    let mut figures = figures(before, after, wall, latencies);
    // The CPU the store's threads used: the writer's bounds its rate on a
    // machine with cores to spare, whatever else runs on this one.
    let used = |name: &str| -> f64 {
        store_threads_cpu()
            .into_iter()
            .filter(|((thread, _), _)| thread == name)
            .map(|(id, after)| after - threads_before.get(&id).copied().unwrap_or(0.0))
            .sum()
    };
    let writes = figures["writes"].as_f64().unwrap_or(0.0).max(1.0);
    let writer = used("store-writer");
    let publisher = used("store-publisher");
    figures["writer_cpu_seconds"] = json!(writer);
    figures["publisher_cpu_seconds"] = json!(publisher);
    figures["writer_cpu_us_per_write"] = json!(writer / writes * 1e6);
    Ok(figures)
}

/// CPU seconds of each of this process's threads, by name and id.
fn store_threads_cpu() -> HashMap<(String, String), f64> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return HashMap::new();
    };
    tasks
        .filter_map(|task| {
            let path = task.ok()?.path();
            let name = std::fs::read_to_string(path.join("comm")).ok()?;
            let id = path.file_name()?.to_string_lossy().into_owned();
            let cpu = crate::bench::member::stat_cpu_seconds(&path.join("stat").to_string_lossy());
            Some(((name.trim().to_string(), id), cpu))
        })
        .collect()
}

/// Creates each key of `indices`, then updates it from what the create
/// returned; each write's latency.
async fn write_pairs(
    store: &dyn Store,
    indices: &[usize],
    value_bytes: usize,
) -> anyhow::Result<Vec<Duration>> {
    let mut latencies = Vec::with_capacity(indices.len() * 2);
    for i in indices {
        let key = format!("/registry/work.karmada.io/works/bench/w-{i:08}");
        let started = Instant::now();
        let created = store
            .create(&key, value(&key, "created", value_bytes))
            .await?;
        latencies.push(started.elapsed());
        let started = Instant::now();
        store
            .update_from(&created, value(&key, "applied", value_bytes))
            .await?;
        latencies.push(started.elapsed());
    }
    Ok(latencies)
}

/// A Work of about `bytes` bytes, shaped as the control plane writes
/// them: the same keys and labels as every other, a uid, names and times
/// of its own, its ConfigMap's payload words of its own (text, not
/// repeated bytes: values are kept compressed, and a payload of one
/// repeated byte would flatter that), and a status once applied.
fn value(key: &str, state: &str, bytes: usize) -> Bytes {
    let i = key
        .rsplit('-')
        .next()
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or(0);
    let uid = format!(
        "{:08x}-{:04x}-4ae0-a5f6-{:012x}",
        (i * 7919) as u32,
        i % 65536,
        i * 104_729
    );
    let status = if state == "applied" {
        format!(
            r#","status":{{"conditions":[{{"type":"Applied","status":"True","reason":"AppliedSuccessful","message":"Manifest has been successfully applied","lastTransitionTime":"2026-11-28T12:{:02}:{:02}Z"}}],"manifestStatuses":[{{"identifier":{{"ordinal":0,"group":"","version":"v1","kind":"ConfigMap","resource":"configmaps","namespace":"bench","name":"t{i:08}"}},"health":"Healthy"}}]}}"#,
            i % 60,
            (i * 7) % 60
        )
    } else {
        String::new()
    };
    let head = format!(
        r#"{{"apiVersion":"work.karmada.io/v1alpha1","kind":"Work","metadata":{{"name":"t{i:08}-54b9c8b48d","namespace":"karmada-es-member-{}","uid":"{uid}","creationTimestamp":"2026-11-28T12:{:02}:{:02}Z","labels":{{"resourcebinding.karmada.io/permanent-id":"{uid}","work.karmada.io/permanent-id":"{uid}"}},"annotations":{{"resourcebinding.karmada.io/name":"t{i:08}-configmap","resourcebinding.karmada.io/namespace":"bench"}},"finalizers":["karmada.io/execution-controller"]}},"spec":{{"workload":{{"manifests":[{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"t{i:08}","namespace":"bench"}},"data":{{"index":"{i}","payload":""#,
        i % 100,
        i % 60,
        (i * 13) % 60
    );
    let tail = format!(r#""}}}}]}}}}{status}}}"#);
    const WORDS: [&str; 16] = [
        "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
        "juliett", "kilo", "lima", "mike", "november", "oscar", "papa",
    ];
    let mut payload = String::new();
    let mut x = (i + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    while head.len() + payload.len() + tail.len() < bytes {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        payload.push_str(WORDS[(x % 16) as usize]);
        payload.push(' ');
    }
    Bytes::from(format!("{head}{payload}{tail}"))
}

fn figures(
    before: WriterStats,
    after: WriterStats,
    wall: Duration,
    mut latencies: Vec<Duration>,
) -> Value {
    let seconds = wall.as_secs_f64().max(1e-9);
    let writes = after.writes - before.writes;
    let commits = after.commits - before.commits;
    let syncs = after.syncs - before.syncs;
    let per = |n: u64, d: u64| if d > 0 { n as f64 / d as f64 } else { 0.0 };
    let share = |a: f64, b: f64| (a - b) / seconds * 100.0;
    latencies.sort_unstable();
    let at = |q: f64| crate::bench::harness::percentile(&latencies, q).as_secs_f64() * 1000.0;
    json!({
        "writes": writes,
        "seconds": seconds,
        "writes_per_second": writes as f64 / seconds,
        "commits": commits,
        "writes_per_commit": per(writes, commits),
        "syncs": syncs,
        "writes_per_sync": per(writes, syncs),
        "writer_busy_percent": share(after.busy_seconds, before.busy_seconds),
        "publisher_busy_percent": share(after.publisher_busy_seconds, before.publisher_busy_seconds),
        "sync_percent": share(after.sync_seconds, before.sync_seconds),
        "latency_ms": {"p50": at(0.5), "p99": at(0.99)},
    })
}

#[cfg(test)]
mod tests {
    use super::value;

    /// The bench writes Works a client would accept: JSON, about the size
    /// asked for, with a status once applied, and each its own.
    #[test]
    fn values_are_works_of_about_the_size_asked() {
        let key = |i: u32| format!("/registry/work.karmada.io/works/bench/w-{i:08}");
        for state in ["created", "applied"] {
            let v = value(&key(42), state, 1_800);
            let work: serde_json::Value = serde_json::from_slice(&v).expect("JSON");
            assert_eq!(work["kind"], "Work");
            assert_eq!(work["status"].is_object(), state == "applied");
            assert!((1_800..1_900).contains(&v.len()), "{} bytes", v.len());
        }
        assert_ne!(
            value(&key(1), "created", 1_800)[..],
            value(&key(2), "created", 1_800)[..]
        );
    }
}
