//! The federation pipeline end to end: `flotilla controlplane`, simulated
//! members joined with `flotilla join`, and kubectl, as a user drives
//! them. Templates and policies are Karmada's YAML, unchanged.

mod common;

use std::time::Duration;

use common::fleet::{Fleet, exists, jsonpath, member_fault, stderr};
use common::{Running, assert_has, flotilla, wait_for};

const WAIT: Duration = Duration::from_secs(60);

const NGINX: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: nginx
  labels: {app: nginx}
spec:
  replicas: 3
  selector:
    matchLabels: {app: nginx}
  template:
    metadata:
      labels: {app: nginx}
    spec:
      containers:
        - name: nginx
          image: nginx:1.27
          resources:
            requests: {cpu: 100m, memory: 64Mi}
---
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
"#;

fn replicas_in(fleet: &Fleet, member: &str) -> String {
    jsonpath(
        fleet.member(member),
        &["get", "deploy", "nginx"],
        "{.spec.replicas}",
    )
}

#[test]
fn a_deployment_divided_one_to_two_reports_its_fleet_status_on_the_hub() {
    let fleet = Fleet::new(&[
        ("member1", "us-east"),
        ("member2", "eu-west"),
        ("member3", "ap-south"),
    ]);
    let clusters = fleet.hub.ok(&["get", "clusters"]);
    assert_has(
        &clusters,
        &["member1", "member2", "member3", "Push", "True"],
    );
    fleet.apply(NGINX);
    wait_for(WAIT, "1 and 2 replicas in member1 and member2", || {
        replicas_in(&fleet, "member1") == "1" && replicas_in(&fleet, "member2") == "2"
    });
    assert!(!exists(
        fleet.member("member3"),
        &["get", "deploy", "nginx"]
    ));
    // The member copy is Flotilla's, and says which Work it came from.
    let labels = jsonpath(
        fleet.member("member1"),
        &["get", "deploy", "nginx"],
        "{.metadata.labels}",
    );
    assert_has(&labels, &["\"karmada.io/managed\":\"true\""]);
    wait_for(WAIT, "3/3 ready on the hub", || {
        fleet.jsonpath_hub(&["get", "deploy", "nginx"], "{.status.readyReplicas}") == "3"
    });
    let deploy = fleet.hub.ok(&["get", "deploy", "nginx"]);
    assert_has(&deploy, &["3/3"]);
    let rb = fleet.hub.ok(&["get", "rb", "nginx-deployment"]);
    assert_has(&rb, &["SCHEDULED", "FULLYAPPLIED", "True"]);
    // The template is claimed with Karmada's markers.
    let claimed = fleet.jsonpath_hub(&["get", "deploy", "nginx"], "{.metadata.annotations}");
    assert_has(
        &claimed,
        &["propagationpolicy.karmada.io/name", "nginx-propagation"],
    );

    // Scaling the template re-divides.
    fleet
        .hub
        .ok(&["scale", "deploy", "nginx", "--replicas", "6"]);
    wait_for(WAIT, "2 and 4 replicas after scaling", || {
        replicas_in(&fleet, "member1") == "2" && replicas_in(&fleet, "member2") == "4"
    });
    wait_for(WAIT, "6 ready on the hub", || {
        fleet.jsonpath_hub(&["get", "deploy", "nginx"], "{.status.readyReplicas}") == "6"
    });

    // Deleting the template removes every copy.
    fleet.hub.ok(&["delete", "deploy", "nginx"]);
    wait_for(WAIT, "copies deleted from the members", || {
        !exists(fleet.member("member1"), &["get", "deploy", "nginx"])
            && !exists(fleet.member("member2"), &["get", "deploy", "nginx"])
    });
    wait_for(WAIT, "binding and Works gone", || {
        !exists(&fleet.hub, &["get", "rb", "nginx-deployment"])
            && fleet
                .hub
                .ok(&["get", "works", "-A", "-o", "name"])
                .is_empty()
    });
}

const WEB: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {app: web}
spec:
  replicas: 3
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
        - name: web
          image: nginx:1.27
---
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata:
  name: web
spec:
  resourceSelectors:
    - {apiVersion: apps/v1, kind: Deployment, name: web}
  placement:
    clusterAffinity:
      clusterNames: [member1, member2]
"#;

fn eu_override(replicas: u32) -> String {
    format!(
        r#"
apiVersion: policy.karmada.io/v1alpha1
kind: OverridePolicy
metadata:
  name: eu-west
spec:
  resourceSelectors:
    - {{apiVersion: apps/v1, kind: Deployment, name: web}}
  overrideRules:
    - targetCluster:
        fieldSelector:
          matchExpressions:
            - {{key: region, operator: In, values: [eu-west]}}
      overriders:
        imageOverrider:
          - {{component: Registry, operator: replace, value: mirror.eu.example.com}}
        plaintext:
          - {{path: /spec/replicas, operator: replace, value: {replicas}}}
"#
    )
}

fn web_in(fleet: &Fleet, member: &str, path: &str) -> String {
    jsonpath(fleet.member(member), &["get", "deploy", "web"], path)
}

#[test]
fn overrides_shape_each_clusters_copy_and_one_that_cannot_apply_says_so() {
    let fleet = Fleet::new(&[("member1", "us-east"), ("member2", "eu-west")]);
    fleet.apply(&eu_override(5));
    fleet.apply(WEB);
    let image = "{.spec.template.spec.containers[0].image}";
    wait_for(
        WAIT,
        "us-east as the template, eu-west as overridden",
        || {
            web_in(&fleet, "member1", "{.spec.replicas}") == "3"
                && web_in(&fleet, "member2", "{.spec.replicas}") == "5"
                && web_in(&fleet, "member2", image) == "mirror.eu.example.com/nginx:1.27"
        },
    );
    assert_eq!(web_in(&fleet, "member1", image), "nginx:1.27");
    wait_for(WAIT, "the hub to sum 3 and 5 ready replicas", || {
        fleet.jsonpath_hub(&["get", "deploy", "web"], "{.status.readyReplicas}") == "8"
    });
    // The Work says which overrides it holds, as Karmada's does.
    let annotations = fleet.hub.ok(&[
        "get",
        "works",
        "-n",
        "karmada-es-member2",
        "-o",
        "jsonpath={.items[0].metadata.annotations.policy\\.karmada\\.io/applied-overrides}",
    ]);
    assert_has(
        &annotations,
        &["\"policyName\":\"eu-west\"", "mirror.eu.example.com"],
    );

    // Changing the policy re-renders only what it changes.
    fleet.apply(&eu_override(4));
    wait_for(WAIT, "eu-west at 4 replicas", || {
        web_in(&fleet, "member2", "{.spec.replicas}") == "4"
    });

    // A rule that cannot apply in us-east: the binding and the Work say
    // so, and member1 keeps what it had.
    fleet.apply(
        r#"
apiVersion: policy.karmada.io/v1alpha1
kind: ClusterOverridePolicy
metadata:
  name: surge
spec:
  resourceSelectors:
    - {apiVersion: apps/v1, kind: Deployment}
  overrideRules:
    - targetCluster: {clusterNames: [member1]}
      overriders:
        plaintext:
          - {path: /spec/template/spec/containers/1/image, operator: replace, value: busybox}
"#,
    );
    let condition = "{.status.conditions[?(@.type==\"OverridesApplied\")]}";
    wait_for(WAIT, "the binding to report the failed override", || {
        let c = fleet.jsonpath_hub(&["get", "rb", "web-deployment"], condition);
        c.contains("\"status\":\"False\"")
            && c.contains("OverrideFailed")
            && c.contains("member1: ClusterOverridePolicy/surge: overrideRules[0].plaintext[0]")
    });
    let work_condition = fleet.hub.ok(&[
        "get",
        "works",
        "-n",
        "karmada-es-member1",
        "-o",
        "jsonpath={.items[0].status.conditions[?(@.type==\"OverridesApplied\")].reason}",
    ]);
    assert_eq!(work_condition.trim(), "OverrideFailed");
    assert_eq!(web_in(&fleet, "member1", "{.spec.replicas}"), "3");
    assert_eq!(web_in(&fleet, "member2", "{.spec.replicas}"), "4");
    // And an Event on the template says it, as Karmada's.
    let events = || {
        fleet.hub.ok(&[
            "get",
            "events",
            "-o",
            "jsonpath={range .items[?(@.involvedObject.name==\"web\")]}{.type} {.reason}: {.message}{\"\\n\"}{end}",
        ])
    };
    wait_for(WAIT, "the Event of the failure", || {
        events().contains("Warning ApplyOverridePolicyFailed: member1: ClusterOverridePolicy/surge")
    });

    // Fixed (here: removed), the condition turns True again.
    fleet.hub.ok(&["delete", "clusteroverridepolicy", "surge"]);
    wait_for(WAIT, "the binding's overrides to apply again", || {
        fleet
            .jsonpath_hub(&["get", "rb", "web-deployment"], condition)
            .contains("\"status\":\"True\"")
    });
    wait_for(WAIT, "the Event of success", || {
        events().contains("Normal ApplyOverridePolicySucceed")
    });

    // An operator Karmada does not have is refused when written.
    let out = fleet.hub.kubectl_stdin(
        &["apply", "-f", "-"],
        Some(
            r#"
apiVersion: policy.karmada.io/v1alpha1
kind: OverridePolicy
metadata: {name: typo}
spec:
  overrideRules:
    - overriders:
        commandOverrider: [{containerName: web, operator: replace, value: [sh]}]
"#,
        ),
    );
    assert!(!out.status.success());
    assert_has(&stderr(&out), &["Unsupported value", "replace"]);
}

