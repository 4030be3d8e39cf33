//! What every benchmark's JSON says besides its figures (the machine, the
//! build, the store, the date, the arguments), and the comparison of a
//! run with an earlier one: `--compare FILE` after a run, and `flotilla
//! bench compare OLD NEW` between two saved runs.
//!
//! A run's JSON is one object: the keys of [`METADATA`] and then the
//! bench's figures. The comparison flattens both objects' numeric leaves
//! to dotted paths (`latency_ms.p99`, `authz[2].read_p50_us`), pairs them
//! by path, and judges each ratio by [`goal`]: whether the figure's name
//! says lower or higher is better.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde_json::{Map, Value, json};

/// The keys a run's JSON has besides its figures; never compared.
pub(crate) const METADATA: [&str; 7] = [
    "bench",
    "flotilla_version",
    "profile",
    "store",
    "date",
    "machine",
    "args",
];

/// A change smaller than this fraction of the figure is called `same`:
/// run-to-run noise on a shared machine is of this order.
pub(crate) const NOISE: f64 = 0.05;

/// `--json` and `--compare FILE`, as most benches take them.
#[derive(clap::Args, Clone, Default)]
pub struct ReportArgs {
    /// Print the results as one JSON object on stdout: the machine, the
    /// build, the arguments and every figure (the lines for people go to
    /// stderr). Save it (`--json > run.json`) to `--compare` later.
    #[arg(long)]
    pub json: bool,
    /// After the run, compare each figure with an earlier run's JSON
    /// (before, now, now/before, better or worse). The file is read
    /// before the run starts.
    #[arg(long, value_name = "FILE", value_parser = Baseline::parse)]
    pub compare: Option<Baseline>,
}

/// `flotilla bench compare`.
#[derive(clap::Args)]
pub struct CompareArgs {
    /// The earlier run's JSON (`flotilla bench ... --json > old.json`).
    #[arg(value_name = "OLD", value_parser = Baseline::parse)]
    before: Baseline,
    /// The later run's JSON.
    #[arg(value_name = "NEW", value_parser = Baseline::parse)]
    now: Baseline,
}

/// `flotilla bench compare OLD NEW`: the same table as `--compare`,
/// without running anything.
pub fn compare(args: CompareArgs) -> anyhow::Result<()> {
    print!(
        "{}",
        table(
            &args.before.report,
            &args.now.report,
            &args.before.path.display().to_string(),
            &args.now.path.display().to_string(),
        )
    );
    Ok(())
}

/// An earlier run's JSON. `--compare` reads it while the arguments are
/// parsed, so that a missing or malformed file stops the bench before it
/// starts rather than after minutes of measuring.
#[derive(Clone, Debug)]
pub struct Baseline {
    pub path: PathBuf,
    pub report: Value,
}

impl Baseline {
    pub fn load(path: &Path) -> anyhow::Result<Baseline> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            anyhow::anyhow!(
                "cannot read {}: {e}; record a run first with `flotilla bench ... --json > {}`",
                path.display(),
                path.display()
            )
        })?;
        let report = parse_report(&text).map_err(|e| {
            anyhow::anyhow!(
                "{} is not a benchmark's JSON ({e:#}); give the output of `flotilla bench ... --json`",
                path.display()
            )
        })?;
        Ok(Baseline {
            path: path.to_path_buf(),
            report,
        })
    }

    pub(crate) fn parse(arg: &str) -> Result<Baseline, String> {
        Baseline::load(Path::new(arg)).map_err(|e| format!("{e:#}"))
    }
}

/// A run's JSON object: the whole text, or else its last line that is
/// one (the output of a run saved with the lines for people before it).
pub(crate) fn parse_report(text: &str) -> anyhow::Result<Value> {
    let whole = match serde_json::from_str::<Value>(text) {
        Ok(v @ Value::Object(_)) => return Ok(v),
        Ok(other) => bail!("it holds a JSON {}, not an object", kind_of(&other)),
        Err(e) => e,
    };
    text.lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<Value>(l.trim()).ok())
        .find(Value::is_object)
        .ok_or_else(|| anyhow::anyhow!("{whole}"))
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// One bench's output: the lines for people (stdout, or stderr under
/// `--json` so that stdout is the JSON alone), the JSON, the comparison.
pub(crate) struct Reporter {
    bench: &'static str,
    json: bool,
    compare: Option<Baseline>,
}

