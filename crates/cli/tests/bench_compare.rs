//! `flotilla bench compare OLD NEW` and `--compare FILE`: the ratios and
//! verdicts a user reads, and the errors for files that cannot be used;
//! and `flotilla bench store`, the quickest bench that writes such a file.

use std::process::{Command, Output};

fn flotilla(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(args)
        .output()
        .expect("run flotilla")
}

fn run(cores: u64, figures: serde_json::Value) -> serde_json::Value {
    let mut doc = serde_json::json!({
        "bench": "propagation", "flotilla_version": "0.1.0 (abc1234)",
        "profile": "release", "store": "embedded", "date": "2026-11-21T10:00:00Z",
        "machine": {"cores": cores, "cpu_model": "Example CPU", "arch": "x86_64"},
        "args": {"templates": 1000, "members": 2},
    });
    for (k, v) in figures.as_object().expect("figures").clone() {
        doc[k] = v;
    }
    doc
}

/// The words of the table's row for `figure`.
fn row(stdout: &str, figure: &str) -> Vec<String> {
    stdout
        .lines()
        .find(|l| l.split_whitespace().next() == Some(figure))
        .unwrap_or_else(|| panic!("no row {figure} in:\n{stdout}"))
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

#[test]
fn bench_compare_prints_each_figures_ratio_and_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.json"), dir.path().join("b.json"));
    let before = run(
        2,
        serde_json::json!({
            "templates": 1000, "distribution_seconds": 4.0, "templates_per_second": 250.0, "copies": 2000,
            "latency_ms": {"p50": 10.0, "p99": 20.0},
            "controlplane_peak_rss_mib": 100.0,
        }),
    );
    let now = run(
        2,
        serde_json::json!({
            "templates": 1000, "distribution_seconds": 2.0, "templates_per_second": 500.0, "copies": 2000,
            "latency_ms": {"p50": 10.2, "p99": 30.0},
            "controlplane_peak_rss_mib": 150.0,
        }),
    );
    std::fs::write(&a, before.to_string()).unwrap();
    std::fs::write(&b, serde_json::to_string_pretty(&now).unwrap()).unwrap();
    let out = flotilla(&["bench", "compare", a.to_str().unwrap(), b.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!stdout.contains("warning"), "same machine: {stdout}");
    assert_eq!(
        row(&stdout, "distribution_seconds"),
        [
            "distribution_seconds",
            "4",
            "2",
            "0.50x",
            "lower",
            "improvement"
        ]
    );
    assert_eq!(
        row(&stdout, "templates_per_second"),
        [
            "templates_per_second",
            "250",
            "500",
            "2.00x",
            "higher",
            "improvement"
        ]
    );
    assert_eq!(
        row(&stdout, "latency_ms.p50"),
        ["latency_ms.p50", "10", "10.20", "1.02x", "lower", "same"]
    );
    assert_eq!(
        row(&stdout, "latency_ms.p99"),
        ["latency_ms.p99", "20", "30", "1.50x", "lower", "regression"]
    );
    assert_eq!(
        row(&stdout, "controlplane_peak_rss_mib"),
        [
            "controlplane_peak_rss_mib",
            "100",
            "150",
            "1.50x",
            "lower",
            "regression"
        ]
    );
    assert_eq!(
        row(&stdout, "copies"),
        ["copies", "2000", "2000", "1.00x", "-"]
    );
    assert!(
        !stdout.contains("\ntemplates "),
        "arguments are not figures: {stdout}"
    );

    // Another machine: a warning line, and still the table.
    std::fs::write(&b, run(16, serde_json::json!({"copies": 2000})).to_string()).unwrap();
    let out = flotilla(&["bench", "compare", a.to_str().unwrap(), b.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("warning: the machines differ (cores 2 -> 16)")),
        "{stdout}"
    );
    assert_eq!(
        row(&stdout, "distribution_seconds"),
        [
            "distribution_seconds",
            "4",
            "-",
            "-",
            "lower",
            "only",
            "before"
        ]
    );
}

#[test]
fn a_missing_or_malformed_file_is_a_one_line_error_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.json");
    let good = dir.path().join("good.json");
    std::fs::write(&good, run(2, serde_json::json!({"copies": 1})).to_string()).unwrap();
    let error_line = |out: &Output| {
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(!out.status.success(), "{stderr}");
        let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
        assert_eq!(errors.len(), 1, "{stderr}");
        errors[0].to_string()
    };

    let out = flotilla(&[
        "bench",
        "compare",
        missing.to_str().unwrap(),
        good.to_str().unwrap(),
    ]);
    let error = error_line(&out);
    assert!(
        error.contains(&format!("cannot read {}", missing.display())) && error.contains("--json >"),
        "{error}"
    );

    let malformed = dir.path().join("malformed.json");
    std::fs::write(&malformed, "{\"copies\": 1,").unwrap();
    let out = flotilla(&[
        "bench",
        "compare",
        good.to_str().unwrap(),
        malformed.to_str().unwrap(),
    ]);
    let error = error_line(&out);
    assert!(error.contains("is not a benchmark's JSON"), "{error}");

    // A bench given a missing --compare file stops before it starts: no
    // server, no measurement, no line of output.
    let out = flotilla(&[
        "bench",
        "apiserver",
        "--objects",
        "1",
        "--compare",
        missing.to_str().unwrap(),
    ]);
    let error = error_line(&out);
    assert!(error.contains("cannot read"), "{error}");
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// The store's writer alone, both ways it runs, in a JSON that `--compare`
/// reads back: every write counted, each group synced before it was
/// answered, and the writer's own CPU found.
#[test]
fn bench_store_reports_the_writer_both_ways_and_compares_with_an_earlier_run() {
    let args = [
        "bench",
        "store",
        "--writes",
        "400",
        "--concurrency",
        "16",
        "--json",
    ];
    let out = flotilla(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("one JSON object on stdout");
    assert_eq!(report["bench"], "store");
    assert_eq!(report["store"], "embedded");
    for mode in ["pipelined", "writer_syncs"] {
        let f = &report[mode];
        assert_eq!(f["writes"], 400, "{mode}: {f}");
        let commits = f["commits"].as_u64().unwrap_or(0);
        let syncs = f["syncs"].as_u64().unwrap_or(0);
        assert!(
            commits >= 1 && syncs >= 1 && syncs <= commits,
            "{mode}: {f}"
        );
        assert!(
            f["writes_per_second"].as_f64().is_some_and(|w| w > 0.0),
            "{mode}: {f}"
        );
        assert!(
            f["writer_cpu_seconds"].as_f64().is_some_and(|c| c >= 0.0),
            "{mode}: {f}"
        );
        assert!(
            f["latency_ms"]["p99"].as_f64().is_some_and(|l| l > 0.0),
            "{mode}: {f}"
        );
    }
    assert_eq!(
        report["writer_syncs"]["publisher_busy_percent"], 0.0,
        "a writer that syncs each group itself hands nothing over"
    );

    let dir = tempfile::tempdir().unwrap();
    let earlier = dir.path().join("store.json");
    std::fs::write(&earlier, &out.stdout).unwrap();
    let out = flotilla(&[&args[..6], &["--compare", earlier.to_str().unwrap()]].concat());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let writes = row(&stdout, "pipelined.writes");
    assert_eq!(writes[1..4], ["400", "400", "1.00x"], "{stdout}");
    assert!(
        row(&stdout, "writer_syncs.writes_per_second").len() >= 5,
        "{stdout}"
    );
}
