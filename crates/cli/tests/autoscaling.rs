//! Karmada's autoscaling across the fleet, end to end with kubectl and the
//! manifests of Karmada's tutorials: a FederatedHPA scales a template on
//! its pods' CPU in the members (the simulator's pods use what they
//! request), and a CronFederatedHPA scales a workload and moves a
//! FederatedHPA's bounds on a schedule. What Karmada's webhooks default
//! and refuse is defaulted and refused.

mod common;

use std::time::Duration;

use common::fleet::{Fleet, jsonpath, stderr};
use common::{Server, assert_has, until};

/// Karmada's "Autoscaling across clusters with resource metrics" tutorial.
const NGINX: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: nginx
  labels:
    app: nginx
spec:
  replicas: 1
  selector:
    matchLabels:
      app: nginx
  template:
    metadata:
      labels:
        app: nginx
    spec:
      containers:
      - image: nginx
        name: nginx
        resources:
          requests:
            cpu: 25m
            memory: 64Mi
          limits:
            cpu: 25m
            memory: 64Mi
---
apiVersion: v1
kind: Service
metadata:
  name: nginx-service
spec:
  ports:
    - port: 80
      targetPort: 80
  selector:
    app: nginx
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
    - apiVersion: v1
      kind: Service
      name: nginx-service
  placement:
    clusterAffinity:
      clusterNames:
        - member1
        - member2
    replicaScheduling:
      replicaDivisionPreference: Weighted
      replicaSchedulingType: Divided
      weightPreference:
        staticWeightList:
          - targetCluster:
              clusterNames:
                - member1
            weight: 1
          - targetCluster:
              clusterNames:
                - member2
            weight: 1
"#;

const FHPA: &str = r#"
apiVersion: autoscaling.karmada.io/v1alpha1
kind: FederatedHPA
metadata:
  name: nginx
spec:
  scaleTargetRef:
    apiVersion: apps/v1
    kind: Deployment
    name: nginx
  minReplicas: 1
  maxReplicas: 10
  behavior:
    scaleDown:
      stabilizationWindowSeconds: 10
    scaleUp:
      stabilizationWindowSeconds: 10
  metrics:
    - type: Resource
      resource:
        name: cpu
        target:
          type: Utilization
          averageUtilization: 10
"#;

/// A member's replicas of a Deployment; 0 where it has none (a Divided
/// placement leaves out a cluster whose share is 0).
fn replicas_in(fleet: &Fleet, member: &str, deployment: &str) -> i64 {
    jsonpath(
        fleet.member(member),
        &["get", "deployment", deployment],
        "{.spec.replicas}",
    )
    .parse()
    .unwrap_or(0)
}

