//! `flotilla chaos` as CI runs it on every change: a short run with a
//! fixed seed, the hub, members, agent and `up` itself killed, stopped
//! and continued under load (templates through the hub, pods offloaded
//! from member1 to member2 through a peering), every invariant holding once it converges;
//! with two hub replicas also the other replica and the etcd; with the
//! netns runtime also the gateways killed and the underlay cut, and
//! nothing of the fleet left on the host after it.

mod common;

use std::path::Path;
use std::process::Command;

fn chaos(args: &[&str], json: &Path) -> (bool, String, serde_json::Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .arg("chaos")
        .args(args)
        .arg("--json")
        .arg(json)
        .output()
        .expect("run flotilla chaos");
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let summary = std::fs::read(json)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    (out.status.success(), printed, summary)
}

fn targets(summary: &serde_json::Value) -> Vec<String> {
    summary["faults"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f["target"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn a_short_seeded_chaos_run_loses_nothing_and_converges() {
    let tmp = tempfile::tempdir().unwrap();
    let json = tmp.path().join("chaos.json");
    let (ok, printed, summary) = chaos(
        &["--seed", "1", "--duration", "45s", "--members", "3"],
        &json,
    );
    assert!(ok, "{printed}");
    assert_eq!(summary["violations"], serde_json::json!([]), "{printed}");
    assert!(summary["convergedAfterSeconds"].is_number(), "{printed}");
    assert!(
        summary["acknowledgedWrites"].as_u64().unwrap_or(0) > 100,
        "{printed}"
    );
    // member1 borrowed member2's capacity: pods offloaded under the faults.
    assert!(
        summary["offloadedPods"].as_u64().unwrap_or(0) > 5,
        "{printed}"
    );
    let hit = targets(&summary);
    assert!(hit.len() >= 8, "{printed}");
    for t in ["hub", "up", "agent of member3"] {
        assert!(hit.iter().any(|h| h == t), "{t} never hit:\n{printed}");
    }
    assert!(hit.iter().any(|h| h.starts_with("member ")), "{printed}");
    let actions: Vec<&str> = summary["faults"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f["action"].as_str())
        .collect();
    assert!(actions.contains(&"SIGKILL"), "{printed}");
    assert!(
        actions.iter().any(|a| a.starts_with("SIGSTOP")),
        "{printed}"
    );
    // What it prints: the faults, the convergence, the verdict.
    common::assert_has(
        &printed,
        &[
            "seed 1,",
            "member1 peered with member2",
            "SIGKILL",
            "converged",
            "violations: 0",
        ],
    );
}

/// Two hub replicas on a local etcd: the replicas and the etcd member
/// killed and stopped too, the load moving to the replica that answers.
#[test]
fn a_chaos_run_on_two_hub_replicas_and_etcd_loses_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let json = tmp.path().join("chaos.json");
    let (ok, printed, summary) = chaos(
        &["--hub-replicas", "2", "--seed", "8", "--duration", "40s"],
        &json,
    );
    assert!(ok, "{printed}");
    assert_eq!(summary["violations"], serde_json::json!([]), "{printed}");
    let hit = targets(&summary);
    for t in ["etcd", "hub", "hub replica 2", "up"] {
        assert!(hit.iter().any(|h| h == t), "{t} never hit:\n{printed}");
    }
}

#[test]
fn a_netns_chaos_run_cuts_the_underlay_and_leaves_nothing_behind() {
    if !common::can_run_netns() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("fleet");
    let json = tmp.path().join("chaos.json");
    let (ok, printed, summary) = chaos(
        &[
            "--runtime",
            "netns",
            "--members",
            "2",
            "--seed",
            "11",
            "--duration",
            "30s",
            "--data-dir",
            dir.to_str().unwrap(),
        ],
        &json,
    );
    assert!(ok, "{printed}");
    assert_eq!(summary["violations"], serde_json::json!([]), "{printed}");
    let hit = targets(&summary);
    assert!(
        hit.iter().any(|h| h.starts_with("gateways of")),
        "{printed}"
    );
    assert!(hit.iter().any(|h| h == "underlay"), "{printed}");
    // The fleet stopped at the end: none of its namespaces or processes.
    let mut prefixes: Vec<String> = ["member1", "member2"]
        .iter()
        .filter_map(|m| std::fs::read_to_string(dir.join(m).join("netns-prefix")).ok())
        .collect();
    let shape: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("fleet.json")).unwrap()).unwrap();
    prefixes.push(shape["underlay"].as_str().unwrap().to_string());
    assert_eq!(prefixes.len(), 3);
    let left: Vec<String> = std::fs::read_dir("/run/netns")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| prefixes.iter().any(|p| n.starts_with(p.as_str())))
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(left, Vec::<String>::new(), "{printed}");
}
