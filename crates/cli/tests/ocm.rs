//! Open Cluster Management's ManagedCluster and ManifestWork, end to
//! end: a hub with one member, `target-managed-cluster`, which appears
//! as an accepted, available ManagedCluster with its namespace; the
//! issue's ManifestWork `hello-work-demo` runs its Deployment there and
//! feeds its status back; deleting it removes the Deployment, unless the
//! ManifestWork orphans it.

mod common;

use std::time::Duration;

use common::fleet::{Fleet, exists};
use common::wait_for;

const WAIT: Duration = Duration::from_secs(60);
const CLUSTER: &str = "target-managed-cluster";

/// The issue's ManifestWork, its `spec: ...` filled in, with a
/// WellKnownStatus feedback rule and the given delete option.
fn manifest_work(name: &str, deployment: &str, delete_option: &str) -> String {
    format!(
        r#"
apiVersion: work.open-cluster-management.io/v1
kind: ManifestWork
metadata:
  name: {name}
  namespace: target-managed-cluster
spec:
  workload:
    manifests:
    - apiVersion: apps/v1
      kind: Deployment
      metadata:
        name: {deployment}
      spec:
        replicas: 1
        selector:
          matchLabels: {{app: {deployment}}}
        template:
          metadata:
            labels: {{app: {deployment}}}
          spec:
            containers:
            - name: hello
              image: quay.io/asmacdo/busybox
              command: ["sh", "-c", "echo Hello, Kubernetes! && sleep 3600"]
  manifestConfigs:
  - resourceIdentifier: {{group: apps, resource: deployments, namespace: default, name: {deployment}}}
    feedbackRules:
    - type: WellKnownStatus
    - type: JSONPaths
      jsonPaths:
      - {{name: ready, path: .status.readyReplicas}}
{delete_option}
"#
    )
}

fn mw_condition(fleet: &Fleet, name: &str, type_: &str) -> String {
    fleet.jsonpath_hub(
        &["get", "manifestwork", name, "-n", CLUSTER],
        &format!("{{.status.conditions[?(@.type==\"{type_}\")].status}}"),
    )
}

fn in_member(fleet: &Fleet, name: &str) -> bool {
    exists(
        fleet.member(CLUSTER),
        &["get", "deploy", name, "-n", "default"],
    )
}