#[test]
fn a_federated_hpa_scales_its_template_on_the_members_pods_cpu() {
    let fleet = Fleet::new(&[("member1", "eu"), ("member2", "us")]);
    fleet.apply(NGINX);
    until(
        Duration::from_secs(60),
        "nginx running in a member",
        || replicas_in(&fleet, "member1", "nginx") + replicas_in(&fleet, "member2", "nginx") == 1,
        || fleet.hub.ok(&["describe", "rb"]),
    );
    fleet.apply(FHPA);
    let describe = || {
        format!(
            "{}\n{}",
            fleet.hub.ok(&["describe", "fhpa", "nginx"]),
            fleet.hub.ok(&["get", "events"])
        )
    };
    // The pods use all they request, against a target of 10%: up by the
    // default rate (4 pods or 100% a period) to the maximum, divided 1:1.
    until(
        Duration::from_secs(150),
        "the template at the FederatedHPA's maximum",
        || fleet.jsonpath_hub(&["get", "deployment", "nginx"], "{.spec.replicas}") == "10",
        describe,
    );
    until(
        Duration::from_secs(60),
        "10 replicas divided 5 and 5",
        || {
            replicas_in(&fleet, "member1", "nginx") == 5
                && replicas_in(&fleet, "member2", "nginx") == 5
        },
        describe,
    );
    until(
        Duration::from_secs(60),
        "the status's current count",
        || fleet.jsonpath_hub(&["get", "fhpa", "nginx"], "{.status.currentReplicas}") == "10",
        describe,
    );
    let table = fleet.hub.ok(&["get", "fhpa"]);
    assert_has(
        &table,
        &[
            "REFERENCE-KIND",
            "REFERENCE-NAME",
            "MINPODS",
            "MAXPODS",
            "REPLICAS",
        ],
    );
    let row = table
        .lines()
        .find(|l| l.starts_with("nginx"))
        .unwrap_or_default();
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        cells[..6],
        ["nginx", "Deployment", "nginx", "1", "10", "10"],
        "{table}"
    );
    let conditions = fleet.jsonpath_hub(
        &["get", "fhpa", "nginx"],
        "{range .status.conditions[*]}{.type}={.status}/{.reason};{end}",
    );
    assert_has(
        &conditions,
        &[
            "ScalingActive=True/ValidMetricFound",
            "ScalingLimited=True/TooManyReplicas",
        ],
    );
    let metric = fleet.jsonpath_hub(
        &["get", "fhpa", "nginx"],
        "{.status.currentMetrics[0].resource.current.averageUtilization}",
    );
    assert_eq!(metric, "100", "{}", describe());
    let events = fleet.hub.ok(&[
        "get",
        "events",
        "-o",
        "jsonpath={range .items[?(@.involvedObject.kind==\"FederatedHPA\")]}{.reason}: {.message}{\"\\n\"}{end}",
    ]);
    assert_has(
        &events,
        &[
            "SuccessfulRescale: New size: 5; reason: cpu resource utilization (percentage of request) above target",
        ],
    );
    // The control plane's metrics.k8s.io answers from the members', as
    // karmada-metrics-adapter: `kubectl top` lists the fleet's pods.
    let top = std::cell::RefCell::new(String::new());
    until(
        Duration::from_secs(60),
        "kubectl top pod on the control plane to list the 10 pods",
        || {
            let out = fleet
                .hub
                .kubectl(&["top", "pod", "-l", "app=nginx", "--no-headers"]);
            let listed = String::from_utf8_lossy(&out.stdout).into_owned();
            let pods = listed.lines().filter(|l| l.starts_with("nginx-")).count();
            *top.borrow_mut() = listed;
            pods == 10
        },
        || format!("{}\n{}", top.borrow(), fleet.hub.log()),
    );
    let top = top.into_inner();
    assert!(top.lines().all(|l| l.contains("25m")), "{top}");
    until(
        Duration::from_secs(60),
        "kubectl top node on the control plane to list both members' nodes",
        || {
            let out = fleet.hub.kubectl(&["top", "node", "--no-headers"]);
            String::from_utf8_lossy(&out.stdout).lines().count() == 4
        },
        || fleet.hub.ok(&["get", "clusters"]),
    );
}

#[test]
fn what_karmadas_webhooks_default_and_refuse() {
    let hub = Server::controlplane(&[]);
    hub.ok_stdin(
        &["apply", "-f", "-"],
        r#"
apiVersion: autoscaling.karmada.io/v1alpha1
kind: FederatedHPA
metadata: {name: web}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  maxReplicas: 4
  behavior:
    scaleUp: {stabilizationWindowSeconds: 30}
"#,
    );
    let defaulted = jsonpath(
        &hub,
        &["get", "fhpa", "web"],
        "{.spec.minReplicas} {.spec.metrics[0].resource.name} {.spec.metrics[0].resource.target.averageUtilization} {.spec.behavior.scaleUp.stabilizationWindowSeconds} {.spec.behavior.scaleUp.policies[0].type} {.spec.behavior.scaleDown.selectPolicy}",
    );
    assert_eq!(defaulted, "1 cpu 80 30 Pods Max");

    let refused = hub.kubectl_stdin(
        &["apply", "-f", "-"],
        Some(
            r#"
apiVersion: autoscaling.karmada.io/v1alpha1
kind: FederatedHPA
metadata: {name: zero}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  minReplicas: 1
  maxReplicas: 0
"#,
        ),
    );
    assert!(!refused.status.success());
    assert_has(
        &stderr(&refused),
        &[
            "admission webhook \"federatedhpa.karmada.io\" denied the request",
            "spec.maxReplicas: Invalid value: 0: must be greater than 0",
        ],
    );
    let cron = hub.kubectl_stdin(
        &["apply", "-f", "-"],
        Some(
            r#"
apiVersion: autoscaling.karmada.io/v1alpha1
kind: CronFederatedHPA
metadata: {name: bad}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  rules:
  - name: scale-up
    schedule: "every minute"
    targetReplicas: 3
"#,
        ),
    );
    assert!(!cron.status.success());
    assert_has(
        &stderr(&cron),
        &["spec.rules[0].schedule: Invalid value: \"every minute\": invalid cron format"],
    );
    // Nothing half-made.
    assert!(hub.kubectl(&["get", "fhpa", "zero"]).status.code() != Some(0));
    assert!(hub.kubectl(&["get", "cronfhpa", "bad"]).status.code() != Some(0));
    // Both kinds in Karmada's category.
    assert_has(
        &hub.ok(&["get", "karmada-io"]),
        &["federatedhpa.autoscaling.karmada.io/web"],
    );
}

