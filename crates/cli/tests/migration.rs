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

/// A hub with two netns members, east and west, whose Velero servers
/// share a storage location in `storage`.
fn netns_fleet(storage: &std::path::Path, prefix: &str) -> Fleet {
    let mut fleet = Fleet {
        hub: Server::controlplane(&SHORT_THRESHOLDS),
        members: Vec::new(),
    };
    for name in ["east", "west"] {
        let m = Server::netns_member(&format!("{prefix}-{name}"), &["--nodes", "1"]);
        fleet.members.push((name.to_string(), m));
        fleet.join(name, name);
    }
    for name in ["east", "west"] {
        fleet.wait_ready(name);
        let m = fleet.member(name);
        wait_for(WAIT, "Velero's kinds served", || {
            m.kubectl(&["get", "bsl", "-n", "velero"]).status.success()
        });
        m.ok_stdin(&["apply", "-f", "-"], &common::velero_location(storage));
        wait_for(WAIT, "the location Available", || {
            jsonpath(
                m,
                &["get", "bsl", "default", "-n", "velero"],
                "{.status.phase}",
            ) == "Available"
        });
    }
    fleet
}

/// `flotilla migrate` against the fleet's hub.
fn migrate(fleet: &Fleet, args: &[&str]) -> std::process::Output {
    let hub = fleet.hub.kubeconfig.to_str().unwrap_or_default();
    flotilla(&[&["migrate"], args, &["-n", "ledger", "--kubeconfig", hub]].concat())
}

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
    let fleet = netns_fleet(storage.path(), "mig");
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

    // What migrate refuses, before anything is made.
    let shared = migrate(&fleet, &["deploy/web", "--to", "west"]);
    assert!(!shared.status.success());
    assert_has(
        &String::from_utf8_lossy(&shared.stderr),
        &["PropagationPolicy ledger/everything-else also places other resources"],
    );
    let same = migrate(&fleet, &["sts/db", "--to", "east"]);
    assert_has(
        &String::from_utf8_lossy(&same.stderr),
        &["StatefulSet ledger/db already runs in east"],
    );
    let nowhere = migrate(&fleet, &["sts/db", "--to", "north"]);
    assert_has(
        &String::from_utf8_lossy(&nowhere.stderr),
        &["no cluster \"north\""],
    );

    let moved = migrate(&fleet, &["sts/db", "--to", "west", "--timeout", "90s"]);
    let out = String::from_utf8_lossy(&moved.stdout);
    eprintln!("{out}");
    assert!(
        moved.status.success(),
        "migrate failed: {}\n{out}\n---- west ----\n{}",
        String::from_utf8_lossy(&moved.stderr),
        west.log()
    );
    assert_has(
        &out,
        &[
            "[1/5] backing up the pods, claims and volume data of StatefulSet ledger/db in east",
            "[3/5] restoring the claims in west",
            "[4/5] moving StatefulSet ledger/db: PropagationPolicy db now places it in west",
            "migrated StatefulSet ledger/db from east to west",
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

/// A one-replica store that keeps what is PUT to it in its volume and
/// answers each write with the SHA-256 of what it stored.
const VAULT: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: vault}
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: db
  namespace: vault
  annotations: {backup.flotilla.io/migrate-data: "true"}
spec:
  serviceName: db
  replicas: 1
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      containers:
      - name: db
        image: python:3.12-slim
        command:
        - python3
        - -c
        - |
          import hashlib, http.server, os
          class Store(http.server.BaseHTTPRequestHandler):
              def path_of(self):
                  return "/data/" + os.path.basename(self.path)
              def do_PUT(self):
                  body = self.rfile.read(int(self.headers["Content-Length"]))
                  with open(self.path_of() + ".new", "wb") as f:
                      f.write(body)
                      f.flush()
                      os.fsync(f.fileno())
                  os.replace(self.path_of() + ".new", self.path_of())
                  self.send_response(201)
                  self.end_headers()
                  self.wfile.write(hashlib.sha256(body).hexdigest().encode())
              def do_GET(self):
                  try:
                      body = open(self.path_of(), "rb").read()
                  except OSError:
                      self.send_response(404)
                      self.end_headers()
                      return
                  self.send_response(200)
                  self.send_header("Content-Length", str(len(body)))
                  self.end_headers()
                  self.wfile.write(body)
          http.server.ThreadingHTTPServer(("", 8080), Store).serve_forever()
        ports: [{containerPort: 8080}]
        readinessProbe:
          tcpSocket: {port: 8080}
          periodSeconds: 1
        volumeMounts: [{name: data, mountPath: /data}]
  volumeClaimTemplates:
  - metadata: {name: data}
    spec:
      accessModes: [ReadWriteOnce]
      resources: {requests: {storage: 1Gi}}
---
apiVersion: v1
kind: Service
metadata: {name: db, namespace: vault}
spec:
  selector: {app: db}
  ports: [{port: 8080}]
---
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata: {name: db, namespace: vault}
spec:
  resourceSelectors:
  - {apiVersion: apps/v1, kind: StatefulSet, name: db}
  - {apiVersion: v1, kind: Service, name: db}
  failover:
    cluster: {purgeMode: Gracefully}
  placement:
    clusterAffinities:
    - {affinityName: primary, clusterNames: [east]}
    - {affinityName: backup, clusterNames: [west]}
    clusterTolerations:
    - {key: cluster.karmada.io/not-ready, operator: Exists, effect: NoExecute, tolerationSeconds: 2}
    - {key: cluster.karmada.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: 2}
"#;

/// Velero's schedule in the member the store runs in: its namespace,
/// volumes included, every few seconds.
const SCHEDULE: &str = r#"
apiVersion: velero.io/v1
kind: Schedule
metadata: {name: vault, namespace: velero}
spec:
  schedule: "@every 3s"
  template:
    includedNamespaces: [vault]
    defaultVolumesToFsBackup: true
"#;

/// A member lost: the workload annotated for data migration fails over
/// to the other member with its volume restored from the newest backup
/// before it starts there, and reads back, through its Service, every
/// byte written to it.
#[test]
fn a_store_that_fails_over_serves_every_byte_it_acknowledged_from_the_other_member() {
    if !can_run_netns() {
        return;
    }
    let storage = tempfile::tempdir().expect("tempdir");
    let fleet = netns_fleet(storage.path(), "fo");
    let (east, west) = (fleet.member("east"), fleet.member("west"));
    fleet.apply(VAULT);
    wait_for(WAIT, "db ready in east", || {
        jsonpath(
            east,
            &["get", "sts", "db", "-n", "vault"],
            "{.status.readyReplicas}",
        ) == "1"
    });
    east.ok_stdin(&["apply", "-f", "-"], SCHEDULE);
    // Written through the Service; the store acknowledges each byte with
    // its checksum.
    let acknowledged = east
        .ok(&[
            "exec", "-n", "vault", "db-0", "--", "sh", "-c",
            "head -c 500000 /dev/urandom > /tmp/payload && curl -sf -m 10 -X PUT --data-binary @/tmp/payload http://db.vault.svc.cluster.local:8080/records",
        ])
        .trim()
        .to_string();
    assert_eq!(
        acknowledged.len(),
        64,
        "the store's answer: {acknowledged:?}"
    );
    // Backups' times are whole seconds, rounded: one stamped a second
    // after the write began after it.
    let written = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(1);
    // The member is lost once a scheduled backup has taken the write.
    wait_for(WAIT, "a scheduled backup after the write", || {
        east.ok(&[
            "get", "backups", "-n", "velero", "-l", "velero.io/schedule-name=vault", "-o",
            "jsonpath={range .items[?(@.status.phase==\"Completed\")]}{.status.startTimestamp}{\"\\n\"}{end}",
        ])
        .lines()
        .filter_map(|t| t.parse::<jiff::Timestamp>().ok())
        .any(|t| t >= written)
    });
    let lost = std::time::Instant::now();
    common::fleet::member_fault(&fleet, "east", &["unreachable", "--mode", "refuse"]);

    wait_for(Duration::from_secs(120), "db ready in west", || {
        jsonpath(
            west,
            &["get", "sts", "db", "-n", "vault"],
            "{.status.readyReplicas}",
        ) == "1"
    });
    // Read back through the Service (its endpoints follow the pod's
    // readiness a moment later).
    let read = || {
        let out = west.kubectl(&[
            "exec",
            "-n",
            "vault",
            "db-0",
            "--",
            "sh",
            "-c",
            "curl -sf -m 10 http://db.vault.svc.cluster.local:8080/records | sha256sum",
        ]);
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_string()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut last = read();
    while last != acknowledged && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        last = read();
    }
    eprintln!(
        "member lost -> serving its data from the other member: {:.1}s",
        lost.elapsed().as_secs_f64()
    );
    assert_eq!(
        last,
        acknowledged,
        "every acknowledged byte, read back through the Service in west (in the volume: {})",
        west.kubectl(&[
            "exec",
            "-n",
            "vault",
            "db-0",
            "--",
            "sha256sum",
            "/data/records"
        ])
        .stdout
        .escape_ascii()
    );
    // The hub says how the data came.
    assert_has(
        &fleet.hub.ok(&[
            "get",
            "events",
            "-n",
            "vault",
            "--field-selector",
            "reason=DataMigrated",
        ]),
        &["the volumes' data was restored in west"],
    );
}
