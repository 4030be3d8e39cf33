//! The control plane's Karmada API: the CRDs it installs on start, as a
//! Karmada user sees them through kubectl and kube-rs.

mod common;

use common::{Server, assert_has, write};
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};

const KARMADA_YAML: &str = r#"
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata:
  name: nginx-propagation
spec:
  resourceSelectors:
    - apiVersion: apps/v1
      kind: Deployment
      name: nginx
  placement:
    clusterAffinity:
      clusterNames: [member1, member2]
    replicaScheduling:
      replicaDivisionPreference: Weighted
      replicaSchedulingType: Divided
      weightPreference:
        staticWeightList:
          - targetCluster: {clusterNames: [member1]}
            weight: 1
          - targetCluster: {clusterNames: [member2]}
            weight: 2
---
apiVersion: policy.karmada.io/v1alpha1
kind: ClusterPropagationPolicy
metadata:
  name: crds
spec:
  priority: 10
  conflictResolution: Overwrite
  resourceSelectors:
    - apiVersion: apiextensions.k8s.io/v1
      kind: CustomResourceDefinition
---
apiVersion: cluster.karmada.io/v1alpha1
kind: Cluster
metadata:
  name: member1
spec:
  syncMode: Push
  apiEndpoint: https://member1.example:6443
  region: us-east-1
  zones: [us-east-1a]
"#;

#[tokio::test]
async fn karmada_crds_are_served_with_their_names_and_columns() {
    let s = Server::controlplane(&[]);
    let resources = s.ok(&["api-resources", "--api-group=policy.karmada.io"]);
    assert_has(
        &resources,
        &[
            "propagationpolicies",
            "pp",
            "clusterpropagationpolicies",
            "cpp",
            "overridepolicies",
            "op",
            "clusteroverridepolicies",
            "cop",
            "federatedresourcequotas",
        ],
    );
    let work = s.ok(&["api-resources", "--api-group=work.karmada.io"]);
    assert_has(
        &work,
        &[
            "resourcebindings",
            "rb",
            "clusterresourcebindings",
            "crb",
            "works",
        ],
    );
    assert_has(
        &s.ok(&["api-resources", "--api-group=cluster.karmada.io"]),
        &["clusters", "Cluster"],
    );

    // A Karmada user's YAML applies unchanged; Karmada's defaults appear.
    let file = write(s.dir.path(), "karmada.yaml", KARMADA_YAML);
    s.ok(&["apply", "-f", file.to_str().unwrap()]);
    let pp = s.ok(&["get", "pp"]);
    assert_has(
        &pp,
        &[
            "CONFLICT-RESOLUTION",
            "PRIORITY",
            "nginx-propagation",
            "Abort",
        ],
    );
    let cpp = s.ok(&["get", "cpp", "crds"]);
    assert_has(&cpp, &["Overwrite", "10"]);
    let clusters = s.ok(&["get", "clusters", "-o", "wide"]);
    assert_has(
        &clusters,
        &[
            "VERSION",
            "MODE",
            "READY",
            "REGION",
            "member1",
            "Push",
            "us-east-1",
        ],
    );
    // OCM's cluster sets, for tenants.
    assert_has(
        &s.ok(&[
            "api-resources",
            "--api-group=cluster.open-cluster-management.io",
        ]),
        &[
            "managedclustersets",
            "mclset",
            "managedclustersetbindings",
            "mclsetbinding",
            "v1beta2",
        ],
    );
    assert_has(
        &s.ok(&["get", "karmada-io"]),
        &["nginx-propagation", "crds"],
    );

    // Read back through kube-rs with the weights and defaults in place.
    let gvk = GroupVersionKind::gvk("policy.karmada.io", "v1alpha1", "PropagationPolicy");
    let api: Api<DynamicObject> = Api::default_namespaced_with(
        s.client().await,
        &ApiResource::from_gvk_with_plural(&gvk, "propagationpolicies"),
    );
    let pp = api.get("nginx-propagation").await.unwrap();
    let spec = &pp.data["spec"];
    assert_eq!(spec["priority"], 0);
    assert_eq!(spec["preemption"], "Never");
    assert_eq!(
        spec["placement"]["replicaScheduling"]["weightPreference"]["staticWeightList"][1]["weight"],
        2
    );
}

#[tokio::test]
async fn invalid_karmada_objects_are_rejected_with_the_field_named() {
    let s = Server::controlplane(&[]);
    let bad_pp = r#"{"apiVersion":"policy.karmada.io/v1alpha1","kind":"PropagationPolicy","metadata":{"name":"bad"},"spec":{"resourceSelectors":[]}}"#;
    let out = s.kubectl_stdin(&["apply", "-f", "-"], Some(bad_pp));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("spec.resourceSelectors"), "{err}");
    let bad_cluster = r#"{"apiVersion":"cluster.karmada.io/v1alpha1","kind":"Cluster","metadata":{"name":"bad"},"spec":{"syncMode":"Sideways"}}"#;
    let out = s.kubectl_stdin(&["apply", "-f", "-"], Some(bad_cluster));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("spec.syncMode") && err.contains("Push"),
        "{err}"
    );
    // Nothing was written.
    assert!(
        s.ok(&["get", "pp,clusters", "-o", "name"])
            .trim()
            .is_empty()
    );
}

#[tokio::test]
async fn restarting_keeps_the_crds_and_objects() {
    let mut s = Server::controlplane(&[]);
    let file = write(s.dir.path(), "karmada.yaml", KARMADA_YAML);
    s.ok(&["apply", "-f", file.to_str().unwrap()]);
    s.kill9();
    s.spawn();
    assert_has(&s.ok(&["get", "pp", "-o", "name"]), &["nginx-propagation"]);
    assert_has(&s.ok(&["get", "crd"]), &["works.work.karmada.io"]);
}

/// The `worker_threads` the control plane's log says it started with.
fn worker_threads(log: &str) -> Option<usize> {
    // The log's fields are set off by terminal colour codes.
    let mut plain = String::new();
    let mut in_escape = false;
    for c in log.chars() {
        match (in_escape, c) {
            (false, '\u{1b}') => in_escape = true,
            (true, 'm') => in_escape = false,
            (false, c) => plain.push(c),
            (true, _) => {}
        }
    }
    let line = plain
        .lines()
        .find(|l| l.contains("control plane starting"))?;
    let value = line.split("worker_threads=").nth(1)?;
    value.split_whitespace().next()?.parse().ok()
}

/// The control plane's async runtime runs as many threads as
/// `--worker-threads` says; without it, one per CPU up to 8 (every write
/// goes through the store's one writer, which 8 keep busy). A count that
/// is no number of threads is refused before anything starts.
#[test]
fn the_runtime_runs_the_worker_threads_asked_for() {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    for (args, expected) in [(&["--worker-threads", "3"][..], 3), (&[][..], cores.min(8))] {
        let s = Server::controlplane(args);
        let log = s.log();
        assert_eq!(worker_threads(&log), Some(expected), "{args:?}: {log}");
    }
    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(["controlplane", "--worker-threads", "0"])
        .output()
        .expect("flotilla runs");
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("invalid value '0' for '--worker-threads"),
        "{stderr}"
    );
}