#[test]
fn cron_federated_hpas_scale_a_workload_and_a_federated_hpas_bounds_on_schedule() {
    let fleet = Fleet::new(&[("member1", "eu"), ("member2", "us")]);
    fleet.apply(&NGINX.replace("replicas: 1", "replicas: 2"));
    fleet.apply(
        r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, labels: {app: web}}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - {name: web, image: nginx, resources: {requests: {cpu: 100m}}}
---
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata: {name: web}
spec:
  resourceSelectors:
  - {apiVersion: apps/v1, kind: Deployment, name: web}
  placement:
    clusterAffinity: {clusterNames: [member1]}
---
apiVersion: autoscaling.karmada.io/v1alpha1
kind: FederatedHPA
metadata: {name: web-fhpa}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  minReplicas: 1
  maxReplicas: 1
"#,
    );
    // Karmada's CronFederatedHPA tutorials, verbatim.
    fleet.apply(
        r#"
apiVersion: autoscaling.karmada.io/v1alpha1
kind: CronFederatedHPA
metadata:
  name: nginx-cronfhpa
  namespace: default
spec:
   scaleTargetRef:
      apiVersion: apps/v1
      kind: Deployment
      name: nginx
   rules:
   - name: "scale-up"
     schedule: "*/1 * * * *"
     targetReplicas: 5
     suspend: false
---
apiVersion: autoscaling.karmada.io/v1alpha1
kind: CronFederatedHPA
metadata:
  name: web-cronfhpa
  namespace: default
spec:
   scaleTargetRef:
      apiVersion: autoscaling.karmada.io/v1alpha1
      kind: FederatedHPA
      name: web-fhpa
   rules:
   - name: "scale-up"
     schedule: "*/1 * * * *"
     targetMinReplicas: 3
     targetMaxReplicas: 3
   - name: "paused"
     schedule: "*/1 * * * *"
     targetMaxReplicas: 20
     suspend: true
"#,
    );
    let describe = || {
        format!(
            "{}\n{}",
            fleet.hub.ok(&["get", "cronfhpa", "-o", "yaml"]),
            fleet.hub.ok(&["get", "events"])
        )
    };
    // Planned at once: the next minute.
    until(
        Duration::from_secs(30),
        "the next execution time",
        || {
            !fleet
                .jsonpath_hub(
                    &["get", "cronfhpa", "nginx-cronfhpa"],
                    "{.status.executionHistories[0].nextExecutionTime}",
                )
                .is_empty()
        },
        describe,
    );
    until(
        Duration::from_secs(100),
        "the template scaled to 5 at the minute",
        || fleet.jsonpath_hub(&["get", "deployment", "nginx"], "{.spec.replicas}") == "5",
        describe,
    );
    until(
        Duration::from_secs(30),
        "the execution recorded",
        || {
            fleet.jsonpath_hub(
                &["get", "cronfhpa", "nginx-cronfhpa"],
                "{.status.executionHistories[0].successfulExecutions[0].appliedReplicas}",
            ) == "5"
        },
        describe,
    );
    let history = fleet.jsonpath_hub(
        &["get", "cronfhpa", "nginx-cronfhpa"],
        "{.status.executionHistories[0].ruleName} {.status.executionHistories[0].successfulExecutions[0].scheduleTime} {.status.executionHistories[0].nextExecutionTime}",
    );
    let parts: Vec<&str> = history.split(' ').collect();
    assert_eq!(parts[0], "scale-up", "{history}");
    assert!(
        parts[1].ends_with(":00Z") && parts[2].ends_with(":00Z") && parts[1] < parts[2],
        "{history}"
    );
    // The defaults of Karmada's CRD.
    assert_eq!(
        fleet.jsonpath_hub(
            &["get", "cronfhpa", "nginx-cronfhpa"],
            "{.spec.rules[0].successfulHistoryLimit} {.spec.rules[0].failedHistoryLimit}"
        ),
        "3 3"
    );
    // The FederatedHPA's bounds moved, and with them the template.
    until(
        Duration::from_secs(60),
        "the FederatedHPA's bounds at 3",
        || {
            fleet.jsonpath_hub(
                &["get", "fhpa", "web-fhpa"],
                "{.spec.minReplicas} {.spec.maxReplicas}",
            ) == "3 3"
        },
        describe,
    );
    until(
        Duration::from_secs(60),
        "web at the new minimum in its member",
        || replicas_in(&fleet, "member1", "web") == 3,
        describe,
    );
    // The suspended rule is not planned.
    let paused = fleet.jsonpath_hub(
        &["get", "cronfhpa", "web-cronfhpa"],
        "{.status.executionHistories[1].ruleName}={.status.executionHistories[1].nextExecutionTime}",
    );
    assert_eq!(paused, "paused=", "{}", describe());
    assert_has(
        &fleet.hub.ok(&["get", "cronfhpa"]),
        &[
            "REFERENCE-KIND",
            "nginx-cronfhpa",
            "Deployment",
            "FederatedHPA",
        ],
    );
}

