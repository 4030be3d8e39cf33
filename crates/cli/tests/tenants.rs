//! Tenants on a shared fleet, end to end: two tenants (namespaces) on
//! one hub with three members, each bound to its own OCM
//! ManagedClusterSet, one held to a Karmada FederatedResourceQuota.
//! An admin sets the tenants up with kubectl; each tenant's own user
//! (an `admin` of its namespace only) propagates its objects, and what it
//! must not do is forbidden.

mod common;

use std::time::Duration;

use common::fleet::{Fleet, exists, jsonpath};
use common::{assert_has, flotilla, wait_for};

const WAIT: Duration = Duration::from_secs(60);

/// Two sets over the three members, one per tenant, each bound to its
/// tenant's namespace; a namespaced PropagationPolicy per tenant that
/// would take every cluster.
const TENANTS: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: tenant-a}
---
apiVersion: v1
kind: Namespace
metadata: {name: tenant-b}
---
apiVersion: cluster.open-cluster-management.io/v1beta2
kind: ManagedClusterSet
metadata: {name: set-a}
---
apiVersion: cluster.open-cluster-management.io/v1beta2
kind: ManagedClusterSet
metadata: {name: set-b}
spec:
  clusterSelector:
    selectorType: LabelSelector
    labelSelector:
      matchLabels: {tier: b}
---
apiVersion: cluster.open-cluster-management.io/v1beta2
kind: ManagedClusterSetBinding
metadata: {name: set-a, namespace: tenant-a}
spec: {clusterSet: set-a}
---
apiVersion: cluster.open-cluster-management.io/v1beta2
kind: ManagedClusterSetBinding
metadata: {name: set-b, namespace: tenant-b}
spec: {clusterSet: set-b}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: alice-admin, namespace: tenant-a}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: admin}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: alice}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: bob-admin, namespace: tenant-b}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: admin}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: bob}]
"#;

/// A tenant's namespaced PropagationPolicy that would take every cluster.
fn everywhere(namespace: &str) -> String {
    format!(
        r#"
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata: {{name: everywhere, namespace: {namespace}}}
spec:
  resourceSelectors:
    - {{apiVersion: apps/v1, kind: Deployment}}
  placement: {{}}
"#
    )
}

