//! The federation pipeline end to end: `flotilla controlplane`, simulated
//! members joined with `flotilla join`, and kubectl, as a user drives
//! them. Templates and policies are Karmada's YAML, unchanged.

mod common;

use std::process::Output;
use std::time::Duration;

use common::{Server, assert_has, flotilla, wait_for};

const WAIT: Duration = Duration::from_secs(60);

/// A control plane with short health thresholds and joined members.
struct Fleet {
    hub: Server,
    members: Vec<(String, Server)>,
}

impl Fleet {
    fn new(members: &[(&str, &str)]) -> Fleet {
        let hub = Server::controlplane(&[
            "--cluster-status-update-frequency",
            "500ms",
            "--cluster-failure-threshold",
            "1s",
            "--cluster-success-threshold",
            "1s",
        ]);
        let mut fleet = Fleet {
            hub,
            members: Vec::new(),
        };
        for (name, region) in members {
            let m = Server::member(name, &["--nodes", "2"]);
            fleet.members.push((name.to_string(), m));
            fleet.join(name, region);
        }
        for (name, _) in members {
            fleet.wait_ready(name);
        }
        fleet
    }

    fn member(&self, name: &str) -> &Server {
        &self
            .members
            .iter()
            .find(|(n, _)| n == name)
            .expect("member")
            .1
    }

    fn join(&self, name: &str, region: &str) {
        let m = self.member(name);
        let out = flotilla(&[
            "join",
            name,
            "--kubeconfig",
            self.hub.kubeconfig.to_str().unwrap(),
            "--cluster-kubeconfig",
            m.kubeconfig.to_str().unwrap(),
            "--region",
            region,
            "--labels",
            &format!("region={region}"),
        ]);
        assert!(out.status.success(), "join {name}: {}", stderr(&out));
    }

    fn wait_ready(&self, name: &str) {
        wait_for(WAIT, &format!("{name} Ready"), || {
            self.jsonpath_hub(
                &["get", "cluster", name],
                "{.status.conditions[?(@.type==\"Ready\")].status}",
            ) == "True"
        });
    }

    fn jsonpath_hub(&self, args: &[&str], path: &str) -> String {
        jsonpath(&self.hub, args, path)
    }

    fn apply(&self, yaml: &str) {
        let out = self.hub.kubectl_stdin(&["apply", "-f", "-"], Some(yaml));
        assert!(out.status.success(), "apply: {}", stderr(&out));
    }
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `kubectl get ... -o jsonpath=PATH`, or "" when the object is missing.
fn jsonpath(s: &Server, args: &[&str], path: &str) -> String {
    let p = format!("jsonpath={path}");
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["-o", &p]);
    let out = s.kubectl(&all);
    if !out.status.success() {
        return String::new();
    }
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn exists(s: &Server, args: &[&str]) -> bool {
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["-o", "name"]);
    s.kubectl(&all).status.success()
}

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

impl Drop for Fleet {
    fn drop(&mut self) {
        if std::env::var_os("FLOTILLA_TEST_LOGS").is_some() {
            eprintln!("---- hub log ----\n{}", self.hub.log());
        }
    }
}
