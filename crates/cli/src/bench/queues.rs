//! The control plane's work queues over a bench run, read from the
//! client-go `workqueue_*` metrics the hub exports: how many keys each
//! stage took, how long they waited and how long they were worked on, and
//! the deepest each queue got while the copies travelled. Where a burst
//! queues is where the pipeline is short of workers or of CPU. Beside
//! them, the embedded store's writer (`flotilla_store_*`): the one thread
//! every write of the hub goes through, and how much of the run it was
//! busy.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::{Map, Value, json};

/// How often the queues' depths are read while the copies travel.
const SAMPLE_EVERY: Duration = Duration::from_millis(250);

/// One queue's counters as exported (cumulative since the hub started).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Figures {
    adds: f64,
    retries: f64,
    wait_sum: f64,
    wait_count: f64,
    work_sum: f64,
    work_count: f64,
    depth: f64,
}

type Queues = BTreeMap<String, Figures>;

/// The store writer's counters as exported (cumulative since it opened).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct WriterFigures {
    commits: f64,
    writes: f64,
    busy_seconds: f64,
    syncs: f64,
    sync_seconds: f64,
    publisher_busy_seconds: f64,
}

/// The `flotilla_store_*` counters of an exposition; `None` where the hub
/// has no writer of its own (the etcd backend).
fn parse_writer(text: &str) -> Option<WriterFigures> {
    use flotilla_apiserver::storage_metrics::{
        BUSY_SECONDS, COMMITS, PUBLISHER_BUSY_SECONDS, SYNC_SECONDS, SYNCS, WRITES,
    };
    let mut f = WriterFigures::default();
    let mut found = false;
    for line in text.lines() {
        let Some((series, value)) = line.split_once(' ') else {
            continue;
        };
        let (Some(family), Ok(value)) =
            (series.strip_suffix("_total"), value.trim().parse::<f64>())
        else {
            continue;
        };
        let figure = match family {
            COMMITS => &mut f.commits,
            WRITES => &mut f.writes,
            BUSY_SECONDS => &mut f.busy_seconds,
            SYNCS => &mut f.syncs,
            SYNC_SECONDS => &mut f.sync_seconds,
            PUBLISHER_BUSY_SECONDS => &mut f.publisher_busy_seconds,
            _ => continue,
        };
        *figure = value;
        found = true;
    }
    found.then_some(f)
}

/// The writer between two readings `wall` apart: writes, writes per
/// commit and per sync, and the share of the time the writer was busy,
/// the log was being synced and the publisher was busy.
fn writer_report(before: WriterFigures, after: WriterFigures, wall: Duration) -> Value {
    let wall = wall.as_secs_f64().max(1e-9);
    let commits = after.commits - before.commits;
    let writes = after.writes - before.writes;
    let syncs = after.syncs - before.syncs;
    json!({
        "commits": commits as u64,
        "writes": writes as u64,
        "writes_per_commit": if commits > 0.0 { writes / commits } else { 0.0 },
        "writes_per_second": writes / wall,
        "busy_percent": (after.busy_seconds - before.busy_seconds) / wall * 100.0,
        "syncs": syncs as u64,
        "writes_per_sync": if syncs > 0.0 { writes / syncs } else { 0.0 },
        "sync_percent": (after.sync_seconds - before.sync_seconds) / wall * 100.0,
        "publisher_busy_percent":
            (after.publisher_busy_seconds - before.publisher_busy_seconds) / wall * 100.0,
    })
}

/// The hub's Prometheus text exposition, or `None` if it could not be read.
pub async fn metrics_text(hub: &kube::Client) -> Option<String> {
    let req = http::Request::get("/metrics").body(Vec::new()).ok()?;
    hub.request_text(req).await.ok()
}

