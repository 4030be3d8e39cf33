//! OCM's Placement, PlacementDecision and ManifestWorkReplicaSet, end to
//! end: three members in a cluster set bound to namespace `apps`; a
//! Placement of two clusters and a ManifestWorkReplicaSet running a
//! Deployment on exactly those two; one of them lost, the decision and
//! the Deployment move to the third; Placements nobody can satisfy and a
//! ManifestWorkReplicaSet without its Placement say why; deleting the
//! ManifestWorkReplicaSet removes its ManifestWorks and Deployments.

mod common;

use std::time::Duration;

use common::fleet::{Fleet, exists, member_fault};
use common::wait_for;

const WAIT: Duration = Duration::from_secs(90);
const MEMBERS: [&str; 3] = ["pl-1", "pl-2", "pl-3"];

fn decisions(fleet: &Fleet, placement: &str) -> String {
    fleet.jsonpath_hub(
        &[
            "get",
            "placementdecisions",
            "-n",
            "apps",
            "-l",
            &format!("cluster.open-cluster-management.io/placement={placement}"),
        ],
        "{.items[*].status.decisions[*].clusterName}",
    )
}

fn satisfied(fleet: &Fleet, ns: &str, placement: &str) -> String {
    fleet.jsonpath_hub(
        &["get", "placement", placement, "-n", ns],
        "{.status.conditions[?(@.type==\"PlacementSatisfied\")].status} {.status.conditions[?(@.type==\"PlacementSatisfied\")].reason}",
    )
}

fn deployed(fleet: &Fleet, member: &str) -> bool {
    exists(
        fleet.member(member),
        &["get", "deploy", "web-ocm", "-n", "default"],
    )
}

/// Which members run the Deployment, as "pl-1 pl-2".
fn running_on(fleet: &Fleet) -> String {
    MEMBERS
        .iter()
        .filter(|m| deployed(fleet, m))
        .copied()
        .collect::<Vec<_>>()
        .join(" ")
}

fn summary(fleet: &Fleet) -> String {
    fleet.jsonpath_hub(
        &["get", "manifestworkreplicaset", "web", "-n", "apps"],
        "{.status.summary.total} {.status.summary.applied} {.status.conditions[?(@.type==\"PlacementVerified\")].reason}",
    )
}