/// A Deployment of 4 divided by capacity over member1 and member2, whose
/// policy fails over from a cluster NotReady for 2 s; `extra` is more of
/// the policy's `failover`.
fn failing_over(name: &str, extra: &str) -> String {
    format!(
        r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
  labels: {{app: {name}}}
spec:
  replicas: 4
  selector:
    matchLabels: {{app: {name}}}
  template:
    metadata:
      labels: {{app: {name}}}
    spec:
      containers:
        - name: api
          image: nginx:1.27
---
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata:
  name: {name}
spec:
  resourceSelectors:
    - {{apiVersion: apps/v1, kind: Deployment, name: {name}}}
  failover:
    cluster: {{purgeMode: Gracefully}}{extra}
  placement:
    clusterAffinity:
      clusterNames: [member1, member2]
    clusterTolerations:
      - {{key: cluster.karmada.io/not-ready, operator: Exists, effect: NoExecute, tolerationSeconds: 2}}
    replicaScheduling:
      replicaSchedulingType: Divided
      replicaDivisionPreference: Weighted
      weightPreference: {{dynamicWeight: AvailableReplicas}}
"#
    )
}

#[test]
fn a_lost_member_fails_over_gracefully_and_a_rebalancer_restores_the_division() {
    // Pods that take a while to start: the new placement is not healthy
    // at once, so the eviction lasts long enough to be seen.
    let fleet = Fleet::with_member_args(
        &[("member1", "us-east"), ("member2", "eu-west")],
        &["--pod-startup", "3s"],
    );
    fleet.apply(&failing_over("api", ""));
    // The same, opted into returning once member2 is back for 2 s.
    fleet.apply(&failing_over(
        "back",
        "\n    returnWhenRecovered: {afterSeconds: 2}",
    ));
    let replicas =
        |d: &str, m: &str| jsonpath(fleet.member(m), &["get", "deploy", d], "{.spec.replicas}");
    let api_in = |m: &str| replicas("api", m);
    wait_for(WAIT, "2 and 2 replicas", || {
        api_in("member1") == "2"
            && api_in("member2") == "2"
            && replicas("back", "member1") == "2"
            && replicas("back", "member2") == "2"
    });
    let member2_work = || {
        fleet
            .hub
            .ok(&["get", "works", "-n", "karmada-es-member2", "-o", "name"])
            .lines()
            .any(|w| w.contains("/api-"))
    };
    let task = |field: &str| {
        fleet.jsonpath_hub(
            &["get", "rb", "api-deployment"],
            &format!("{{.spec.gracefulEvictionTasks[?(@.fromCluster==\"member2\")].{field}}}"),
        )
    };

    member_fault(&fleet, "member2", &["unreachable", "--mode", "refuse"]);
    // Evicted after the failure threshold and the toleration; the old
    // Work stays while the eviction lasts.
    // Whether member2's Work exists, read between two sightings of its
    // eviction task (so the task lasted the whole read); None if not.
    let work_while_evicting = || {
        let evicting = || task("reason") == "TaintUntolerated";
        if !evicting() {
            return None;
        }
        let work = member2_work();
        evicting().then_some(work)
    };
    wait_for(WAIT, "member2 to be evicted, its Work kept", || {
        work_while_evicting()
            .map(|kept| assert!(kept, "member2's Work went while its eviction lasted"))
            .is_some()
    });
    assert_has(
        &task("message"),
        &["cluster.karmada.io/not-ready:NoExecute"],
    );
    assert_eq!(task("purgeMode"), "Gracefully");
    wait_for(WAIT, "member2's share on member1", || {
        api_in("member1") == "4"
    });
    // member1's new pods are still starting (3 s): member2's copy stays.
    wait_for(WAIT, "member2's Work still kept", || {
        work_while_evicting()
            .map(|kept| assert!(kept, "member2's Work went while its eviction lasted"))
            .is_some()
    });
    let clusters = fleet.jsonpath_hub(&["get", "rb", "api-deployment"], "{.spec.clusters[*].name}");
    assert_eq!(clusters, "member1");
    // Once member1 runs all four, the task goes and member2's Work is
    // deleted: it waits, terminating, to remove the copy once member2 is
    // back, so that nothing runs there unaccounted for.
    let member2_work_deleting = || {
        fleet
            .jsonpath_hub(
                &["get", "works", "-n", "karmada-es-member2"],
                "{range .items[*]}{.metadata.name} {.metadata.deletionTimestamp}{\"\\n\"}{end}",
            )
            .lines()
            .any(|w| w.starts_with("api-") && w.split(' ').nth(1).is_some_and(|t| !t.is_empty()))
    };
    wait_for(WAIT, "the eviction to finish", || {
        task("reason").is_empty() && member2_work_deleting()
    });
    wait_for(WAIT, "4 ready on the hub", || {
        fleet.jsonpath_hub(&["get", "deploy", "api"], "{.status.readyReplicas}") == "4"
    });

    // Back, member2 gets nothing by itself (no churn, as Karmada), except
    // for the binding that opted into returning, once member2 has been
    // Ready for 2 s...
    member_fault(&fleet, "member2", &["reachable"]);
    fleet.wait_ready("member2");
    wait_for(WAIT, "member2's old copy removed, its Work gone", || {
        !exists(fleet.member("member2"), &["get", "deploy", "api"]) && !member2_work()
    });
    wait_for(WAIT, "the opted-in Deployment back to 2 and 2", || {
        replicas("back", "member1") == "2" && replicas("back", "member2") == "2"
    });
    assert_eq!(
        fleet.jsonpath_hub(&["get", "rb", "api-deployment"], "{.spec.clusters[*].name}"),
        "member1"
    );
    // ...until a WorkloadRebalancer asks for a fresh division.
    fleet.apply(
        r#"
apiVersion: apps.karmada.io/v1alpha1
kind: WorkloadRebalancer
metadata: {name: after-recovery}
spec:
  workloads:
    - {apiVersion: apps/v1, kind: Deployment, namespace: default, name: api}
    - {apiVersion: apps/v1, kind: Deployment, namespace: default, name: missing}
"#,
    );
    wait_for(WAIT, "2 and 2 replicas again", || {
        api_in("member1") == "2" && api_in("member2") == "2"
    });
    let results = fleet.jsonpath_hub(
        &["get", "workloadrebalancer", "after-recovery"],
        "{.status.observedWorkloads[*].result}",
    );
    assert_eq!(results, "Successful Failed");
    assert_has(
        &fleet.jsonpath_hub(
            &["get", "workloadrebalancer", "after-recovery"],
            "{.status.observedWorkloads[1].reason}",
        ),
        &["ReferencedBindingNotFound"],
    );
}

