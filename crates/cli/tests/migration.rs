//! Stateful workloads moving between members with their data:
//! `flotilla migrate` backs a StatefulSet's volumes up in the member it
//! runs in, restores them in another (both sharing a storage location),
//! switches the workload there and waits for it; its pods start only once
//! their data is back.

mod common;

use std::time::Duration;

use common::fleet::{Fleet, SHORT_THRESHOLDS, jsonpath};
use common::{Server, assert_has, can_run_netns, flotilla, wait_for};

const WAIT: Duration = Duration::from_secs(90);

fn location(dir: &std::path::Path) -> String {
    format!(
        r#"
apiVersion: velero.io/v1
kind: BackupStorageLocation
metadata: {{name: default, namespace: velero}}
spec:
  provider: filesystem
  objectStorage: {{bucket: velero, prefix: fleet}}
  config: {{path: "{}"}}
  default: true
"#,
        dir.display()
    )
}

/// A StatefulSet whose pods note, as they start, what their volume held
/// then: a pod started before its data came back would note nothing.
const DB: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: ledger}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: ledger}
spec:
  serviceName: db
  replicas: 2
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      containers:
      - name: db
        image: busybox:1.36
        command: [sh, -c, 'cat /data/records > /data/seen-at-start; exec sleep 3600']
        volumeMounts: [{name: data, mountPath: /data}]
  volumeClaimTemplates:
  - metadata: {name: data}
    spec:
      accessModes: [ReadWriteOnce]
      resources: {requests: {storage: 1Gi}}
---
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata: {name: db, namespace: ledger}
spec:
  resourceSelectors:
  - {apiVersion: apps/v1, kind: StatefulSet, name: db}
  placement:
    clusterAffinity: {clusterNames: [east]}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: ledger}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: nginx}]
---
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata: {name: everything-else, namespace: ledger}
spec:
  resourceSelectors:
  - {apiVersion: apps/v1, kind: Deployment}
  - {apiVersion: v1, kind: ConfigMap}
  placement:
    clusterAffinity: {clusterNames: [east]}
"#;

fn sha256(m: &Server, pod: &str, file: &str) -> String {
    m.ok(&["exec", "-n", "ledger", pod, "--", "sha256sum", file])
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn migrate_moves_a_statefulset_with_every_byte_of_its_volumes() {
    if !can_run_netns() {
        return;
    }
    let storage = tempfile::tempdir().expect("tempdir");
    let mut fleet = Fleet {
        hub: Server::controlplane(&SHORT_THRESHOLDS),
        members: Vec::new(),
    };
    for name in ["east", "west"] {
        let m = Server::netns_member(&format!("mig-{name}"), &["--nodes", "1"]);
        fleet.members.push((name.to_string(), m));
        fleet.join(name, name);
    }
    for name in ["east", "west"] {
        fleet.wait_ready(name);
        let m = fleet.member(name);
        wait_for(WAIT, "Velero's kinds served", || {
            m.kubectl(&["get", "bsl", "-n", "velero"]).status.success()
        });
        m.ok_stdin(&["apply", "-f", "-"], &location(storage.path()));
        wait_for(WAIT, "the location Available", || {
            jsonpath(
                m,
                &["get", "bsl", "default", "-n", "velero"],
                "{.status.phase}",
            ) == "Available"
        });
    }
    fleet.apply(DB);
    let (east, west) = (fleet.member("east"), fleet.member("west"));
    wait_for(WAIT, "db ready in east", || {
        jsonpath(
            east,
            &["get", "sts", "db", "-n", "ledger"],
            "{.status.readyReplicas}",
        ) == "2"
    });
    // Each pod writes its own records.
    let mut sums = Vec::new();
    for pod in ["db-0", "db-1"] {
        east.ok(&[
            "exec",
            "-n",
            "ledger",
            pod,
            "--",
            "sh",
            "-c",
            "head -c 300000 /dev/urandom > /data/records",
        ]);
        sums.push(sha256(east, pod, "/data/records"));
    }
    let hub = fleet.hub.kubeconfig.to_str().unwrap().to_string();

    // What migrate refuses, before anything is made.
    let shared = flotilla(&[
        "migrate",
        "deploy/web",
        "--to",
        "west",
        "-n",
        "ledger",
        "--kubeconfig",
        &hub,
    ]);
    assert!(!shared.status.success());
    assert_has(
        &String::from_utf8_lossy(&shared.stderr),
        &["PropagationPolicy ledger/everything-else also places other resources"],
    );
    let same = flotilla(&[
        "migrate",
        "sts/db",
        "--to",
        "east",
        "-n",
        "ledger",
        "--kubeconfig",
        &hub,
    ]);
    assert_has(
        &String::from_utf8_lossy(&same.stderr),
        &["StatefulSet ledger/db already runs in east"],
    );
    let nowhere = flotilla(&[
        "migrate",
        "sts/db",
        "--to",
        "north",
        "-n",
        "ledger",
        "--kubeconfig",
        &hub,
    ]);
    assert_has(
        &String::from_utf8_lossy(&nowhere.stderr),
        &["no cluster \"north\""],
    );

    let moved = flotilla(&[
        "migrate",
        "sts/db",
        "--to",
        "west",
        "-n",
        "ledger",
        "--kubeconfig",
        &hub,
        "--timeout",
        "90s",
    ]);
    let out = String::from_utf8_lossy(&moved.stdout);
    assert!(
        moved.status.success(),
        "migrate failed: {}\n{out}\n---- west ----\n{}",
        String::from_utf8_lossy(&moved.stderr),
        west.log()
    );
    assert_has(
        &out,
        &[
            "[1/5] backing up ledger/db StatefulSet's pods, claims and volume data in east",
            "[3/5] restoring the claims in west",
            "[4/5] moving ledger/db StatefulSet: PropagationPolicy db now places it in west",
            "migrated ledger/db StatefulSet from east to west",
        ],
    );
    // Every byte is in the new cluster, and was there before the pods
    // started.
    wait_for(WAIT, "db ready in west", || {
        jsonpath(
            west,
            &["get", "sts", "db", "-n", "ledger"],
            "{.status.readyReplicas}",
        ) == "2"
    });
    for (pod, sum) in ["db-0", "db-1"].iter().zip(&sums) {
        assert_eq!(&sha256(west, pod, "/data/records"), sum, "{pod}'s records");
        assert_eq!(
            &sha256(west, pod, "/data/seen-at-start"),
            sum,
            "{pod} did not find its data when it started:\n{}\n{}",
            west.ok(&["get", "events", "-n", "ledger"]),
            west.ok(&["logs", "-n", "ledger", pod]),
        );
    }
    assert_has(
        &west.ok(&["get", "pvc", "-n", "ledger"]),
        &["data-db-0", "data-db-1", "Bound"],
    );
    // And the workload left the old one; the policy says where it is.
    wait_for(WAIT, "db gone from east", || {
        !east
            .kubectl(&["get", "sts", "db", "-n", "ledger"])
            .status
            .success()
    });
    assert_eq!(
        fleet.jsonpath_hub(
            &["get", "pp", "db", "-n", "ledger"],
            "{.spec.placement.clusterAffinity.clusterNames}"
        ),
        r#"["west"]"#
    );
}