#[test]
fn placement_and_manifest_work_replica_set() {
    let fleet = Fleet::new(&[
        (MEMBERS[0], "eu-west"),
        (MEMBERS[1], "eu-central"),
        (MEMBERS[2], "us-east"),
    ]);
    // The `global` set (every cluster) bound to `apps`, a Placement of
    // two, and the work to run on them.
    fleet.apply(
        r#"
apiVersion: cluster.open-cluster-management.io/v1beta2
kind: ManagedClusterSet
metadata: {name: global}
spec:
  clusterSelector: {selectorType: LabelSelector, labelSelector: {}}
---
apiVersion: v1
kind: Namespace
metadata: {name: apps}
---
apiVersion: cluster.open-cluster-management.io/v1beta2
kind: ManagedClusterSetBinding
metadata: {name: global, namespace: apps}
spec: {clusterSet: global}
---
apiVersion: cluster.open-cluster-management.io/v1beta1
kind: Placement
metadata: {name: two, namespace: apps}
spec:
  numberOfClusters: 2
---
apiVersion: work.open-cluster-management.io/v1alpha1
kind: ManifestWorkReplicaSet
metadata: {name: web, namespace: apps}
spec:
  placementRefs:
  - name: two
    rolloutStrategy: {type: All}
  manifestWorkTemplate:
    workload:
      manifests:
      - apiVersion: apps/v1
        kind: Deployment
        metadata: {name: web-ocm, namespace: default}
        spec:
          replicas: 1
          selector: {matchLabels: {app: web-ocm}}
          template:
            metadata: {labels: {app: web-ocm}}
            spec:
              containers:
              - {name: web, image: nginx}
"#,
    );
    wait_for(WAIT, "two clusters decided", || {
        satisfied(&fleet, "apps", "two") == "True AllDecisionsScheduled"
            && decisions(&fleet, "two") == "pl-1 pl-2"
    });
    assert_eq!(
        fleet.jsonpath_hub(
            &["get", "placement", "two", "-n", "apps"],
            "{.status.numberOfSelectedClusters}"
        ),
        "2"
    );
    // Named and owned as OCM's.
    assert_eq!(
        fleet.jsonpath_hub(
            &["get", "placementdecision", "two-decision-1", "-n", "apps"],
            "{.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name} {.metadata.labels.cluster\\.open-cluster-management\\.io/decision-group-index}"
        ),
        "Placement/two 0"
    );
    // `kubectl get placement` shows OCM's columns.
    let table = fleet.hub.ok(&["get", "placement", "-n", "apps"]);
    common::assert_has(&table, &["SUCCEEDED", "REASON", "SELECTEDCLUSTERS"]);

    wait_for(WAIT, "the Deployment on exactly the decided two", || {
        running_on(&fleet) == "pl-1 pl-2" && summary(&fleet) == "2 2 AsExpected"
    });
    assert_eq!(
        fleet.jsonpath_hub(
            &["get", "manifestwork", "web", "-n", "pl-1"],
            "{.metadata.labels.work\\.open-cluster-management\\.io/manifestworkreplicaset}"
        ),
        "apps.web"
    );

    // pl-1 is lost: tainted unreachable, replaced by pl-3.
    member_fault(&fleet, "pl-1", &["unreachable", "--mode", "refuse"]);
    wait_for(WAIT, "pl-1 to be tainted unreachable", || {
        fleet.jsonpath_hub(&["get", "managedcluster", "pl-1"], "{.spec.taints[*].key}")
            == "cluster.open-cluster-management.io/unreachable"
    });
    wait_for(WAIT, "the decision to move to pl-3", || {
        decisions(&fleet, "two") == "pl-2 pl-3"
    });
    wait_for(WAIT, "the Deployment on pl-3", || {
        deployed(&fleet, "pl-3") && summary(&fleet) == "2 2 AsExpected"
    });
    assert_eq!(
        satisfied(&fleet, "apps", "two"),
        "True AllDecisionsScheduled"
    );

    // Bad input: nobody can satisfy these; a missing Placement is named.
    fleet.apply(
        r#"
apiVersion: cluster.open-cluster-management.io/v1beta1
kind: Placement
metadata: {name: mars, namespace: apps}
spec:
  predicates:
  - requiredClusterSelector:
      labelSelector: {matchLabels: {region: mars}}
---
apiVersion: v1
kind: Namespace
metadata: {name: unbound}
---
apiVersion: cluster.open-cluster-management.io/v1beta1
kind: Placement
metadata: {name: any, namespace: unbound}
spec: {}
---
apiVersion: work.open-cluster-management.io/v1alpha1
kind: ManifestWorkReplicaSet
metadata: {name: lost, namespace: apps}
spec:
  placementRefs: [{name: missing}]
  manifestWorkTemplate:
    workload:
      manifests:
      - {apiVersion: v1, kind: ConfigMap, metadata: {name: lost, namespace: default}}
"#,
    );
    wait_for(WAIT, "the unsatisfiable Placements to say why", || {
        satisfied(&fleet, "apps", "mars") == "False NoManagedClusterMatched"
            && satisfied(&fleet, "unbound", "any") == "False NoManagedClusterSetBindings"
    });
    assert_eq!(
        fleet.jsonpath_hub(
            &["get", "placement", "mars", "-n", "apps"],
            "{.status.conditions[?(@.type==\"PlacementSatisfied\")].message}"
        ),
        "No ManagedCluster matches any of the cluster predicate"
    );
    wait_for(WAIT, "the lost ManifestWorkReplicaSet to say why", || {
        fleet.jsonpath_hub(
            &["get", "mwrs", "lost", "-n", "apps"],
            "{.status.conditions[?(@.type==\"PlacementVerified\")].status} {.status.conditions[?(@.type==\"PlacementVerified\")].reason}",
        ) == "False PlacementDecisionNotFound"
    });
    // The others keep working.
    assert_eq!(
        satisfied(&fleet, "apps", "two"),
        "True AllDecisionsScheduled"
    );
    assert_eq!(decisions(&fleet, "two"), "pl-2 pl-3");

    // pl-1 back: the decisions stay where they are (Steady).
    member_fault(&fleet, "pl-1", &["reachable"]);
    fleet.wait_ready("pl-1");
    wait_for(WAIT, "pl-1's taint to go", || {
        fleet
            .jsonpath_hub(&["get", "managedcluster", "pl-1"], "{.spec.taints[*].key}")
            .is_empty()
    });
    assert_eq!(decisions(&fleet, "two"), "pl-2 pl-3");

    // Deleting the ManifestWorkReplicaSet removes its ManifestWorks and so
    // the Deployments.
    fleet
        .hub
        .ok(&["delete", "mwrs", "web", "-n", "apps", "--wait=false"]);
    wait_for(WAIT, "the Deployments and ManifestWorks to go", || {
        running_on(&fleet).is_empty()
            && MEMBERS
                .iter()
                .all(|m| !exists(&fleet.hub, &["get", "manifestwork", "web", "-n", m]))
            && !exists(&fleet.hub, &["get", "mwrs", "web", "-n", "apps"])
    });
}