impl Reporter {
    pub(crate) fn new(bench: &'static str, json: bool, compare: Option<Baseline>) -> Reporter {
        Reporter {
            bench,
            json,
            compare,
        }
    }

    pub(crate) fn from_args(bench: &'static str, args: &ReportArgs) -> Reporter {
        Reporter::new(bench, args.json, args.compare.clone())
    }

    /// A line for people.
    pub(crate) fn line(&self, line: impl std::fmt::Display) {
        if self.json {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    }

    /// Whether stdout is for the JSON alone.
    pub(crate) fn json(&self) -> bool {
        self.json
    }

    /// The run's JSON: [`METADATA`], then `figures` (an object's keys, or
    /// else under `results`).
    pub(crate) fn document(&self, store: &str, args: Value, figures: Value) -> Value {
        let mut doc = Map::new();
        doc.insert("bench".into(), json!(self.bench));
        doc.insert("flotilla_version".into(), json!(crate::VERSION));
        doc.insert(
            "profile".into(),
            json!(if cfg!(debug_assertions) {
                "debug"
            } else {
                "release"
            }),
        );
        doc.insert("store".into(), json!(store));
        doc.insert("date".into(), json!(now_rfc3339()));
        doc.insert("machine".into(), machine());
        doc.insert("args".into(), args);
        match figures {
            Value::Object(figures) => {
                for (k, v) in figures {
                    doc.entry(k).or_insert(v);
                }
            }
            other => {
                doc.insert("results".into(), other);
            }
        }
        Value::Object(doc)
    }

    /// After the run: the JSON (under `--json`), then the comparison
    /// (under `--compare`; on stderr under `--json`).
    pub(crate) fn finish(&self, document: &Value) -> anyhow::Result<()> {
        if self.json {
            println!(
                "{}",
                serde_json::to_string(document).context("cannot write the JSON")?
            );
        }
        if let Some(before) = &self.compare {
            let text = table(
                &before.report,
                document,
                &before.path.display().to_string(),
                "this run",
            );
            if self.json {
                eprint!("{text}");
            } else {
                print!("\n{text}");
            }
        }
        Ok(())
    }
}

/// The line every bench prints about where it ran.
pub(crate) fn machine_line() -> String {
    let m = machine();
    let mut line = format!("machine: {} cores", m["cores"]);
    if let Some(host) = m["host_cores"].as_u64() {
        let _ = write!(line, " (of the host's {host})");
    }
    if let Some(model) = m["cpu_model"].as_str() {
        let _ = write!(line, ", {model}");
    }
    if let Some(gib) = m["memory_gib"].as_f64() {
        let _ = write!(line, ", {gib} GiB");
    }
    let _ = write!(line, ", {}", m["arch"].as_str().unwrap_or("?"));
    if let Some(kernel) = m["kernel"].as_str() {
        let _ = write!(line, ", Linux {kernel}");
    }
    let _ = write!(
        line,
        "; flotilla {}, {} build",
        crate::VERSION,
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
    );
    line
}

/// Where the bench runs: the cores it may use (and the host's, when a
/// cgroup or affinity gives it fewer), the CPU, memory, kernel, name.
pub(crate) fn machine() -> Value {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let proc_line = |path: &str| {
        std::fs::read_to_string(path)
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    };
    let mut m = Map::new();
    m.insert("cores".into(), json!(cores));
    if let Some(host) = cpuinfo_processors(&cpuinfo).filter(|n| *n != cores) {
        m.insert("host_cores".into(), json!(host));
    }
    m.insert("cpu_model".into(), json!(cpuinfo_model(&cpuinfo)));
    m.insert("memory_gib".into(), json!(meminfo_gib(&meminfo)));
    m.insert("arch".into(), json!(std::env::consts::ARCH));
    m.insert(
        "kernel".into(),
        json!(proc_line("/proc/sys/kernel/osrelease")),
    );
    m.insert(
        "hostname".into(),
        json!(
            proc_line("/proc/sys/kernel/hostname")
                .or_else(|| std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()))
        ),
    );
    Value::Object(m)
}

/// The processors /proc/cpuinfo lists.
pub(crate) fn cpuinfo_processors(cpuinfo: &str) -> Option<usize> {
    let n = cpuinfo
        .lines()
        .filter(|l| l.split(':').next().map(str::trim) == Some("processor"))
        .count();
    (n > 0).then_some(n)
}