#[test]
fn a_cluster_taint_policy_taints_a_failed_member_and_its_noexecute_evicts() {
    let fleet = Fleet::new(&[("member1", "us-east"), ("member2", "eu-west")]);
    // Bad policies are refused whole, with upstream's reasons.
    let bad = |taints: &str, operator: &str| {
        fleet.hub.kubectl_stdin(
            &["apply", "-f", "-"],
            Some(&format!(
                "apiVersion: policy.karmada.io/v1alpha1\nkind: ClusterTaintPolicy\nmetadata: {{name: bad}}\nspec:\n  addOnConditions: [{{conditionType: Ready, operator: {operator}, statusValues: [\"False\"]}}]\n  taints: {taints}\n"
            )),
        )
    };
    let duplicate = bad(
        "[{key: k, effect: NoSchedule}, {key: k, effect: NoSchedule, value: v}]",
        "In",
    );
    assert!(!duplicate.status.success());
    assert_has(&stderr(&duplicate), &["spec.taints[1]", "Duplicate value"]);
    let operator = bad("[{key: k, effect: NoSchedule}]", "Equals");
    assert!(!operator.status.success());
    assert_has(
        &stderr(&operator),
        &["spec.addOnConditions[0].operator", "Unsupported value"],
    );
    let none = bad("[]", "In");
    assert!(!none.status.success());
    assert_has(&stderr(&none), &["spec.taints", "at least 1 items"]);
    assert!(!exists(&fleet.hub, &["get", "clustertaintpolicy", "bad"]));

    fleet.apply(
        r#"
apiVersion: policy.karmada.io/v1alpha1
kind: ClusterTaintPolicy
metadata: {name: evict-failed-eu}
spec:
  targetClusters: {clusterNames: [member2]}
  addOnConditions: [{conditionType: Ready, operator: NotIn, statusValues: ["True"]}]
  removeOnConditions: [{conditionType: Ready, operator: In, statusValues: ["True"]}]
  taints: [{key: example.com/failed, effect: NoExecute}]
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: shop
spec:
  replicas: 4
  selector:
    matchLabels: {app: shop}
  template:
    metadata:
      labels: {app: shop}
    spec:
      containers:
        - {name: shop, image: nginx:1.27}
---
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata:
  name: shop
spec:
  resourceSelectors:
    - {apiVersion: apps/v1, kind: Deployment, name: shop}
  failover:
    cluster: {purgeMode: Directly}
  placement:
    clusterAffinity:
      clusterNames: [member1, member2]
    replicaScheduling:
      replicaSchedulingType: Divided
      replicaDivisionPreference: Weighted
      weightPreference: {dynamicWeight: AvailableReplicas}
"#,
    );
    let shop_in = |m: &str| {
        jsonpath(
            fleet.member(m),
            &["get", "deploy", "shop"],
            "{.spec.replicas}",
        )
    };
    wait_for(WAIT, "2 and 2 replicas", || {
        shop_in("member1") == "2" && shop_in("member2") == "2"
    });
    let taints = |m: &str| {
        fleet.jsonpath_hub(
            &["get", "cluster", m],
            "{range .spec.taints[*]}{.key}:{.effect} {end}",
        )
    };
    assert!(!taints("member2").contains("example.com/failed"));

    // member2 fails: Ready turns False, the policy adds its NoExecute
    // taint, and the binding, tolerating it for no time, leaves member2
    // at once (the not-ready taint alone would wait its default 300 s).
    member_fault(&fleet, "member2", &["unreachable", "--mode", "refuse"]);
    wait_for(WAIT, "member2 tainted by the policy", || {
        taints("member2").contains("example.com/failed:NoExecute")
    });
    assert!(!taints("member1").contains("example.com/failed"));
    wait_for(WAIT, "member2's share on member1", || {
        shop_in("member1") == "4"
    });
    assert_eq!(
        fleet.jsonpath_hub(
            &["get", "rb", "shop-deployment"],
            "{.spec.clusters[*].name}"
        ),
        "member1"
    );
    let events = fleet.hub.ok(&[
        "get",
        "events",
        "-n",
        "default",
        "--field-selector",
        "involvedObject.name=member2",
    ]);
    assert_has(
        &events,
        &["TaintClusterSucceed", "example.com/failed:NoExecute"],
    );

    // Back: Ready again, and the policy takes its taint away.
    member_fault(&fleet, "member2", &["reachable"]);
    wait_for(WAIT, "member2 untainted", || {
        !taints("member2").contains("example.com/failed")
    });
    // Deleting the policy leaves the taints as they are (as Karmada).
    fleet
        .hub
        .ok(&["delete", "clustertaintpolicy", "evict-failed-eu"]);
}

const KEPT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: kept
spec:
  replicas: 2
  selector:
    matchLabels: {app: kept}
  template:
    metadata:
      labels: {app: kept}
    spec:
      containers:
        - {name: kept, image: nginx:1.27}
"#;

/// The policy for [`KEPT`], with `extra` in its spec.
fn kept_policy(extra: &str) -> String {
    format!(
        r#"
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata:
  name: kept
spec:
  resourceSelectors:
    - {{apiVersion: apps/v1, kind: Deployment, name: kept}}
  placement:
    clusterAffinity:
      clusterNames: [member1, member2]{extra}
"#
    )
}

#[test]
fn suspended_dispatching_holds_changes_back_and_preserved_copies_outlive_their_template() {
    let fleet = Fleet::new(&[("member1", "us-east"), ("member2", "eu-west")]);
    fleet.apply(KEPT);
    fleet.apply(&kept_policy(""));
    let kept_in = |m: &str| {
        jsonpath(
            fleet.member(m),
            &["get", "deploy", "kept"],
            "{.spec.replicas}",
        )
    };
    wait_for(WAIT, "2 replicas in each", || {
        kept_in("member1") == "2" && kept_in("member2") == "2"
    });
    let work_of = |m: &str, path: &str| {
        fleet.jsonpath_hub(
            &["get", "works", "-n", &format!("karmada-es-{m}")],
            &format!("{{.items[*]{path}}}"),
        )
    };
    let dispatching = |m: &str| work_of(m, ".status.conditions[?(@.type==\"Dispatching\")].reason");

    // Suspended on member2 only: a change reaches member1, not member2,
    // and member2's Work says why.
    fleet.apply(&kept_policy(
        "\n  suspension:\n    dispatchingOnClusters: {clusterNames: [member2]}",
    ));
    wait_for(WAIT, "member2's Work suspended", || {
        dispatching("member2") == "SuspendDispatching"
    });
    fleet
        .hub
        .ok(&["scale", "deploy", "kept", "--replicas", "3"]);
    wait_for(WAIT, "3 replicas in member1", || kept_in("member1") == "3");
    wait_for(WAIT, "member2's Work holding 3 replicas", || {
        work_of("member2", ".spec.workload.manifests[0].spec.replicas") == "3"
    });
    assert_eq!(dispatching("member2"), "SuspendDispatching");
    assert_eq!(kept_in("member2"), "2", "a suspended member was changed");

    // Suspended everywhere, then resumed: both catch up.
    fleet.apply(&kept_policy("\n  suspension: {dispatching: true}"));
    wait_for(WAIT, "both Works suspended", || {
        dispatching("member1") == "SuspendDispatching"
    });
    fleet
        .hub
        .ok(&["scale", "deploy", "kept", "--replicas", "4"]);
    wait_for(WAIT, "the Works holding 4 replicas", || {
        work_of("member1", ".spec.workload.manifests[0].spec.replicas") == "4"
            && work_of("member2", ".spec.workload.manifests[0].spec.replicas") == "4"
    });
    assert_eq!(
        (kept_in("member1"), kept_in("member2")),
        ("3".into(), "2".into())
    );
    fleet.apply(&kept_policy(""));
    wait_for(WAIT, "4 replicas in each once resumed", || {
        kept_in("member1") == "4" && kept_in("member2") == "4"
    });
    assert_eq!(dispatching("member1"), "Dispatching");

    // Preserved: deleting the template leaves the members' copies, no
    // longer marked as Flotilla's.
    fleet.apply(&kept_policy("\n  preserveResourcesOnDeletion: true"));
    wait_for(WAIT, "the Works preserving", || {
        work_of("member1", ".spec.preserveResourcesOnDeletion") == "true"
            && work_of("member2", ".spec.preserveResourcesOnDeletion") == "true"
    });
    fleet.hub.ok(&["delete", "deploy", "kept"]);
    wait_for(WAIT, "the Works gone", || {
        fleet
            .hub
            .ok(&["get", "works", "-A", "-o", "name"])
            .is_empty()
    });
    for m in ["member1", "member2"] {
        assert_eq!(kept_in(m), "4", "{m}'s copy went");
        let marks = jsonpath(
            fleet.member(m),
            &["get", "deploy", "kept"],
            "{.metadata.labels} {.metadata.annotations}",
        );
        assert!(!marks.contains("karmada.io/managed"), "{m}: {marks}");
        assert!(!marks.contains("work.karmada.io/name"), "{m}: {marks}");
    }
}

#[test]
fn an_application_unhealthy_in_one_member_moves_to_the_other() {
    let fleet = Fleet::new(&[("member1", "us-east"), ("member2", "eu-west")]);
    fleet.apply(&failing_over(
        "shop",
        "\n    application: {decisionConditions: {tolerationSeconds: 2}, purgeMode: Directly}",
    ));
    let replicas = |m: &str| {
        jsonpath(
            fleet.member(m),
            &["get", "deploy", "shop"],
            "{.spec.replicas}",
        )
    };
    wait_for(WAIT, "2 and 2 replicas, ready", || {
        replicas("member1") == "2"
            && replicas("member2") == "2"
            && fleet.jsonpath_hub(&["get", "deploy", "shop"], "{.status.readyReplicas}") == "4"
    });
    // member2 stays reachable and Ready; only the workload fails there.
    member_fault(
        &fleet,
        "member2",
        &["pods-unready", "-n", "default", "-l", "app=shop"],
    );
    wait_for(WAIT, "member2 evicted for the application", || {
        fleet.jsonpath_hub(
            &["get", "rb", "shop-deployment"],
            "{.spec.gracefulEvictionTasks[0].reason}",
        ) == "ApplicationFailure"
            || replicas("member1") == "4"
    });
    wait_for(WAIT, "all four on member1", || replicas("member1") == "4");
    // purgeMode Directly: member2's copy goes at once, not after member1
    // is healthy.
    wait_for(WAIT, "member2's copy removed", || {
        !exists(fleet.member("member2"), &["get", "deploy", "shop"])
    });
    wait_for(
        WAIT,
        "the eviction to end once member1 runs all four",
        || {
            fleet
                .jsonpath_hub(
                    &["get", "rb", "shop-deployment"],
                    "{.spec.gracefulEvictionTasks}",
                )
                .is_empty()
                && fleet.jsonpath_hub(&["get", "deploy", "shop"], "{.status.readyReplicas}") == "4"
        },
    );
    assert_eq!(
        fleet.jsonpath_hub(
            &["get", "cluster", "member2"],
            "{.status.conditions[?(@.type==\"Ready\")].status}"
        ),
        "True"
    );
}