/// Every `workqueue_*` series of an exposition, by queue name.
fn parse(text: &str) -> Queues {
    let mut queues = Queues::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("workqueue_") else {
            continue;
        };
        let Some((series, value)) = rest.rsplit_once(' ') else {
            continue;
        };
        let Some((metric, labels)) = series.split_once('{') else {
            continue;
        };
        let (Ok(value), Some(name)) = (value.parse::<f64>(), label(labels, "name")) else {
            continue;
        };
        let f = queues.entry(name.to_string()).or_default();
        match metric {
            "depth" => f.depth = value,
            "adds_total" => f.adds = value,
            "retries_total" => f.retries = value,
            "queue_duration_seconds_sum" => f.wait_sum = value,
            "queue_duration_seconds_count" => f.wait_count = value,
            "work_duration_seconds_sum" => f.work_sum = value,
            "work_duration_seconds_count" => f.work_count = value,
            _ => {}
        }
    }
    queues
}

/// The value of label `key` in a series' `{a="x",b="y"}` (without braces).
fn label<'a>(labels: &'a str, key: &str) -> Option<&'a str> {
    let labels = labels.strip_suffix('}').unwrap_or(labels);
    labels.split(',').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k.trim() == key).then(|| v.trim().trim_matches('"'))
    })
}

/// The pipeline between a start and now: its work queues and its store
/// writer.
pub struct PipelineWatch {
    before: Queues,
    writer_before: Option<WriterFigures>,
    started: std::time::Instant,
    peaks: Arc<Mutex<BTreeMap<String, f64>>>,
    sampler: tokio::task::JoinHandle<()>,
}

impl PipelineWatch {
    /// Reads the counters now and samples the depths until `finish`.
    pub async fn start(hub: &kube::Client) -> PipelineWatch {
        // From before the first reading to after the last: the counters'
        // differences fall within the time they are divided by.
        let started = std::time::Instant::now();
        let text = metrics_text(hub).await.unwrap_or_default();
        let (before, writer_before) = (parse(&text), parse_writer(&text));
        let peaks: Arc<Mutex<BTreeMap<String, f64>>> = Arc::default();
        let sampler = {
            let (hub, peaks) = (hub.clone(), peaks.clone());
            tokio::spawn(async move {
                let mut every = tokio::time::interval(SAMPLE_EVERY);
                loop {
                    every.tick().await;
                    if let Some(text) = metrics_text(&hub).await {
                        let mut peaks = peaks.lock();
                        for (name, f) in parse(&text) {
                            let peak = peaks.entry(name).or_default();
                            *peak = peak.max(f.depth);
                        }
                    }
                }
            })
        };
        PipelineWatch {
            before,
            writer_before,
            started,
            peaks,
            sampler,
        }
    }

    /// Each queue that took keys since the start: its adds and retries,
    /// the mean time a key waited and was worked on, its deepest sample;
    /// and the store writer's figures over the same time (null without).
    pub async fn finish(self, hub: &kube::Client) -> Watched {
        self.sampler.abort();
        let text = metrics_text(hub).await.unwrap_or_default();
        let wall = self.started.elapsed();
        let queues = report(&self.before, &parse(&text), &self.peaks.lock());
        let writer = match (self.writer_before, parse_writer(&text)) {
            (Some(before), Some(after)) => writer_report(before, after, wall),
            _ => Value::Null,
        };
        Watched {
            queues,
            store_writer: writer,
        }
    }
}

/// What [`PipelineWatch::finish`] found, as the bench's JSON holds it.
pub struct Watched {
    pub queues: Value,
    pub store_writer: Value,
}

impl Drop for PipelineWatch {
    fn drop(&mut self) {
        self.sampler.abort();
    }
}