/// The first `model name` of /proc/cpuinfo (x86; most ARM kernels have
/// none), spaces collapsed.
pub(crate) fn cpuinfo_model(cpuinfo: &str) -> Option<String> {
    cpuinfo.lines().find_map(|l| {
        let (key, value) = l.split_once(':')?;
        (key.trim() == "model name")
            .then(|| value.split_whitespace().collect::<Vec<_>>().join(" "))
            .filter(|v| !v.is_empty())
    })
}

/// MemTotal of /proc/meminfo in GiB, to one decimal.
pub(crate) fn meminfo_gib(meminfo: &str) -> Option<f64> {
    let kib: f64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some((kib / 1024.0 / 1024.0 * 10.0).round() / 10.0)
}

fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// Which way a figure should move.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Goal {
    Lower,
    Higher,
    Unknown,
}

/// Which way is better for the figure at `path`, from its name, split
/// into words at `.`, `_`, `[` and `]` (lowercase):
///
/// - higher is better for a rate: the words `per second`, `per sec` or
///   `per s` (`templates_per_second`, `bindings_per_second_of_scheduler_time`),
///   `throughput`, or a word ending in `bps` (`gbps`);
/// - else lower is better for a time, a size, a share of the CPU or a
///   cost relative to a baseline: the last word is a unit of time or
///   size (`seconds`, `ms`, `us`, `ns`, `kib`, `mib`, `gib`, `bytes`), or
///   any word is `latency`, `rss`, `p50`, `p90`, `p95`, `p99`, `p999`,
///   `cpu`, `failed`, `errors` or `over` (`flotilla_over_direct`);
/// - anything else (counts, arguments) has no verdict.
pub(crate) fn goal(path: &str) -> Goal {
    let lower = path.to_ascii_lowercase();
    let words: Vec<&str> = lower
        .split(['.', '_', '[', ']'])
        .filter(|w| !w.is_empty())
        .collect();
    let rate = words
        .windows(2)
        .any(|w| w[0] == "per" && matches!(w[1], "second" | "seconds" | "sec" | "s"))
        || words
            .iter()
            .any(|w| *w == "throughput" || w.ends_with("bps"));
    if rate {
        return Goal::Higher;
    }
    let unit = words.last().is_some_and(|w| {
        matches!(
            *w,
            "seconds" | "ms" | "us" | "ns" | "kib" | "mib" | "gib" | "bytes"
        )
    });
    let cost = words.iter().any(|w| {
        matches!(
            *w,
            "latency"
                | "rss"
                | "p50"
                | "p90"
                | "p95"
                | "p99"
                | "p999"
                | "cpu"
                | "failed"
                | "errors"
                | "over"
        )
    });
    if unit || cost {
        Goal::Lower
    } else {
        Goal::Unknown
    }
}

/// The numeric leaves of a run's JSON by dotted path, in the JSON's
/// order, leaving out [`METADATA`] and the arguments a bench repeats
/// among its figures (a top-level key also in `args`); arrays by index
/// (`rows[0].x`).
pub(crate) fn flatten(report: &Value) -> Vec<(String, f64)> {
    fn walk(prefix: &str, v: &Value, out: &mut Vec<(String, f64)>) {
        match v {
            Value::Number(n) => {
                if let Some(f) = n.as_f64().filter(|f| f.is_finite()) {
                    out.push((prefix.to_string(), f));
                }
            }
            Value::Object(map) => {
                for (k, v) in map {
                    let path = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    walk(&path, v, out);
                }
            }
            Value::Array(items) => {
                for (i, v) in items.iter().enumerate() {
                    walk(&format!("{prefix}[{i}]"), v, out);
                }
            }
            Value::Null | Value::Bool(_) | Value::String(_) => {}
        }
    }
    let mut out = Vec::new();
    match report {
        Value::Object(map) => {
            let args = map.get("args").and_then(Value::as_object);
            for (k, v) in map {
                let argument = args.is_some_and(|a| a.contains_key(k));
                if !METADATA.contains(&k.as_str()) && !argument {
                    walk(k, v, &mut out);
                }
            }
        }
        other => walk("", other, &mut out),
    }
    out
}

/// How a figure moved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    Improvement,
    Regression,
    /// Within [`NOISE`].
    Same,
    /// No goal, or the figure is in one run only.
    None,
}