/// Karmada's stateful failover: a workload on one cluster that fails
/// there moves to the other with the state its policy preserves (read
/// from its status where it failed) injected as labels.
#[test]
fn a_failing_over_workload_carries_its_preserved_state_to_its_new_cluster() {
    let fleet = Fleet::new(&[("member1", "us-east"), ("member2", "eu-west")]);
    fleet.apply(
        r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: counter, labels: {app: counter}}
spec:
  replicas: 2
  selector: {matchLabels: {app: counter}}
  template:
    metadata: {labels: {app: counter}}
    spec:
      containers: [{name: c, image: nginx:1.27}]
---
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata: {name: counter}
spec:
  resourceSelectors:
    - {apiVersion: apps/v1, kind: Deployment, name: counter}
  failover:
    application:
      decisionConditions: {tolerationSeconds: 2}
      purgeMode: Immediately
      statePreservation:
        rules:
          - aliasLabelName: failover.example.io/replicas
            jsonPath: "{ .replicas }"
  placement:
    clusterAffinity:
      clusterNames: [member1, member2]
    spreadConstraints:
      - {spreadByField: cluster, maxGroups: 1, minGroups: 1}
    replicaScheduling: {replicaSchedulingType: Duplicated}
"#,
    );
    let holder = |m: &str| exists(fleet.member(m), &["get", "deploy", "counter"]);
    wait_for(WAIT, "the workload ready on one cluster", || {
        (holder("member1") ^ holder("member2"))
            && fleet.jsonpath_hub(&["get", "deploy", "counter"], "{.status.readyReplicas}") == "2"
    });
    let (from, to) = if holder("member1") {
        ("member1", "member2")
    } else {
        ("member2", "member1")
    };
    // The new cluster's pods will not turn ready either, so the eviction
    // (and the state it carries) lasts while this is checked.
    for m in [to, from] {
        member_fault(
            &fleet,
            m,
            &["pods-unready", "-n", "default", "-l", "app=counter"],
        );
    }
    let label = "{.metadata.labels.failover\\.example\\.io/replicas}";
    wait_for(
        WAIT,
        "the workload moved, with its state as a label",
        || jsonpath(fleet.member(to), &["get", "deploy", "counter"], label) == "2",
    );
    wait_for(WAIT, "the old copy purged at once", || !holder(from));
    let task = |path: &str| {
        fleet.jsonpath_hub(
            &["get", "rb", "counter-deployment"],
            &format!("{{.spec.gracefulEvictionTasks[0].{path}}}"),
        )
    };
    assert_eq!(task("fromCluster"), from);
    assert_eq!(task("reason"), "ApplicationFailure");
    assert_eq!(
        task("preservedLabelState"),
        r#"{"failover.example.io/replicas":"2"}"#
    );
    assert_eq!(task("clustersBeforeFailover"), format!(r#"["{from}"]"#));
    // The template itself is not labelled: the state is the move's.
    assert_eq!(fleet.jsonpath_hub(&["get", "deploy", "counter"], label), "");
    // A purge mode Karmada does not know is refused, with the ones it does.
    let out = fleet.hub.kubectl(&[
        "patch",
        "pp",
        "counter",
        "--type=merge",
        "-p",
        r#"{"spec": {"failover": {"application": {"purgeMode": "Eventually"}}}}"#,
    ]);
    assert!(!out.status.success());
    assert_has(
        &stderr(&out),
        &[
            "Unsupported value: \"Eventually\"",
            "\"Directly\"",
            "\"Graciously\"",
        ],
    );
}

#[test]
fn an_agent_token_reaches_its_own_cluster_and_nothing_else() {
    let fleet = Fleet::new(&[("member1", "us-east")]);
    let hub = fleet.hub.kubeconfig.to_str().unwrap();
    let out = flotilla(&[
        "token",
        "create",
        "--kubeconfig",
        hub,
        "--cluster",
        "member3",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let token = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let as_agent = |args: &[&str]| {
        let mut all = vec!["--token", token.as_str()];
        all.extend_from_slice(args);
        fleet.hub.kubectl(&all)
    };
    let own = as_agent(&["get", "works", "-n", "karmada-es-member3"]);
    assert!(own.status.success(), "{}", stderr(&own));
    let other = as_agent(&["get", "works", "-n", "karmada-es-member1"]);
    assert!(!other.status.success());
    assert_has(
        &stderr(&other),
        &[
            "works.work.karmada.io is forbidden: User \"system:bootstrap:",
            "cannot list resource \"works\" in API group \"work.karmada.io\" in the namespace \"karmada-es-member1\"",
        ],
    );
    for args in [
        &["get", "cluster", "member1"][..],
        &["get", "secrets", "-n", "karmada-cluster"],
        &["get", "works", "-A"],
        &["get", "deploy", "-A"],
    ] {
        let out = as_agent(args);
        assert!(!out.status.success(), "{args:?} was allowed");
        assert_has(&stderr(&out), &["forbidden"]);
    }
    // It registers its own cluster, and no other.
    let register = |name: &str| {
        let yaml = format!(
            "apiVersion: cluster.karmada.io/v1alpha1\nkind: Cluster\nmetadata: {{name: {name}}}\nspec: {{syncMode: Pull}}\n"
        );
        let args = ["--token", token.as_str(), "create", "-f", "-"];
        fleet.hub.kubectl_stdin(&args, Some(&yaml))
    };
    let own = register("member3");
    assert!(own.status.success(), "{}", stderr(&own));
    let impostor = register("member4");
    assert!(!impostor.status.success());
    assert_has(&stderr(&impostor), &["forbidden"]);
    // The admin still reaches everything.
    fleet.hub.ok(&["get", "works", "-A"]);

    // Its Lease says it is alive; unrenewed past the grace period (2 s
    // here), the hub marks the cluster Unknown and unreachable.
    let now = || format!("{:.6}", jiff::Timestamp::now());
    let lease = format!(
        "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata: {{name: member3, namespace: karmada-cluster}}\nspec: {{holderIdentity: member3, leaseDurationSeconds: 40, renewTime: \"{}\"}}\n",
        now()
    );
    let out = fleet.hub.kubectl_stdin(
        &["--token", token.as_str(), "create", "-f", "-"],
        Some(&lease),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let report_ready = || {
        let status = format!(
            r#"{{"status":{{"apiEnablements":[{{"groupVersion":"v1","resources":[{{"name":"configmaps","kind":"ConfigMap"}}]}}],"conditions":[{{"type":"Ready","status":"True","reason":"ClusterReady","message":"reported by the agent","lastTransitionTime":"{}"}}]}}}}"#,
            jiff::Timestamp::now().round(jiff::Unit::Second).unwrap()
        );
        let out = as_agent(&[
            "patch",
            "cluster",
            "member3",
            "--subresource=status",
            "--type=merge",
            "-p",
            &status,
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
    };
    report_ready();
    let ready = || {
        fleet.jsonpath_hub(
            &["get", "cluster", "member3"],
            "{.status.conditions[?(@.type==\"Ready\")].reason}",
        )
    };
    let taints = || fleet.jsonpath_hub(&["get", "cluster", "member3"], "{.spec.taints[*].key}");
    wait_for(WAIT, "the lapsed lease to make member3 Unknown", || {
        ready() == "ClusterStatusUnknown" && taints() == "cluster.karmada.io/unreachable"
    });
    // The agent comes back: renews and reports Ready; the taint goes.
    let renew = format!(r#"{{"spec":{{"renewTime":"{}"}}}}"#, now());
    let out = as_agent(&[
        "patch",
        "lease",
        "member3",
        "-n",
        "karmada-cluster",
        "--type=merge",
        "-p",
        &renew,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    report_ready();
    wait_for(WAIT, "member3 Ready without the taint", || {
        ready() == "ClusterReady" && taints().is_empty()
    });
    // Its Works wait for it: the hub places them, and does not try to
    // reach a cluster it cannot (no Applied condition from the hub).
    fleet.apply(&configmap_policy(
        "for-member3",
        "    clusterAffinity:\n      clusterNames: [member3]",
    ));
    wait_for(WAIT, "member3's Work, readable by its agent", || {
        let out = as_agent(&["get", "works", "-n", "karmada-es-member3", "-o", "name"]);
        String::from_utf8_lossy(&out.stdout).contains("for-member3")
    });
    std::thread::sleep(Duration::from_millis(500));
    let applied = fleet.hub.ok(&[
        "get",
        "works",
        "-n",
        "karmada-es-member3",
        "-o",
        "jsonpath={.items[*].status.conditions[?(@.type==\"Applied\")].status}",
    ]);
    assert_eq!(applied.trim(), "", "the hub applied a Pull cluster's Work");

    let bad = flotilla(&[
        "token",
        "create",
        "--kubeconfig",
        hub,
        "--cluster",
        "Member_3",
    ]);
    assert!(!bad.status.success());
    assert_has(&stderr(&bad), &["--cluster", "lowercase"]);
}

#[test]
fn a_pull_member_converges_through_its_agent_like_a_push_one() {
    // member1 is joined (Push); member2 is reached only by its agent.
    let mut fleet = Fleet::new(&[("member1", "us-east")]);
    let agent_args = fleet.add_pull_member("member2", "eu-west", &[]);
    let agent_args: Vec<&str> = agent_args.iter().map(String::as_str).collect();
    let agent = Running::start(&agent_args);
    fleet.wait_ready("member2");
    let cluster = |path: &str| fleet.jsonpath_hub(&["get", "cluster", "member2"], path);
    assert_eq!(cluster("{.spec.syncMode}"), "Pull");
    assert_eq!(cluster("{.spec.region}"), "eu-west");
    wait_for(WAIT, "the member's nodes reported", || {
        cluster("{.status.nodeSummary.readyNum}") == "2"
    });
    assert!(cluster("{.status.kubernetesVersion}").starts_with("v1."));
    let clusters = fleet.hub.ok(&["get", "clusters"]);
    assert_has(&clusters, &["member2", "Pull", "True"]);

    // Divided 1:2 between the two: the agent applies member2's share and
    // reports it back, and the hub sums both as for two Push members.
    fleet.apply(NGINX);
    wait_for(WAIT, "1 and 2 replicas in member1 and member2", || {
        replicas_in(&fleet, "member1") == "1" && replicas_in(&fleet, "member2") == "2"
    });
    wait_for(WAIT, "3/3 ready on the hub", || {
        fleet.jsonpath_hub(&["get", "deploy", "nginx"], "{.status.readyReplicas}") == "3"
    });
    let rb = fleet.hub.ok(&["get", "rb", "nginx-deployment"]);
    assert_has(&rb, &["SCHEDULED", "FULLYAPPLIED", "True"]);
    let labels = jsonpath(
        fleet.member("member2"),
        &["get", "deploy", "nginx"],
        "{.metadata.labels}",
    );
    assert_has(&labels, &["\"karmada.io/managed\":\"true\""]);
    fleet
        .hub
        .ok(&["scale", "deploy", "nginx", "--replicas", "6"]);
    wait_for(WAIT, "2 and 4 replicas after scaling", || {
        replicas_in(&fleet, "member1") == "2" && replicas_in(&fleet, "member2") == "4"
    });
    // Drift in member2 is reverted by the agent, as the hub does for Push.
    fleet
        .member("member2")
        .ok(&["scale", "deploy", "nginx", "--replicas", "1"]);
    wait_for(WAIT, "member2's copy restored", || {
        replicas_in(&fleet, "member2") == "4"
    });

    // The agent stops: its lease lapses and the hub says it does not know.
    drop(agent);
    wait_for(WAIT, "member2 Unknown", || {
        cluster("{.status.conditions[?(@.type==\"Ready\")].status}") == "Unknown"
            && cluster("{.spec.taints[*].key}") == "cluster.karmada.io/unreachable"
    });
    // Deleted meanwhile, the template leaves member2's Work waiting for
    // the agent: nobody else may say its copy is gone.
    fleet.hub.ok(&["delete", "deploy", "nginx"]);
    wait_for(WAIT, "member1's copy deleted", || {
        !exists(fleet.member("member1"), &["get", "deploy", "nginx"])
    });
    let terminating = || {
        fleet.jsonpath_hub(
            &["get", "works", "-n", "karmada-es-member2"],
            "{.items[*].metadata.deletionTimestamp}",
        )
    };
    wait_for(WAIT, "member2's Work terminating", || {
        !terminating().is_empty()
    });
    assert!(exists(fleet.member("member2"), &["get", "deploy", "nginx"]));
    // Back, it reports Ready again, the taint goes, and it removes the
    // copy and releases the Work.
    let _agent = Running::start(&agent_args);
    wait_for(WAIT, "member2 Ready again", || {
        cluster("{.status.conditions[?(@.type==\"Ready\")].status}") == "True"
            && cluster("{.spec.taints[*].key}").is_empty()
    });
    wait_for(WAIT, "member2's copy deleted and its Work gone", || {
        !exists(fleet.member("member2"), &["get", "deploy", "nginx"])
            && fleet
                .hub
                .ok(&["get", "works", "-n", "karmada-es-member2", "-o", "name"])
                .is_empty()
    });

    // Its token cannot register a cluster under another name.
    let agent_kubeconfig = fleet.hub.dir.path().join("member2-agent.kubeconfig");
    let member_kubeconfig = &fleet.member("member2").kubeconfig;
    let other = flotilla(&[
        "agent",
        "--cluster-name",
        "member4",
        "--kubeconfig",
        agent_kubeconfig.to_str().unwrap(),
        "--cluster-kubeconfig",
        member_kubeconfig.to_str().unwrap(),
    ]);
    assert!(!other.status.success());
    assert_has(
        &stderr(&other),
        &["cannot register cluster member4", "forbidden"],
    );
}

fn configmap_policy(name: &str, placement: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: ConfigMap
metadata:
  name: {name}
data: {{greeting: hello}}
---
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata:
  name: {name}
spec:
  resourceSelectors:
    - apiVersion: v1
      kind: ConfigMap
      name: {name}
  placement:
{placement}
"#
    )
}

fn holders(fleet: &Fleet, args: &[&str]) -> Vec<String> {
    fleet
        .members
        .iter()
        .filter(|(_, m)| exists(m, args))
        .map(|(n, _)| n.clone())
        .collect()
}

fn wait_holders(fleet: &Fleet, args: &[&str], want: &[&str]) {
    wait_for(WAIT, &format!("{args:?} exactly in {want:?}"), || {
        holders(fleet, args) == want
    });
}

#[test]
fn placement_follows_labels_exclusions_regions_and_fields() {
    let fleet = Fleet::new(&[
        ("member1", "us-east"),
        ("member2", "eu-west"),
        ("member3", "eu-west"),
    ]);
    // Duplicated to the clusters a labelSelector picks.
    fleet.apply(&configmap_policy(
        "by-label",
        "    clusterAffinity:\n      labelSelector:\n        matchLabels: {region: eu-west}",
    ));
    wait_holders(&fleet, &["get", "cm", "by-label"], &["member2", "member3"]);
    // exclude.
    fleet.apply(&configmap_policy(
        "excluded",
        "    clusterAffinity:\n      exclude: [member2]",
    ));
    wait_holders(&fleet, &["get", "cm", "excluded"], &["member1", "member3"]);
    // A region fieldSelector.
    fleet.apply(&configmap_policy(
        "by-field",
        "    clusterAffinity:\n      fieldSelector:\n        matchExpressions:\n          - {key: region, operator: In, values: [us-east]}",
    ));
    wait_holders(&fleet, &["get", "cm", "by-field"], &["member1"]);
    // Spread over two regions: one cluster in each.
    fleet.apply(&configmap_policy(
        "spread",
        "    spreadConstraints:\n      - {spreadByField: region, maxGroups: 2, minGroups: 2}",
    ));
    wait_for(WAIT, "spread over both regions", || {
        let h = holders(&fleet, &["get", "cm", "spread"]);
        h.len() == 2 && h.contains(&"member1".to_string())
    });
    // The copies are the template's, and only where the policy says.
    assert_eq!(
        jsonpath(
            fleet.member("member2"),
            &["get", "cm", "by-label"],
            "{.data.greeting}"
        ),
        "hello"
    );
    // An update of the template reaches every copy.
    fleet.hub.ok(&[
        "patch",
        "cm",
        "by-label",
        "--type=merge",
        "-p",
        r#"{"data":{"greeting":"hi"}}"#,
    ]);
    wait_for(WAIT, "updated copies", || {
        ["member2", "member3"].iter().all(|m| {
            jsonpath(
                fleet.member(m),
                &["get", "cm", "by-label"],
                "{.data.greeting}",
            ) == "hi"
        })
    });
    // Changing the policy moves the object.
    fleet.hub.ok(&[
        "patch",
        "pp",
        "excluded",
        "--type=merge",
        "-p",
        r#"{"spec":{"placement":{"clusterAffinity":{"exclude":["member1","member3"]}}}}"#,
    ]);
    wait_holders(&fleet, &["get", "cm", "excluded"], &["member2"]);
    let no_fit = configmap_policy(
        "nowhere",
        "    clusterAffinity:\n      clusterNames: [member9]",
    );
    fleet.apply(&no_fit);
    wait_for(WAIT, "NoClusterFit reported", || {
        fleet.jsonpath_hub(
            &["get", "rb", "nowhere-configmap"],
            "{.status.conditions[?(@.type==\"Scheduled\")].reason}",
        ) == "NoClusterFit"
    });
}

const WIDGET_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              x-kubernetes-preserve-unknown-fields: true
---
apiVersion: policy.karmada.io/v1alpha1
kind: ClusterPropagationPolicy
metadata:
  name: crds-and-widgets
spec:
  resourceSelectors:
    - apiVersion: apiextensions.k8s.io/v1
      kind: CustomResourceDefinition
      name: widgets.example.com
    - apiVersion: example.com/v1
      kind: Widget
  placement:
    clusterAffinity:
      clusterNames: [member1, member2]
"#;

#[test]
fn a_custom_resource_propagates_with_its_crd_and_goes_with_its_template() {
    let fleet = Fleet::new(&[("member1", "us-east"), ("member2", "eu-west")]);
    fleet.apply(WIDGET_CRD);
    wait_holders(
        &fleet,
        &["get", "crd", "widgets.example.com"],
        &["member1", "member2"],
    );
    // The hub picks up the new kind and its objects, in a namespace the
    // members do not have yet.
    fleet.apply("apiVersion: v1\nkind: Namespace\nmetadata: {name: shop}\n");
    fleet.apply(
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: gear, namespace: shop}\nspec: {teeth: 12}\n",
    );
    wait_holders(
        &fleet,
        &["get", "widget", "gear", "-n", "shop"],
        &["member1", "member2"],
    );
    assert_eq!(
        jsonpath(
            fleet.member("member2"),
            &["get", "widget", "gear", "-n", "shop"],
            "{.spec.teeth}"
        ),
        "12"
    );
    // Namespaces follow what is placed in them, nothing more.
    fleet.apply("apiVersion: v1\nkind: Namespace\nmetadata: {name: empty}\n");
    fleet.apply(&configmap_policy(
        "plain",
        "    clusterAffinity:\n      clusterNames: [member1]",
    ));
    wait_holders(&fleet, &["get", "cm", "plain"], &["member1"]);
    assert!(!exists(
        fleet.member("member1"),
        &["get", "namespace", "empty"]
    ));
    fleet.hub.ok(&["delete", "widget", "gear", "-n", "shop"]);
    wait_holders(&fleet, &["get", "widget", "gear", "-n", "shop"], &[]);
    fleet.hub.ok(&["delete", "cm", "plain"]);
    wait_holders(&fleet, &["get", "cm", "plain"], &[]);
}

#[test]
fn a_binding_of_a_kind_no_member_serves_is_placed_once_members_serve_it() {
    let fleet = Fleet::new(&[("member1", "us-east"), ("member2", "eu-west")]);
    // The CRD on the hub alone: the Gadget's binding has nowhere to go.
    let crd = WIDGET_CRD
        .split("---")
        .next()
        .unwrap_or_default()
        .replace("widget", "gadget")
        .replace("Widget", "Gadget");
    fleet.apply(&crd);
    fleet.apply(
        "apiVersion: example.com/v1\nkind: Gadget\nmetadata: {name: cog, namespace: default}\nspec: {size: 3}\n---\n\
         apiVersion: policy.karmada.io/v1alpha1\nkind: PropagationPolicy\nmetadata: {name: gadgets, namespace: default}\n\
         spec:\n  resourceSelectors: [{apiVersion: example.com/v1, kind: Gadget}]\n\
         \x20 placement: {clusterAffinity: {clusterNames: [member1, member2]}}\n",
    );
    let scheduled = |field: &str| {
        fleet.jsonpath_hub(
            &["get", "rb", "cog-gadget"],
            &format!("{{.status.conditions[?(@.type==\"Scheduled\")].{field}}}"),
        )
    };
    wait_for(WAIT, "the binding not scheduled", || {
        scheduled("status") == "False"
    });
    assert_has(&scheduled("message"), &["did not have the API resource"]);
    // The CRD reaches the members; their next status report names the
    // kind, and the binding is placed without any change to it.
    fleet.apply(
        "apiVersion: policy.karmada.io/v1alpha1\nkind: ClusterPropagationPolicy\nmetadata: {name: gadget-crd}\n\
         spec:\n  resourceSelectors: [{apiVersion: apiextensions.k8s.io/v1, kind: CustomResourceDefinition, name: gadgets.example.com}]\n\
         \x20 placement: {clusterAffinity: {clusterNames: [member1, member2]}}\n",
    );
    wait_holders(
        &fleet,
        &["get", "gadget", "cog", "-n", "default"],
        &["member1", "member2"],
    );
    assert_eq!(scheduled("status"), "True");
    assert_eq!(
        jsonpath(
            fleet.member("member2"),
            &["get", "gadget", "cog"],
            "{.spec.size}"
        ),
        "3"
    );
}

#[test]
fn an_existing_member_object_is_reported_then_taken_over_with_overwrite() {
    let fleet = Fleet::new(&[("member1", "us-east")]);
    let m = fleet.member("member1");
    // ConfigMaps already delivered to the member: the member object below
    // is seen by a running watch, not by the first read of the kind.
    fleet.apply(&configmap_policy(
        "first",
        "    clusterAffinity:\n      clusterNames: [member1]",
    ));
    wait_holders(&fleet, &["get", "cm", "first"], &["member1"]);
    let out = m.kubectl_stdin(
        &["create", "-f", "-"],
        Some(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {owner: member}\n",
        ),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    fleet.apply(&configmap_policy(
        "settings",
        "    clusterAffinity:\n      clusterNames: [member1]",
    ));
    wait_for(WAIT, "the conflict on the binding", || {
        fleet.jsonpath_hub(
            &["get", "rb", "settings-configmap"],
            "{.status.conditions[?(@.type==\"FullyApplied\")].status}",
        ) == "False"
    });
    let message = fleet.jsonpath_hub(
        &["get", "rb", "settings-configmap"],
        "{.status.aggregatedStatus[0].appliedMessage}",
    );
    assert_has(
        &message,
        &["already exists", "not managed by Flotilla", "Overwrite"],
    );
    assert_eq!(
        jsonpath(m, &["get", "cm", "settings"], "{.data.owner}"),
        "member"
    );
    let work = fleet.hub.ok(&["get", "work", "-n", "karmada-es-member1"]);
    assert_has(&work, &["ConfigMap", "False"]);
    // The refused Work goes (its template with it) and comes back: the
    // member's object is still not Flotilla's to take.
    fleet.hub.ok(&["delete", "cm", "settings"]);
    wait_for(WAIT, "the refused Work gone", || {
        !fleet
            .hub
            .ok(&["get", "work", "-n", "karmada-es-member1", "-o", "name"])
            .contains("settings")
    });
    fleet.apply(&configmap_policy(
        "settings",
        "    clusterAffinity:\n      clusterNames: [member1]",
    ));
    wait_for(WAIT, "the conflict reported again", || {
        fleet
            .jsonpath_hub(
                &["get", "rb", "settings-configmap"],
                "{.status.aggregatedStatus[0].appliedMessage}",
            )
            .contains("not managed by Flotilla")
    });
    assert_eq!(
        jsonpath(m, &["get", "cm", "settings"], "{.data.owner}"),
        "member"
    );
    // The policy says Overwrite: the member's copy becomes the template's.
    fleet.hub.ok(&[
        "patch",
        "pp",
        "settings",
        "--type=merge",
        "-p",
        r#"{"spec":{"conflictResolution":"Overwrite"}}"#,
    ]);
    wait_for(WAIT, "taken over", || {
        jsonpath(m, &["get", "cm", "settings"], "{.data.greeting}") == "hello"
            && jsonpath(
                m,
                &["get", "cm", "settings"],
                "{.metadata.labels.karmada\\.io/managed}",
            ) == "true"
    });
    wait_for(WAIT, "FullyApplied", || {
        fleet.jsonpath_hub(
            &["get", "rb", "settings-configmap"],
            "{.status.conditions[?(@.type==\"FullyApplied\")].status}",
        ) == "True"
    });
    // Drift in what Flotilla applies is reverted.
    m.ok(&[
        "patch",
        "cm",
        "settings",
        "--type=merge",
        "-p",
        r#"{"data":{"greeting":"drifted"}}"#,
    ]);
    wait_for(WAIT, "drift reverted", || {
        jsonpath(m, &["get", "cm", "settings"], "{.data.greeting}") == "hello"
    });
}

/// Work syncs the control plane has counted since it started.
fn work_syncs(fleet: &Fleet) -> u64 {
    fleet
        .hub
        .ok(&["get", "--raw", "/metrics"])
        .lines()
        .filter(|l| l.starts_with("work_sync_workload_duration_seconds_count"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

#[test]
fn a_restarted_control_plane_leaves_members_in_sync_untouched_and_repairs_what_changed() {
    let mut fleet = Fleet::new(&[("member1", "us-east")]);
    let to_member1 = "    clusterAffinity:\n      clusterNames: [member1]";
    for name in ["kept", "edited", "removed"] {
        fleet.apply(&configmap_policy(name, to_member1));
    }
    let m = fleet.member("member1");
    wait_for(WAIT, "all three in member1", || {
        ["kept", "edited", "removed"]
            .iter()
            .all(|n| jsonpath(m, &["get", "cm", n], "{.data.greeting}") == "hello")
    });
    let kept_version = jsonpath(m, &["get", "cm", "kept"], "{.metadata.resourceVersion}");
    // The hub's own objects for it, once their statuses have settled.
    fn hub_versions(fleet: &Fleet) -> [String; 2] {
        let rv = "{.metadata.resourceVersion}";
        [
            fleet.jsonpath_hub(&["get", "cm", "kept"], rv),
            fleet.jsonpath_hub(&["get", "rb", "kept-configmap"], rv),
        ]
    }
    wait_for(WAIT, "the binding reports its Work applied", || {
        fleet.jsonpath_hub(
            &["get", "rb", "kept-configmap"],
            "{.status.conditions[?(@.type=='FullyApplied')].status}",
        ) == "True"
    });
    let hub_before = hub_versions(&fleet);

    // While the control plane is down, someone edits one copy and deletes another.
    fleet.hub.kill9();
    let m = fleet.member("member1");
    m.ok(&[
        "patch",
        "cm",
        "edited",
        "--type=merge",
        "-p",
        r#"{"data":{"greeting":"drifted"}}"#,
    ]);
    m.ok(&["delete", "cm", "removed"]);
    fleet.hub.spawn();

    let m = fleet.member("member1");
    wait_for(WAIT, "the edit reverted and the deleted copy back", || {
        jsonpath(m, &["get", "cm", "edited"], "{.data.greeting}") == "hello"
            && jsonpath(m, &["get", "cm", "removed"], "{.data.greeting}") == "hello"
    });
    wait_for(WAIT, "every Work synced since the restart", || {
        work_syncs(&fleet) >= 3
    });
    // The copy that was still as applied was checked, not written again,
    // and neither its template (claim) nor its binding (status) was
    // rewritten: controllers decide only on fully listed caches.
    assert_eq!(
        jsonpath(m, &["get", "cm", "kept"], "{.metadata.resourceVersion}"),
        kept_version
    );
    assert_eq!(hub_versions(&fleet), hub_before);
}

/// A Work deleted by hand is not lost while its binding stands: the
/// member's copy goes with it (its finalizer), and the binding
/// controller writes the Work again, so the copy comes back.
#[test]
fn a_deleted_work_is_written_again_and_its_copy_comes_back() {
    let fleet = Fleet::new(&[("member1", "us-east")]);
    fleet.apply(&configmap_policy(
        "restored",
        "    clusterAffinity:\n      clusterNames: [member1]",
    ));
    let m = fleet.member("member1");
    wait_for(WAIT, "the copy in member1", || {
        exists(m, &["get", "cm", "restored"])
    });
    let ns = ["-n", "karmada-es-member1"];
    let names = fleet.jsonpath_hub(&["get", "work", ns[0], ns[1]], "{.items[*].metadata.name}");
    let name = names
        .split_whitespace()
        .find(|n| n.starts_with("restored-"))
        .unwrap_or_else(|| panic!("no Work for the ConfigMap among {names:?}"))
        .to_string();
    let uid = fleet.jsonpath_hub(&["get", "work", &name, ns[0], ns[1]], "{.metadata.uid}");
    fleet
        .hub
        .ok(&["delete", "work", &name, ns[0], ns[1], "--wait=false"]);
    wait_for(WAIT, "the Work written again", || {
        let now = fleet.jsonpath_hub(&["get", "work", &name, ns[0], ns[1]], "{.metadata.uid}");
        !now.is_empty() && now != uid
    });
    wait_for(WAIT, "the copy back in member1", || {
        jsonpath(m, &["get", "cm", "restored"], "{.data.greeting}") == "hello"
    });
}

#[test]
fn unjoining_moves_the_share_to_the_rest_and_removes_the_copies() {
    let fleet = Fleet::new(&[("member1", "us-east"), ("member2", "eu-west")]);
    let dynamic = NGINX
        .replace("clusterNames: [member1, member2]", "{}")
        .replace(
            "      weightPreference:\n        staticWeightList:\n          - targetCluster: {clusterNames: [member1]}\n            weight: 1\n          - targetCluster: {clusterNames: [member2]}\n            weight: 2\n",
            "      weightPreference:\n        dynamicWeight: AvailableReplicas\n",
        )
        .replace("clusterAffinity:\n      {}", "clusterAffinity: {}");
    fleet.apply(&dynamic);
    wait_for(WAIT, "divided over both", || {
        let a: i32 = replicas_in(&fleet, "member1").parse().unwrap_or(0);
        let b: i32 = replicas_in(&fleet, "member2").parse().unwrap_or(0);
        a > 0 && b > 0 && a + b == 3
    });
    let out = flotilla(&[
        "unjoin",
        "member2",
        "--kubeconfig",
        fleet.hub.kubeconfig.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "unjoin: {}", stderr(&out));
    wait_for(WAIT, "all 3 replicas in member1", || {
        replicas_in(&fleet, "member1") == "3"
    });
    assert!(!exists(
        fleet.member("member2"),
        &["get", "deploy", "nginx"]
    ));
    assert!(!exists(&fleet.hub, &["get", "cluster", "member2"]));
    assert!(!exists(
        &fleet.hub,
        &["get", "namespace", "karmada-es-member2"]
    ));
    assert!(!exists(
        &fleet.hub,
        &["get", "secret", "member2", "-n", "karmada-cluster"]
    ));
    wait_for(WAIT, "3 ready on the hub", || {
        fleet.jsonpath_hub(&["get", "deploy", "nginx"], "{.status.readyReplicas}") == "3"
    });
}

/// A cluster a policy names outright leaves as readily as one chosen: the
/// scheduler no longer chooses it, nothing is delivered there again while
/// it goes, and what only it held waits, unscheduled, for a cluster to fit.
#[test]
fn unjoining_a_cluster_a_policy_names_completes_and_removes_its_copies() {
    let fleet = Fleet::new(&[("member1", "us-east"), ("member2", "eu-west")]);
    fleet.apply(NGINX);
    fleet.apply(
        r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: only-there}
data: {where: member2}
---
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata: {name: only-there}
spec:
  resourceSelectors:
    - {apiVersion: v1, kind: ConfigMap, name: only-there}
  placement:
    clusterAffinity:
      clusterNames: [member2]
"#,
    );
    wait_for(WAIT, "both templates delivered", || {
        replicas_in(&fleet, "member2") == "2"
            && exists(fleet.member("member2"), &["get", "cm", "only-there"])
    });
    let out = flotilla(&[
        "unjoin",
        "member2",
        "--wait",
        "60s",
        "--kubeconfig",
        fleet.hub.kubeconfig.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "unjoin: {}", stderr(&out));
    assert!(!exists(&fleet.hub, &["get", "cluster", "member2"]));
    assert!(!exists(
        &fleet.hub,
        &["get", "namespace", "karmada-es-member2"]
    ));
    assert!(!exists(
        fleet.member("member2"),
        &["get", "cm", "only-there"]
    ));
    assert!(!exists(
        fleet.member("member2"),
        &["get", "deploy", "nginx"]
    ));
    wait_for(WAIT, "all 3 replicas in member1", || {
        replicas_in(&fleet, "member1") == "3"
    });
    // The template stays on the hub, placed nowhere, until a cluster fits.
    assert!(exists(&fleet.hub, &["get", "cm", "only-there"]));
    assert!(!exists(
        fleet.member("member1"),
        &["get", "cm", "only-there"]
    ));
}

#[test]
fn joins_that_cannot_work_fail_clearly_and_leave_nothing() {
    let fleet = Fleet::new(&[("member1", "us-east")]);
    let hub = fleet.hub.kubeconfig.to_str().unwrap().to_string();
    let member = fleet
        .member("member1")
        .kubeconfig
        .to_str()
        .unwrap()
        .to_string();
    let join = |args: &[&str]| {
        let mut all = vec!["join"];
        all.extend_from_slice(args);
        flotilla(&all)
    };
    // A duplicate name.
    let out = join(&[
        "member1",
        "--kubeconfig",
        &hub,
        "--cluster-kubeconfig",
        &member,
    ]);
    assert!(!out.status.success());
    assert_has(&stderr(&out), &["already joined"]);
    // A bad kubeconfig.
    let bad = common::write(
        fleet.hub.dir.path(),
        "bad-kubeconfig",
        "this: [is not a kubeconfig",
    );
    let out = join(&[
        "broken",
        "--kubeconfig",
        &hub,
        "--cluster-kubeconfig",
        bad.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert_has(&stderr(&out), &["cannot read the cluster kubeconfig"]);
    // An unreachable cluster: the member's credentials, a closed port.
    let text = std::fs::read_to_string(&member).unwrap();
    let port = text
        .split("https://127.0.0.1:")
        .nth(1)
        .unwrap()
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed_port = closed.local_addr().unwrap().port().to_string();
    drop(closed);
    let unreachable = common::write(
        fleet.hub.dir.path(),
        "gone-kubeconfig",
        &text.replace(port, &closed_port),
    );
    let out = join(&[
        "gone",
        "--kubeconfig",
        &hub,
        "--cluster-kubeconfig",
        unreachable.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert_has(&stderr(&out), &["cannot reach cluster gone"]);
    // Nothing was left behind.
    let clusters = fleet.hub.ok(&["get", "clusters", "-o", "name"]);
    assert_eq!(clusters.trim(), "cluster.cluster.karmada.io/member1");
    let secrets = fleet
        .hub
        .ok(&["get", "secrets", "-n", "karmada-cluster", "-o", "name"]);
    assert_eq!(secrets.trim(), "secret/member1");
    // Unjoining what never joined.
    let out = flotilla(&["unjoin", "nobody", "--kubeconfig", &hub]);
    assert!(!out.status.success());
    assert_has(&stderr(&out), &["has not joined"]);
}

#[test]
fn cluster_status_reports_the_member_and_an_unreachable_member_is_tainted() {
    let fleet = Fleet::new(&[("member1", "us-east")]);
    wait_for(WAIT, "status collected", || {
        fleet.jsonpath_hub(
            &["get", "cluster", "member1"],
            "{.status.nodeSummary.readyNum}",
        ) == "2"
    });
    let version = fleet.jsonpath_hub(
        &["get", "cluster", "member1"],
        "{.status.kubernetesVersion}",
    );
    assert!(version.starts_with("v1."), "{version}");
    let cpu = fleet.jsonpath_hub(
        &["get", "cluster", "member1"],
        "{.status.resourceSummary.allocatable.cpu}",
    );
    assert_eq!(cpu, "8");
    let apis = fleet.jsonpath_hub(
        &["get", "cluster", "member1"],
        "{.status.apiEnablements[*].groupVersion}",
    );
    assert_has(&apis, &["apps/v1", "batch/v1"]);
    let wide = fleet.hub.ok(&["get", "cluster", "member1", "-o", "wide"]);
    assert_has(&wide, &["us-east", "https://127.0.0.1:"]);
    // Unreachable: NotReady after the failure threshold, with the taint.
    let data = fleet.member("member1").data_dir();
    let out = flotilla(&[
        "member",
        "fault",
        "--data-dir",
        data.to_str().unwrap(),
        "unreachable",
        "--mode",
        "refuse",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    wait_for(WAIT, "NotReady with the taint", || {
        fleet.jsonpath_hub(
            &["get", "cluster", "member1"],
            "{.status.conditions[?(@.type==\"Ready\")].reason}",
        ) == "ClusterNotReachable"
            && fleet.jsonpath_hub(&["get", "cluster", "member1"], "{.spec.taints[*].key}")
                == "cluster.karmada.io/not-ready"
    });
    let out = flotilla(&[
        "member",
        "fault",
        "--data-dir",
        data.to_str().unwrap(),
        "reachable",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    fleet.wait_ready("member1");
    wait_for(WAIT, "taint removed", || {
        fleet
            .jsonpath_hub(&["get", "cluster", "member1"], "{.spec.taints[*].key}")
            .is_empty()
    });
    // The control plane's metrics, named as Karmada's, count the pipeline.
    fleet.apply(&configmap_policy(
        "counted",
        "    clusterAffinity:\n      clusterNames: [member1]",
    ));
    wait_holders(&fleet, &["get", "cm", "counted"], &["member1"]);
    let metrics = fleet.hub.ok(&["get", "--raw", "/metrics"]);
    assert_has(
        &metrics,
        &[
            "resource_match_policy_duration_seconds_count",
            "karmada_scheduler_e2e_scheduling_duration_seconds_count{result=\"success\"}",
            "binding_sync_work_duration_seconds_bucket",
            "work_sync_workload_duration_seconds_count{result=\"success\"}",
        ],
    );
    // Beside them, the embedded store's writer: the writes it committed,
    // before the end of the exposition.
    let writes = metrics
        .lines()
        .find_map(|l| l.strip_prefix("flotilla_store_writes_total "))
        .and_then(|v| v.trim().parse::<f64>().ok());
    assert!(writes.is_some_and(|w| w > 0.0), "{metrics}");
    assert!(metrics.trim_end().ends_with("# EOF"), "{metrics}");
}

/// Runs `flotilla bench propagation` with `args` and `--json`; its result.
fn bench_json(args: &[&str]) -> serde_json::Value {
    let out = flotilla(&[&["bench", "propagation"], args, &["--json"]].concat());
    assert!(out.status.success(), "bench: {}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line).expect("one JSON object")
}

#[test]
fn the_propagation_benchmark_runs_and_reports_json() {
    let result = bench_json(&["--templates", "20", "--members", "2"]);
    assert_eq!(result["copies"], 40);
    assert!(
        result["latency_ms"]["p99"]
            .as_f64()
            .is_some_and(|p| p > 0.0)
    );
    assert!(
        result["flotilla_over_direct"]
            .as_f64()
            .is_some_and(|r| r > 0.0)
    );
    assert!(
        result["controlplane_peak_rss_mib"]
            .as_f64()
            .is_some_and(|r| r > 0.0)
    );
    // Where the CPU went: the control plane worked while the copies
    // travelled (20 creates, their bindings, 40 Works), and not at all in
    // the baseline, which the report does not give it.
    let cpu = &result["cpu_seconds"];
    assert!(
        cpu["distribution"]["controlplane"]
            .as_f64()
            .is_some_and(|s| s > 0.0),
        "{cpu}"
    );
    for figure in [
        &cpu["distribution"]["members"],
        &cpu["distribution"]["client"],
        &cpu["direct"]["members"],
        &cpu["direct"]["client"],
    ] {
        assert!(figure.as_f64().is_some_and(|s| s >= 0.0), "{cpu}");
    }
    assert!(cpu["direct"].get("controlplane").is_none(), "{cpu}");
    // The hub's store writer committed at least the 20 templates and their
    // 20 bindings and 40 Works, each group synced before it was answered,
    // and was busy for part of the time; the syncs took part of the time
    // the writer and the publisher were busy.
    let writer = &result["store_writer"];
    assert!(
        writer["writes"].as_u64().is_some_and(|w| w >= 80),
        "{writer}"
    );
    assert!(
        writer["commits"].as_u64().is_some_and(|c| c >= 1),
        "{writer}"
    );
    // A sync covers one commit or more, but the counts are differences of
    // two readings of the hub's metrics, each of which may fall between a
    // group's commit and its sync: a group or two in flight at the first
    // reading can add its sync without its commit.
    let commits = writer["commits"].as_u64().unwrap_or(0);
    assert!(
        writer["syncs"]
            .as_u64()
            .is_some_and(|s| s >= 1 && s <= commits + 2),
        "{writer}"
    );
    let busy = writer["busy_percent"].as_f64().unwrap_or(0.0);
    let publisher = writer["publisher_busy_percent"].as_f64().unwrap_or(-1.0);
    let sync = writer["sync_percent"].as_f64().unwrap_or(-1.0);
    assert!(busy > 0.0 && busy <= 100.0, "{writer}");
    assert!((0.0..=100.0).contains(&publisher), "{writer}");
    assert!(sync > 0.0 && sync <= busy + publisher, "{writer}");

    let result = bench_json(&["--scheduler-only", "--templates", "20"]);
    assert_eq!(result["bindings"], 20);
    assert!(
        result["bindings_per_second"]
            .as_f64()
            .is_some_and(|r| r > 0.0)
    );
}

/// Established TCP connections of process `pid` to `port`, from the
/// process's descriptors and its network namespace's socket tables.
fn connections_to(pid: u32, port: u16) -> usize {
    let sockets: std::collections::HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|entries| {
            entries
                .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                .filter_map(|target| {
                    let target = target.to_string_lossy().into_owned();
                    Some(
                        target
                            .strip_prefix("socket:[")?
                            .strip_suffix(']')?
                            .to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let mut established = 0;
    for table in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(remote), Some(state), Some(inode)) =
                (fields.get(2), fields.get(3), fields.get(9))
            else {
                continue;
            };
            let remote_port = remote
                .rsplit(':')
                .next()
                .and_then(|p| u16::from_str_radix(p, 16).ok());
            if *state == "01" && remote_port == Some(port) && sockets.contains(*inode) {
                established += 1;
            }
        }
    }
    established
}

/// The control plane's watches and requests to a member share one
/// connection (HTTP/2, as client-go's): over HTTP/1.1 each watch held one
/// of its own and the pool one more for every request that ran beside
/// another, about nine a member, past 20,000 open files at 1,000 members.
#[test]
fn the_control_plane_reaches_a_member_over_one_connection() {
    let fleet = Fleet::new(&[("member1", "us-east")]);
    fleet.apply(&configmap_policy(
        "one-connection",
        "    clusterAffinity:\n      clusterNames: [member1]",
    ));
    wait_holders(&fleet, &["get", "cm", "one-connection"], &["member1"]);
    let hub = fleet.hub.child.as_ref().expect("the hub runs").id();
    let server = fleet.member("member1").ok(&[
        "config",
        "view",
        "--minify",
        "-o",
        "jsonpath={.clusters[0].cluster.server}",
    ]);
    let port: u16 = server
        .trim()
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in the member's server {server:?}"));
    // The member's watches (the copy's kind, the MCS kinds, …) are open and
    // its status is read every few seconds; the join's own client is gone.
    wait_for(WAIT, "the hub holding one connection to the member", || {
        connections_to(hub, port) == 1
    });
    // And it stays one while the hub reads and writes the member.
    fleet.apply(&configmap_policy(
        "second",
        "    clusterAffinity:\n      clusterNames: [member1]",
    ));
    wait_holders(&fleet, &["get", "cm", "second"], &["member1"]);
    assert_eq!(connections_to(hub, port), 1);
}