/// Karmada's deploymentReplicasSyncer scenario: an HPA propagated with
/// its Deployment scales it in each member; the members keep what their
/// HPAs set, and the Divided template follows their sum.
#[test]
fn member_hpas_own_replicas_and_a_divided_template_follows_their_sum() {
    let fleet = Fleet::new(&[("member1", "eu"), ("member2", "us")]);
    fleet.apply(
        r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: api, labels: {app: api}}
spec:
  replicas: 4
  selector: {matchLabels: {app: api}}
  template:
    metadata: {labels: {app: api}}
    spec:
      containers:
      - {name: api, image: nginx, resources: {requests: {cpu: 100m}}}
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: api}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: api}
  minReplicas: 2
  maxReplicas: 3
  metrics:
  - type: Resource
    resource: {name: cpu, target: {type: Utilization, averageUtilization: 80}}
---
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata: {name: api}
spec:
  resourceSelectors:
  - {apiVersion: apps/v1, kind: Deployment, name: api}
  - {apiVersion: autoscaling/v2, kind: HorizontalPodAutoscaler, name: api}
  placement:
    clusterAffinity: {clusterNames: [member1, member2]}
    replicaScheduling:
      replicaSchedulingType: Divided
      replicaDivisionPreference: Weighted
      weightPreference:
        staticWeightList:
        - {targetCluster: {clusterNames: [member1]}, weight: 1}
        - {targetCluster: {clusterNames: [member2]}, weight: 1}
"#,
    );
    let describe = || {
        format!(
            "{}\n{}",
            fleet.hub.ok(&["get", "deployment", "api", "-o", "yaml"]),
            fleet.hub.ok(&["describe", "rb", "api-deployment"])
        )
    };
    // The HPA template marks its target as Karmada's marker does.
    until(
        Duration::from_secs(60),
        "the retain-replicas label on the template",
        || {
            fleet.jsonpath_hub(
                &["get", "deployment", "api"],
                "{.metadata.labels.resourcetemplate\\.karmada\\.io/retain-replicas}",
            ) == "true"
        },
        describe,
    );
    // The simulated pods use all they request (over 80%): each member's
    // HPA scales its 2 to its maximum, 3; the template follows, 6.
    until(
        Duration::from_secs(90),
        "3 in each member and the template at 6",
        || {
            replicas_in(&fleet, "member1", "api") == 3
                && replicas_in(&fleet, "member2", "api") == 3
                && fleet.jsonpath_hub(&["get", "deployment", "api"], "{.spec.replicas}") == "6"
        },
        describe,
    );
    // A count written by hand is taken back to what the members run.
    fleet
        .hub
        .ok(&["scale", "deployment", "api", "--replicas=10"]);
    until(
        Duration::from_secs(60),
        "the template back at 6",
        || fleet.jsonpath_hub(&["get", "deployment", "api"], "{.spec.replicas}") == "6",
        describe,
    );
    assert_eq!(replicas_in(&fleet, "member1", "api"), 3, "{}", describe());
    assert_eq!(replicas_in(&fleet, "member2", "api"), 3, "{}", describe());
    // The HPA gone, the mark goes.
    fleet.hub.ok(&["delete", "hpa", "api"]);
    until(
        Duration::from_secs(60),
        "the label removed",
        || {
            fleet
                .jsonpath_hub(
                    &["get", "deployment", "api"],
                    "{.metadata.labels.resourcetemplate\\.karmada\\.io/retain-replicas}",
                )
                .is_empty()
        },
        describe,
    );
}