/// One figure of the comparison.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Row {
    pub(crate) figure: String,
    pub(crate) before: Option<f64>,
    pub(crate) now: Option<f64>,
    pub(crate) goal: Goal,
}

impl Row {
    /// now / before; 1 when both are 0, none when only before is.
    pub(crate) fn ratio(&self) -> Option<f64> {
        let (before, now) = (self.before?, self.now?);
        if before == 0.0 {
            return (now == 0.0).then_some(1.0);
        }
        Some(now / before)
    }

    pub(crate) fn verdict(&self) -> Verdict {
        let (Some(before), Some(now)) = (self.before, self.now) else {
            return Verdict::None;
        };
        if self.goal == Goal::Unknown {
            return Verdict::None;
        }
        let change = now - before;
        if change.abs() <= NOISE * before.abs() {
            return Verdict::Same;
        }
        let up = change > 0.0;
        match (self.goal, up) {
            (Goal::Higher, true) | (Goal::Lower, false) => Verdict::Improvement,
            _ => Verdict::Regression,
        }
    }
}

/// Every numeric figure of either run, paired by path: `now`'s order,
/// then those only `before` has.
pub(crate) fn rows(before: &Value, now: &Value) -> Vec<Row> {
    let before = flatten(before);
    let now = flatten(now);
    let mut rows: Vec<Row> = now
        .iter()
        .map(|(path, v)| Row {
            figure: path.clone(),
            before: before.iter().find(|(p, _)| p == path).map(|(_, b)| *b),
            now: Some(*v),
            goal: goal(path),
        })
        .collect();
    for (path, b) in &before {
        if !now.iter().any(|(p, _)| p == path) {
            rows.push(Row {
                figure: path.clone(),
                before: Some(*b),
                now: None,
                goal: goal(path),
            });
        }
    }
    rows
}

/// Why the ratios may mislead: different machines, stores, build
/// profiles, benches or arguments, or a run that does not say.
pub(crate) fn warnings(before: &Value, now: &Value, before_name: &str) -> Vec<String> {
    let mut out = Vec::new();
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Null => "none".to_string(),
        other => other.to_string(),
    };
    if before["bench"] != now["bench"] && !before["bench"].is_null() {
        out.push(format!(
            "{before_name} is a run of `bench {}`, not `bench {}`: few figures match",
            text(&before["bench"]),
            text(&now["bench"])
        ));
    }
    if before["machine"].is_null() {
        out.push(format!(
            "{before_name} does not say which machine it ran on: the ratios may compare machines rather than builds"
        ));
    } else {
        let differing: Vec<String> = ["cores", "host_cores", "cpu_model", "arch"]
            .iter()
            .filter(|k| before["machine"][**k] != now["machine"][**k])
            .map(|k| {
                format!(
                    "{k} {} -> {}",
                    text(&before["machine"][*k]),
                    text(&now["machine"][*k])
                )
            })
            .collect();
        if !differing.is_empty() {
            out.push(format!(
                "the machines differ ({}): the ratios compare machines as much as builds; compare runs on the same machine",
                differing.join(", ")
            ));
        }
    }
    let store = |v: &Value| {
        if v["store"].is_null() {
            Value::String("embedded".into())
        } else {
            v["store"].clone()
        }
    };
    if store(before) != store(now) {
        out.push(format!(
            "the stores differ ({} -> {}): the ratios compare stores as much as builds",
            text(&store(before)),
            text(&store(now))
        ));
    }
    if !before["profile"].is_null() && before["profile"] != now["profile"] {
        out.push(format!(
            "the builds' profiles differ ({} -> {})",
            text(&before["profile"]),
            text(&now["profile"])
        ));
    }
    if let (Some(b), Some(n)) = (before["args"].as_object(), now["args"].as_object()) {
        let mut keys: Vec<&String> = n.keys().collect();
        keys.extend(b.keys().filter(|k| !n.contains_key(*k)));
        let differing: Vec<String> = keys
            .into_iter()
            .filter(|k| b.get(*k) != n.get(*k))
            .map(|k| {
                let show = |v: Option<&Value>| v.map(text).unwrap_or_else(|| "none".into());
                format!("{k} {} -> {}", show(b.get(k)), show(n.get(k)))
            })
            .collect();
        if !differing.is_empty() {
            out.push(format!(
                "the arguments differ ({}): the runs measured different work",
                differing.join(", ")
            ));
        }
    }
    out
}