/// Applies `manifest` as `user`; its stderr when refused.
fn apply_as(fleet: &Fleet, user: &str, manifest: &str) -> Result<(), String> {
    let out = fleet
        .hub
        .kubectl_stdin(&["--as", user, "apply", "-f", "-"], Some(manifest));
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

const QUOTA: &str = r#"
apiVersion: policy.karmada.io/v1alpha1
kind: FederatedResourceQuota
metadata: {name: team, namespace: tenant-a}
spec:
  overall: {cpu: "1"}
  staticAssignments:
    - clusterName: m1
      hard: {cpu: "1"}
"#;

/// A one-replica Deployment requesting `cpu`.
fn deployment(namespace: &str, name: &str, cpu: &str) -> String {
    format!(
        r#"
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  replicas: 1
  selector:
    matchLabels: {{app: {name}}}
  template:
    metadata:
      labels: {{app: {name}}}
    spec:
      containers:
        - name: app
          image: nginx:1.27
          resources:
            requests: {{cpu: {cpu}}}
"#
    )
}

fn in_member(fleet: &Fleet, member: &str, namespace: &str, name: &str) -> bool {
    exists(
        fleet.member(member),
        &["get", "deploy", name, "-n", namespace],
    )
}

fn scheduled(fleet: &Fleet, namespace: &str, binding: &str, field: &str) -> String {
    fleet.jsonpath_hub(
        &["get", "rb", binding, "-n", namespace],
        &format!("{{.status.conditions[?(@.type==\"Scheduled\")].{field}}}"),
    )
}

fn describe(fleet: &Fleet, namespace: &str, target: &str) -> String {
    let out = flotilla(&[
        "describe",
        "placement",
        target,
        "-n",
        namespace,
        "--kubeconfig",
        fleet.hub.kubeconfig.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn two_tenants_stay_in_their_cluster_sets_and_one_is_held_to_its_quota() {
    let fleet = Fleet::new(&[("m1", "us-east"), ("m2", "eu-west"), ("m3", "ap-south")]);
    // set-a is the default kind of set: clusters labelled with its name.
    for (cluster, label) in [
        ("m1", "cluster.open-cluster-management.io/clusterset=set-a"),
        ("m2", "cluster.open-cluster-management.io/clusterset=set-a"),
        ("m3", "tier=b"),
    ] {
        fleet.hub.ok(&["label", "cluster", cluster, label]);
    }
    fleet.apply(TENANTS);
    wait_for(WAIT, "the sets and bindings to report", || {
        fleet.jsonpath_hub(
            &["get", "managedclusterset", "set-a"],
            "{.status.conditions[?(@.type==\"ClusterSetEmpty\")].status}",
        ) == "False"
            && fleet.jsonpath_hub(
                &["get", "managedclustersetbinding", "set-b", "-n", "tenant-b"],
                "{.status.conditions[?(@.type==\"Bound\")].status}",
            ) == "True"
    });

    // Each tenant propagates its own namespace's objects, as itself...
    for (user, ns) in [("alice", "tenant-a"), ("bob", "tenant-b")] {
        apply_as(&fleet, user, &everywhere(ns)).unwrap();
        apply_as(&fleet, user, &deployment(ns, "web", "250m")).unwrap();
    }
    // ...and nothing of another tenant's, nor the fleet's.
    let refused = apply_as(&fleet, "alice", &deployment("tenant-b", "intruder", "10m"));
    assert_has(
        &refused.unwrap_err(),
        &[
            r#"User "alice" cannot get resource "deployments" in API group "apps" in the namespace "tenant-b""#,
        ],
    );
    let refused = apply_as(
        &fleet,
        "alice",
        "apiVersion: policy.karmada.io/v1alpha1\nkind: ClusterPropagationPolicy\nmetadata: {name: grab}\nspec:\n  resourceSelectors: [{apiVersion: apps/v1, kind: Deployment}]\n",
    );
    assert_has(
        &refused.unwrap_err(),
        &[
            r#"User "alice" cannot get resource "clusterpropagationpolicies" in API group "policy.karmada.io" at the cluster scope"#,
        ],
    );
    // Binding herself tenant-b's clusters needs that set's `bind`.
    let refused = apply_as(
        &fleet,
        "alice",
        "apiVersion: cluster.open-cluster-management.io/v1beta2\nkind: ManagedClusterSetBinding\nmetadata: {name: set-b, namespace: tenant-a}\nspec: {clusterSet: set-b}\n",
    );
    assert_has(
        &refused.unwrap_err(),
        &[r#"user "alice" is not allowed to bind cluster set "set-b""#],
    );
    // Each tenant's Deployment lands on its set's clusters only.
    wait_for(WAIT, "tenant-a's web in m1 and m2", || {
        in_member(&fleet, "m1", "tenant-a", "web") && in_member(&fleet, "m2", "tenant-a", "web")
    });
    wait_for(WAIT, "tenant-b's web in m3", || {
        in_member(&fleet, "m3", "tenant-b", "web")
    });
    assert_eq!(
        fleet.jsonpath_hub(
            &["get", "rb", "web-deployment", "-n", "tenant-a"],
            "{.spec.clusters[*].name}"
        ),
        "m1 m2"
    );
    assert_eq!(
        fleet.jsonpath_hub(
            &["get", "rb", "web-deployment", "-n", "tenant-b"],
            "{.spec.clusters[*].name}"
        ),
        "m3"
    );
    assert!(!in_member(&fleet, "m3", "tenant-a", "web"));
    assert!(!in_member(&fleet, "m1", "tenant-b", "web"));
    let described = describe(&fleet, "tenant-a", "deploy/web");
    assert_has(
        &described,
        &[
            "Cluster sets: set-a (bound to namespace tenant-a; clusters: m1, m2)",
            "m3",
            "is not in a ManagedClusterSet bound to namespace \"tenant-a\" (bound: set-a)",
        ],
    );

    // A set binding to a set with no cluster: nothing fits, and the
    // condition says why.
    fleet.apply(
        r#"
apiVersion: v1
kind: Namespace
metadata: {name: tenant-c}
---
apiVersion: cluster.open-cluster-management.io/v1beta2
kind: ManagedClusterSetBinding
metadata: {name: set-c, namespace: tenant-c}
spec: {clusterSet: set-c}
"#,
    );
    fleet.apply(&everywhere("tenant-c"));
    fleet.apply(&deployment("tenant-c", "web", "10m"));
    wait_for(WAIT, "tenant-c's web unschedulable", || {
        scheduled(&fleet, "tenant-c", "web-deployment", "message")
            == "0/3 clusters are available: 3 cluster(s) are not in a ManagedClusterSet bound to namespace \"tenant-c\" (bound: set-c)."
    });
    assert_eq!(
        fleet.jsonpath_hub(
            &["get", "managedclustersetbinding", "set-c", "-n", "tenant-c"],
            "{.status.conditions[?(@.type==\"Bound\")].status}",
        ),
        "False"
    );
    // Creating the set with a member lets it place there.
    fleet.apply(
        r#"
apiVersion: cluster.open-cluster-management.io/v1beta2
kind: ManagedClusterSet
metadata: {name: set-c}
spec:
  clusterSelector:
    selectorType: LabelSelector
    labelSelector:
      matchLabels: {tier: b}
"#,
    );
    wait_for(WAIT, "tenant-c's web in m3 once its set exists", || {
        in_member(&fleet, "m3", "tenant-c", "web")
    });

    // Tenant A's quota: web takes 2 × 250m of its 1 CPU; api would take
    // 2 × 400m more, and is held back.
    fleet.apply(QUOTA);
    wait_for(WAIT, "the quota's usage", || {
        fleet.jsonpath_hub(
            &["get", "federatedresourcequota", "team", "-n", "tenant-a"],
            "{.status.overallUsed.cpu}",
        ) == "500m"
    });
    wait_for(WAIT, "the statically assigned ResourceQuota in m1", || {
        jsonpath(
            fleet.member("m1"),
            &["get", "resourcequota", "team", "-n", "tenant-a"],
            "{.spec.hard.cpu}",
        ) == "1"
    });
    assert!(!exists(
        fleet.member("m2"),
        &["get", "resourcequota", "team", "-n", "tenant-a"]
    ));
    // The member's ResourceQuota status comes back as the quota's.
    wait_for(WAIT, "m1's quota status in aggregatedStatus", || {
        fleet.jsonpath_hub(
            &["get", "federatedresourcequota", "team", "-n", "tenant-a"],
            "{.status.aggregatedStatus[?(@.clusterName==\"m1\")].hard.cpu}",
        ) == "1"
    });
    // The tenant reads its quota but cannot raise it.
    let used = fleet.hub.ok(&[
        "--as",
        "alice",
        "-n",
        "tenant-a",
        "get",
        "federatedresourcequota",
        "team",
        "-o",
        "jsonpath={.status.overallUsed.cpu}",
    ]);
    assert_eq!(used, "500m");
    let out = fleet.hub.kubectl(&[
        "--as",
        "alice",
        "-n",
        "tenant-a",
        "patch",
        "federatedresourcequota",
        "team",
        "--type=merge",
        "-p",
        r#"{"spec":{"overall":{"cpu":"100"}}}"#,
    ]);
    assert_has(
        &String::from_utf8_lossy(&out.stderr),
        &[
            r#"User "alice" cannot patch resource "federatedresourcequotas" in API group "policy.karmada.io" in the namespace "tenant-a""#,
        ],
    );
    apply_as(&fleet, "alice", &deployment("tenant-a", "api", "400m")).unwrap();
    wait_for(WAIT, "api over quota", || {
        scheduled(&fleet, "tenant-a", "api-deployment", "reason") == "QuotaExceeded"
    });
    assert_eq!(
        scheduled(&fleet, "tenant-a", "api-deployment", "message"),
        "FederatedResourceQuota(tenant-a/team) exceeded for resource cpu: requested sum 1300m, limit 1 (this binding requests 800m, used by others 500m)."
    );
    assert_eq!(
        scheduled(&fleet, "tenant-a", "api-deployment", "status"),
        "False"
    );
    let works = fleet.hub.ok(&["get", "works", "-A"]);
    assert!(!works.contains("api-"), "{works}");
    assert!(!in_member(&fleet, "m1", "tenant-a", "api"));

    // Deleting web makes room: api is scheduled.
    fleet
        .hub
        .ok(&["--as", "alice", "delete", "deploy", "web", "-n", "tenant-a"]);
    wait_for(WAIT, "api scheduled once web is gone", || {
        scheduled(&fleet, "tenant-a", "api-deployment", "status") == "True"
    });
    wait_for(WAIT, "api in m1 and m2", || {
        in_member(&fleet, "m1", "tenant-a", "api") && in_member(&fleet, "m2", "tenant-a", "api")
    });
    wait_for(WAIT, "the quota's usage after the swap", || {
        fleet.jsonpath_hub(
            &["get", "federatedresourcequota", "team", "-n", "tenant-a"],
            "{.status.overallUsed.cpu}",
        ) == "800m"
    });
    // Tenant B never had a quota: untouched.
    assert_eq!(
        scheduled(&fleet, "tenant-b", "web-deployment", "status"),
        "True"
    );
}