#[test]
fn managed_cluster_and_manifest_work() {
    let fleet = Fleet::new(&[(CLUSTER, "us-east")]);

    // The member is a ManagedCluster, accepted and available, with its
    // namespace on the hub.
    wait_for(
        WAIT,
        "the ManagedCluster to be accepted and available",
        || {
            let cond = |t: &str| {
                fleet.jsonpath_hub(
                    &["get", "managedcluster", CLUSTER],
                    &format!("{{.status.conditions[?(@.type==\"{t}\")].status}}"),
                )
            };
            cond("HubAcceptedManagedCluster") == "True"
                && cond("ManagedClusterJoined") == "True"
                && cond("ManagedClusterConditionAvailable") == "True"
        },
    );
    assert_eq!(
        fleet.jsonpath_hub(
            &["get", "managedcluster", CLUSTER],
            "{.spec.hubAcceptsClient} {.metadata.labels.name} {.metadata.labels.region}"
        ),
        format!("true {CLUSTER} us-east")
    );
    assert!(
        !fleet
            .jsonpath_hub(
                &["get", "managedcluster", CLUSTER],
                "{.status.version.kubernetes}"
            )
            .is_empty()
    );
    assert!(exists(&fleet.hub, &["get", "namespace", CLUSTER]));

    // The issue's ManifestWork: the Deployment runs in the member, and its
    // status comes back.
    fleet.apply(&manifest_work("hello-work-demo", "hello", ""));
    wait_for(WAIT, "hello to run in the member", || {
        common::fleet::jsonpath(
            fleet.member(CLUSTER),
            &["get", "deploy", "hello", "-n", "default"],
            "{.status.readyReplicas}",
        ) == "1"
    });
    wait_for(WAIT, "the ManifestWork to report its feedback", || {
        mw_condition(&fleet, "hello-work-demo", "Applied") == "True"
            && mw_condition(&fleet, "hello-work-demo", "Available") == "True"
            && fleet.jsonpath_hub(
                &["get", "manifestwork", "hello-work-demo", "-n", CLUSTER],
                "{.status.resourceStatus.manifests[0].statusFeedback.values[?(@.name==\"ReadyReplicas\")].fieldValue.integer}",
            ) == "1"
    });
    // Settled: nothing is rewritten on every sweep. The ManagedCluster
    // follows its Cluster (the running pod takes one of its allocatable
    // pods when the member's status is next collected), so a window in
    // which the Cluster changed proves nothing and is tried again.
    let rv = |args: &[&str]| fleet.jsonpath_hub(args, "{.metadata.resourceVersion}");
    common::assert_left_alone(
        WAIT,
        "the ManifestWork or the ManagedCluster",
        || {
            (
                rv(&["get", "manifestwork", "hello-work-demo", "-n", CLUSTER]),
                rv(&["get", "managedcluster", CLUSTER]),
            )
        },
        || rv(&["get", "clusters.cluster.karmada.io", CLUSTER]),
    );
    let meta = fleet.jsonpath_hub(
        &["get", "manifestwork", "hello-work-demo", "-n", CLUSTER],
        "{.status.resourceStatus.manifests[0].resourceMeta}",
    );
    for needle in [
        r#""group":"apps""#,
        r#""resource":"deployments""#,
        r#""namespace":"default""#,
        r#""ordinal":0"#,
    ] {
        assert!(meta.contains(needle), "{meta}");
    }
    assert_eq!(
        fleet.jsonpath_hub(
            &["get", "manifestwork", "hello-work-demo", "-n", CLUSTER],
            "{.status.resourceStatus.manifests[0].statusFeedback.values[?(@.name==\"ready\")].fieldValue.integer}",
        ),
        "1"
    );
    // It travels as one Work in the cluster's execution namespace.
    assert!(exists(
        &fleet.hub,
        &[
            "get",
            "works.work.karmada.io",
            "ocm-target-managed-cluster-hello-work-demo",
            "-n",
            "karmada-es-target-managed-cluster",
        ]
    ));

    // Foreground (the default): deleting it removes the Deployment.
    fleet
        .hub
        .ok(&["delete", "manifestwork", "hello-work-demo", "-n", CLUSTER]);
    wait_for(WAIT, "hello to leave the member", || {
        !in_member(&fleet, "hello")
    });

    // Orphan: the Deployment stays.
    fleet.apply(&manifest_work(
        "kept",
        "kept",
        "  deleteOption: {propagationPolicy: Orphan}",
    ));
    wait_for(WAIT, "kept to be applied", || {
        mw_condition(&fleet, "kept", "Applied") == "True" && in_member(&fleet, "kept")
    });
    fleet
        .hub
        .ok(&["delete", "manifestwork", "kept", "-n", CLUSTER]);
    wait_for(WAIT, "the orphaning ManifestWork to go", || {
        !exists(&fleet.hub, &["get", "manifestwork", "kept", "-n", CLUSTER])
    });
    std::thread::sleep(Duration::from_secs(2));
    assert!(in_member(&fleet, "kept"));

    // Bad input: an invalid manifest fails alone; a ManifestWork in a
    // namespace that is no cluster's is applied nowhere, and says so.
    fleet.apply(
        r#"
apiVersion: work.open-cluster-management.io/v1
kind: ManifestWork
metadata: {name: mixed, namespace: target-managed-cluster}
spec:
  workload:
    manifests:
    - {apiVersion: v1, metadata: {name: no-kind, namespace: default}, data: {a: b}}
    - {apiVersion: v1, kind: ConfigMap, metadata: {name: good, namespace: default}, data: {a: b}}
---
apiVersion: v1
kind: Namespace
metadata: {name: not-a-cluster}
---
apiVersion: work.open-cluster-management.io/v1
kind: ManifestWork
metadata: {name: lost, namespace: not-a-cluster}
spec:
  workload:
    manifests:
    - {apiVersion: v1, kind: ConfigMap, metadata: {name: lost, namespace: default}}
"#,
    );
    wait_for(WAIT, "the valid manifest to be applied alone", || {
        exists(
            fleet.member(CLUSTER),
            &["get", "configmap", "good", "-n", "default"],
        ) && fleet.jsonpath_hub(
            &["get", "manifestwork", "mixed", "-n", CLUSTER],
            "{.status.resourceStatus.manifests[0].conditions[?(@.type==\"Applied\")].message}",
        ) == "the manifest has no kind"
    });
    assert_eq!(mw_condition(&fleet, "mixed", "Applied"), "False");
    wait_for(WAIT, "the lost ManifestWork to say why", || {
        fleet.jsonpath_hub(
            &["get", "manifestwork", "lost", "-n", "not-a-cluster"],
            "{.status.conditions[?(@.type==\"Applied\")].reason}",
        ) == "ManagedClusterNotFound"
    });

    // A manifest removed from a ManifestWork leaves the member (the
    // execution controller deletes what a Work no longer holds); the rest
    // stays.
    let pair = |names: &[&str]| {
        let manifests: String = names
            .iter()
            .map(|n| format!("    - {{apiVersion: v1, kind: ConfigMap, metadata: {{name: {n}, namespace: default}}}}\n"))
            .collect();
        format!(
            "apiVersion: work.open-cluster-management.io/v1\nkind: ManifestWork\nmetadata: {{name: pair, namespace: {CLUSTER}}}\nspec:\n  workload:\n    manifests:\n{manifests}"
        )
    };
    let cm = |n: &str| {
        exists(
            fleet.member(CLUSTER),
            &["get", "configmap", n, "-n", "default"],
        )
    };
    fleet.apply(&pair(&["pair-one", "pair-two"]));
    wait_for(WAIT, "both of the pair in the member", || {
        cm("pair-one") && cm("pair-two")
    });
    fleet.apply(&pair(&["pair-one"]));
    wait_for(WAIT, "the removed manifest to leave the member", || {
        !cm("pair-two")
    });
    assert!(cm("pair-one"));

    // The cluster unjoined: its ManagedCluster goes, and its ManifestWorks
    // are applied nowhere.
    let out = common::flotilla(&[
        "unjoin",
        CLUSTER,
        "--kubeconfig",
        fleet.hub.kubeconfig.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "unjoin: {}",
        common::fleet::stderr(&out)
    );
    wait_for(WAIT, "the ManagedCluster to go", || {
        !exists(&fleet.hub, &["get", "managedcluster", CLUSTER])
    });
    wait_for(WAIT, "the ManifestWork to lose its cluster", || {
        fleet.jsonpath_hub(
            &["get", "manifestwork", "mixed", "-n", CLUSTER],
            "{.status.conditions[?(@.type==\"Applied\")].reason}",
        ) == "ManagedClusterNotFound"
    });
}