/// One run in a line: which build, where, when.
fn describe(label: &str, run: &Value) -> String {
    let field = |k: &str| run[k].as_str().map(str::to_string);
    let mut parts = vec![format!(
        "flotilla {}",
        field("flotilla_version").unwrap_or("(version unknown)".into())
    )];
    parts.extend(field("profile").map(|p| format!("{p} build")));
    parts.extend(field("store").map(|s| format!("{s} store")));
    parts.extend(field("date"));
    if let Some(cores) = run["machine"]["cores"].as_u64() {
        let mut machine = format!("{cores} cores");
        if let Some(model) = run["machine"]["cpu_model"].as_str() {
            let _ = write!(machine, " ({model})");
        }
        parts.push(machine);
    }
    parts.extend(run["machine"]["hostname"].as_str().map(str::to_string));
    format!("{label}: {}", parts.join(", "))
}

/// A number as wide as it needs: integers whole, else about four
/// significant digits.
pub(crate) fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        return format!("{}", v as i64);
    }
    let magnitude = v.abs().log10().floor() as i32;
    let decimals = (3 - magnitude).clamp(0, 9) as usize;
    format!("{v:.decimals$}")
}

/// The comparison of two runs, as printed: which runs, the warnings, and
/// a row per figure.
pub(crate) fn table(before: &Value, now: &Value, before_name: &str, now_name: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}",
        describe(&format!("before ({before_name})"), before)
    );
    let _ = writeln!(out, "{}", describe(&format!("now ({now_name})"), now));
    for w in warnings(before, now, before_name) {
        let _ = writeln!(out, "warning: {w}");
    }
    let rows = rows(before, now);
    if rows.is_empty() {
        let _ = writeln!(out, "no numeric figures to compare");
        return out;
    }
    let cells: Vec<[String; 6]> = rows
        .iter()
        .map(|r| {
            let show = |v: Option<f64>| v.map(number).unwrap_or_else(|| "-".into());
            [
                r.figure.clone(),
                show(r.before),
                show(r.now),
                r.ratio()
                    .map(|x| format!("{x:.2}x"))
                    .unwrap_or_else(|| "-".into()),
                match r.goal {
                    Goal::Lower => "lower",
                    Goal::Higher => "higher",
                    Goal::Unknown => "-",
                }
                .to_string(),
                match (r.verdict(), r.before, r.now) {
                    (Verdict::Improvement, ..) => "improvement",
                    (Verdict::Regression, ..) => "regression",
                    (Verdict::Same, ..) => "same",
                    (Verdict::None, None, _) => "only now",
                    (Verdict::None, _, None) => "only before",
                    (Verdict::None, ..) => "",
                }
                .to_string(),
            ]
        })
        .collect();
    let header = ["figure", "before", "now", "now/before", "better", "verdict"];
    let width = |i: usize| {
        cells
            .iter()
            .map(|c| c[i].chars().count())
            .chain([header[i].len()])
            .max()
            .unwrap_or(0)
    };
    let w: Vec<usize> = (0..6).map(width).collect();
    let line = |c: [&str; 6]| {
        format!(
            "{:<w0$}  {:>w1$}  {:>w2$}  {:>w3$}  {:<w4$}  {}",
            c[0],
            c[1],
            c[2],
            c[3],
            c[4],
            c[5],
            w0 = w[0],
            w1 = w[1],
            w2 = w[2],
            w3 = w[3],
            w4 = w[4],
        )
        .trim_end()
        .to_string()
    };
    let _ = writeln!(out, "{}", line(header));
    for c in &cells {
        let _ = writeln!(
            out,
            "{}",
            line([&c[0], &c[1], &c[2], &c[3], &c[4], &c[5]].map(String::as_str))
        );
    }
    let _ = writeln!(
        out,
        "(better: which way the figure should move, from its name; same: within {:.0}%)",
        NOISE * 100.0
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(figures: Value) -> Value {
        let mut doc = json!({
            "bench": "propagation", "flotilla_version": "0.1.0 (abc1234)",
            "profile": "release", "store": "embedded", "date": "2026-11-21T10:00:00Z",
            "machine": {"cores": 2, "cpu_model": "Example CPU", "arch": "x86_64",
                        "memory_gib": 24.0, "hostname": "ci"},
            "args": {"templates": 1000},
        });
        if let (Some(d), Value::Object(f)) = (doc.as_object_mut(), figures) {
            d.extend(f);
        }
        doc
    }

    #[test]
    fn flattening_follows_objects_and_arrays_and_skips_metadata() {
        let doc = run(json!({
            "templates": 1000, "copies": 40, "kind": "ConfigMap", "restart_seconds": null, "ok": true,
            "latency_ms": {"p50": 12.5, "p99": 20},
            "stages": {"binding": {"count": 3, "mean_ms": 0.5}},
            "authz": [{"mode": "RBAC", "read_p50_us": 200}, {"read_p50_us": 210}],
        }));
        assert_eq!(
            flatten(&doc),
            vec![
                ("copies".to_string(), 40.0),
                ("latency_ms.p50".to_string(), 12.5),
                ("latency_ms.p99".to_string(), 20.0),
                ("stages.binding.count".to_string(), 3.0),
                ("stages.binding.mean_ms".to_string(), 0.5),
                ("authz[0].read_p50_us".to_string(), 200.0),
                ("authz[1].read_p50_us".to_string(), 210.0),
            ]
        );
    }

    #[test]
    fn the_goal_comes_from_the_name() {
        for path in [
            "templates_per_second",
            "bindings_per_second_of_scheduler_time",
            "create.objects_per_second",
            "http.pod_ip.requests_per_s",
            "tunnel_throughput",
            "tcp_gbps",
        ] {
            assert_eq!(goal(path), Goal::Higher, "{path}");
        }
        for path in [
            "create_seconds",
            "latency_ms.p50",
            "latency_ms.max",
            "stages.binding_sync_work_duration_seconds.mean_ms",
            "authz[0].read_p99_us",
            "authz[0].decision_ns",
            "controlplane_peak_rss_mib",
            "rss_mib.peak_max",
            "consumer_rss_kib_per_pod",
            "idle_cpu_percent_of_core",
            "flotilla_over_direct",
            "http.pod_ip.failed",
        ] {
            assert_eq!(goal(path), Goal::Lower, "{path}");
        }
        for path in [
            "copies",
            "templates",
            "scheduled_bindings",
            "stages.binding_sync_work_duration_seconds.count",
            "authz[1].bindings",
            "watch.deliveries",
        ] {
            assert_eq!(goal(path), Goal::Unknown, "{path}");
        }
    }

    #[test]
    fn verdicts_follow_the_goal_with_a_noise_band() {
        let row = |figure: &str, before: Option<f64>, now: Option<f64>| Row {
            figure: figure.into(),
            before,
            now,
            goal: goal(figure),
        };
        let r = row("create_seconds", Some(10.0), Some(8.0));
        assert_eq!((r.ratio(), r.verdict()), (Some(0.8), Verdict::Improvement));
        let r = row("create_seconds", Some(10.0), Some(12.0));
        assert_eq!(r.verdict(), Verdict::Regression);
        let r = row("templates_per_second", Some(100.0), Some(120.0));
        assert_eq!(r.verdict(), Verdict::Improvement);
        let r = row("templates_per_second", Some(100.0), Some(80.0));
        assert_eq!(r.verdict(), Verdict::Regression);
        let r = row("templates_per_second", Some(100.0), Some(104.0));
        assert_eq!(r.verdict(), Verdict::Same);
        let r = row("copies", Some(40.0), Some(80.0));
        assert_eq!((r.ratio(), r.verdict()), (Some(2.0), Verdict::None));
        let r = row("create_seconds", Some(0.0), Some(0.0));
        assert_eq!((r.ratio(), r.verdict()), (Some(1.0), Verdict::Same));
        let r = row("create_seconds", Some(0.0), Some(1.0));
        assert_eq!((r.ratio(), r.verdict()), (None, Verdict::Regression));
        let r = row("create_seconds", None, Some(1.0));
        assert_eq!((r.ratio(), r.verdict()), (None, Verdict::None));
    }

    #[test]
    fn the_table_has_a_row_per_figure_with_ratio_and_verdict() {
        let before = run(json!({"create_seconds": 10.0, "templates_per_second": 100,
                                "copies": 40, "gone_ms": 3}));
        let now = run(json!({"create_seconds": 5.0, "templates_per_second": 50,
                             "copies": 40, "new_ms": 1}));
        let text = table(&before, &now, "old.json", "new.json");
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("before (old.json): flotilla 0.1.0 (abc1234), release build, embedded store, 2026-11-21T10:00:00Z, 2 cores (Example CPU), ci"), "{text}");
        assert!(lines[1].starts_with("now (new.json): "), "{text}");
        assert!(!text.contains("warning"), "{text}");
        let row = |name: &str| {
            lines
                .iter()
                .find(|l| l.starts_with(&format!("{name} ")))
                .map(|l| l.split_whitespace().collect::<Vec<_>>())
                .unwrap_or_default()
        };
        assert_eq!(
            row("create_seconds"),
            ["create_seconds", "10", "5", "0.50x", "lower", "improvement"]
        );
        assert_eq!(
            row("templates_per_second"),
            [
                "templates_per_second",
                "100",
                "50",
                "0.50x",
                "higher",
                "regression"
            ]
        );
        assert_eq!(row("copies"), ["copies", "40", "40", "1.00x", "-"]);
        assert_eq!(
            row("new_ms"),
            ["new_ms", "-", "1", "-", "lower", "only", "now"]
        );
        assert_eq!(
            row("gone_ms"),
            ["gone_ms", "3", "-", "-", "lower", "only", "before"]
        );
        // The header and the rows line up: every ratio ends in one column.
        let header = lines.iter().find(|l| l.starts_with("figure")).unwrap();
        let end = header.find("now/before").unwrap() + "now/before".len();
        for l in lines.iter().filter(|l| l.contains("0.50x")) {
            assert_eq!(l.find("0.50x").unwrap() + "0.50x".len(), end, "{text}");
        }
    }

    #[test]
    fn differing_machines_stores_and_arguments_are_warned_about() {
        let before = run(json!({"create_seconds": 1}));
        let mut now = before.clone();
        now["machine"]["cores"] = json!(16);
        now["store"] = json!("etcd");
        now["args"]["templates"] = json!(200);
        let w = warnings(&before, &now, "old.json");
        assert_eq!(w.len(), 3, "{w:?}");
        assert!(w[0].contains("machines differ (cores 2 -> 16)"), "{w:?}");
        assert!(w[1].contains("stores differ (embedded -> etcd)"), "{w:?}");
        assert!(
            w[2].contains("arguments differ (templates 1000 -> 200)"),
            "{w:?}"
        );
        let old = json!({"create_seconds": 1});
        let w = warnings(&old, &before, "old.json");
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains("old.json does not say which machine"),
            "{w:?}"
        );
    }

    #[test]
    fn a_report_is_the_whole_text_or_its_last_json_line() {
        assert_eq!(parse_report("{\"a\": 1}").unwrap(), json!({"a": 1}));
        assert_eq!(
            parse_report("mode bindings\nRBAC 1\n{\"a\": 2}\n").unwrap(),
            json!({"a": 2})
        );
        let e = parse_report("[1, 2]").unwrap_err();
        assert!(format!("{e:#}").contains("a JSON array, not an object"));
        assert!(parse_report("not json").is_err());
        assert!(parse_report("").is_err());
    }

    #[test]
    fn the_machine_comes_from_proc() {
        let cpuinfo = "processor\t: 0\nmodel name\t: Intel(R)  Xeon(R) CPU @ 2.20GHz\n\nprocessor\t: 1\nmodel name\t: Intel(R)  Xeon(R) CPU @ 2.20GHz\n";
        assert_eq!(cpuinfo_processors(cpuinfo), Some(2));
        assert_eq!(
            cpuinfo_model(cpuinfo).as_deref(),
            Some("Intel(R) Xeon(R) CPU @ 2.20GHz")
        );
        assert_eq!(cpuinfo_model("processor : 0\nBogoMIPS : 50\n"), None);
        assert_eq!(cpuinfo_processors(""), None);
        assert_eq!(
            meminfo_gib("MemTotal:       24634620 kB\nMemFree: 1 kB\n"),
            Some(23.5)
        );
        assert_eq!(meminfo_gib(""), None);
        let m = machine();
        assert!(m["cores"].as_u64().is_some_and(|c| c >= 1), "{m}");
        assert_eq!(m["arch"], std::env::consts::ARCH);
    }

    #[test]
    fn numbers_print_as_wide_as_they_need() {
        assert_eq!(number(40.0), "40");
        assert_eq!(number(12.3456), "12.35");
        assert_eq!(number(1234.56), "1235");
        assert_eq!(number(0.012345), "0.01235");
        assert_eq!(number(-2.5), "-2.500");
    }
}