fn report(before: &Queues, after: &Queues, peaks: &BTreeMap<String, f64>) -> Value {
    let mean_ms = |sum: f64, count: f64| {
        if count > 0.0 {
            sum / count * 1000.0
        } else {
            0.0
        }
    };
    let mut out = Map::new();
    for (name, a) in after {
        let b = before.get(name).copied().unwrap_or_default();
        let adds = a.adds - b.adds;
        if adds <= 0.0 {
            continue;
        }
        out.insert(
            name.clone(),
            json!({
                "adds": adds,
                "retries": a.retries - b.retries,
                "mean_wait_ms": mean_ms(a.wait_sum - b.wait_sum, a.wait_count - b.wait_count),
                "mean_work_ms": mean_ms(a.work_sum - b.work_sum, a.work_count - b.work_count),
                "peak_depth": peaks.get(name).copied().unwrap_or(0.0).max(a.depth),
            }),
        );
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXPOSITION: &str = r#"# HELP workqueue_depth Current depth of workqueue.
# TYPE workqueue_depth gauge
workqueue_depth{name="scheduler-queue"} 7
workqueue_depth{name="execution-controller"} 0
workqueue_adds_total{name="scheduler-queue"} 120
workqueue_adds_total{name="execution-controller"} 40
workqueue_retries_total{name="scheduler-queue"} 2
workqueue_queue_duration_seconds_sum{name="scheduler-queue"} 3.0
workqueue_queue_duration_seconds_count{name="scheduler-queue"} 100
workqueue_queue_duration_seconds_bucket{le="0.1",name="scheduler-queue"} 90
workqueue_work_duration_seconds_sum{name="scheduler-queue"} 1.0
workqueue_work_duration_seconds_count{name="scheduler-queue"} 100
karmada_scheduler_e2e_scheduling_duration_seconds_count{result="success"} 100
"#;

    #[test]
    fn reads_the_store_writer_and_reports_its_share_of_the_time() {
        let before = parse_writer(
            "# TYPE flotilla_store_commits counter\nflotilla_store_commits_total 10\n\
             flotilla_store_writes_total 100\nflotilla_store_writer_busy_seconds_total 1.5\n\
             flotilla_store_wal_syncs_total 5\nflotilla_store_wal_sync_seconds_total 0.5\n\
             flotilla_store_publisher_busy_seconds_total 0.25\n# EOF\n",
        )
        .expect("the writer's counters");
        let after = WriterFigures {
            commits: 20.0,
            writes: 600.0,
            busy_seconds: 3.5,
            syncs: 10.0,
            sync_seconds: 1.5,
            publisher_busy_seconds: 1.25,
        };
        let r = writer_report(before, after, Duration::from_secs(4));
        assert_eq!(r["commits"], 10);
        assert_eq!(r["writes_per_commit"], 50.0);
        assert_eq!(r["writes_per_second"], 125.0);
        assert_eq!(r["busy_percent"], 50.0);
        assert_eq!(r["syncs"], 5);
        assert_eq!(r["writes_per_sync"], 100.0);
        assert_eq!(r["sync_percent"], 25.0);
        assert_eq!(r["publisher_busy_percent"], 25.0);
        assert_eq!(
            parse_writer(EXPOSITION),
            None,
            "no writer without its counters"
        );
        assert_eq!(
            parse_writer("flotilla_store_other_total 3\n"),
            None,
            "a series of another name is not the writer's"
        );
    }

    #[test]
    fn reads_each_queue_by_name_and_skips_buckets_and_other_metrics() {
        let q = parse(EXPOSITION);
        assert_eq!(q.len(), 2);
        let s = q["scheduler-queue"];
        assert_eq!((s.depth, s.adds, s.retries), (7.0, 120.0, 2.0));
        assert_eq!((s.wait_sum, s.wait_count), (3.0, 100.0));
        assert_eq!((s.work_sum, s.work_count), (1.0, 100.0));
        assert_eq!(q["execution-controller"].adds, 40.0);
    }

    #[test]
    fn reports_what_happened_between_two_readings() {
        let before = parse(EXPOSITION);
        let mut after = before.clone();
        let s = after.get_mut("scheduler-queue").expect("parsed");
        s.adds += 10.0;
        s.wait_sum += 0.5;
        s.wait_count += 10.0;
        s.work_sum += 0.2;
        s.work_count += 10.0;
        s.depth = 0.0;
        let peaks = BTreeMap::from([("scheduler-queue".to_string(), 9.0)]);
        let r = report(&before, &after, &peaks);
        // The execution controller took no key in between.
        assert_eq!(r.as_object().map(|o| o.len()), Some(1));
        let s = &r["scheduler-queue"];
        assert_eq!(s["adds"], 10.0);
        assert_eq!(s["retries"], 0.0);
        assert!((s["mean_wait_ms"].as_f64().unwrap_or(0.0) - 50.0).abs() < 1e-9);
        assert!((s["mean_work_ms"].as_f64().unwrap_or(0.0) - 20.0).abs() < 1e-9);
        assert_eq!(s["peak_depth"], 9.0);
    }
}
