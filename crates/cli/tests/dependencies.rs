//! Karmada's `propagateDeps`, end to end: what a propagated Deployment's
//! pods name (a ConfigMap, a Secret) follows it to its clusters, changes
//! with it, moves with it and goes when it goes.

mod common;

use std::time::Duration;

use common::fleet::{Fleet, exists};
use common::until;

/// Karmada's "propagate dependencies" example, with a Secret beside the
/// ConfigMap, placed on member1.
const NGINX: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: my-nginx
  labels:
    app: my-nginx
spec:
  replicas: 2
  selector:
    matchLabels:
      app: my-nginx
  template:
    metadata:
      labels:
        app: my-nginx
    spec:
      containers:
        - image: nginx
          name: my-nginx
          ports:
            - containerPort: 80
          envFrom:
            - secretRef:
                name: my-nginx-secret
          volumeMounts:
            - name: configmap
              mountPath: "/configmap"
      volumes:
        - name: configmap
          configMap:
            name: my-nginx-config
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: my-nginx-config
data:
  nginx.properties: |
    proxy-connect-timeout: "10s"
---
apiVersion: v1
kind: Secret
metadata:
  name: my-nginx-secret
stringData:
  TOKEN: s3cr3t
---
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata:
  name: my-nginx-propagation
spec:
  propagateDeps: true
  resourceSelectors:
    - apiVersion: apps/v1
      kind: Deployment
      name: my-nginx
  placement:
    clusterAffinity:
      clusterNames:
        - member1
"#;

#[test]
fn a_deployments_configmaps_and_secrets_follow_it() {
    let fleet = Fleet::new(&[("member1", "eu"), ("member2", "us")]);
    fleet.apply(NGINX);
    let has = |member: &str, what: &[&str]| exists(fleet.member(member), what);
    let describe = || {
        format!(
            "member1: {}\nmember2: {}\nworks: {}\n{}",
            fleet
                .member("member1")
                .ok(&["get", "cm,secret", "-o", "name"]),
            fleet
                .member("member2")
                .ok(&["get", "cm,secret", "-o", "name"]),
            fleet.hub.ok(&["get", "works", "-A"]),
            fleet.hub.ok(&["get", "rb", "-o", "yaml"])
        )
    };
    let cm = ["get", "configmap", "my-nginx-config"];
    let secret = ["get", "secret", "my-nginx-secret"];
    until(
        Duration::from_secs(60),
        "the ConfigMap and the Secret in member1",
        || has("member1", &cm) && has("member1", &secret),
        describe,
    );
    assert!(!has("member2", &cm) && !has("member2", &secret));
    // The attached binding names who requires it.
    assert_eq!(
        fleet.jsonpath_hub(
            &["get", "rb", "my-nginx-config-configmap"],
            "{.spec.requiredBy[0].name} {.spec.clusters[*].name}"
        ),
        "my-nginx-deployment member1"
    );
    // A change of the dependency reaches the member.
    fleet.hub.ok(&[
        "patch",
        "configmap",
        "my-nginx-config",
        "--type=merge",
        "-p",
        r#"{"data":{"nginx.properties":"proxy-connect-timeout: \"20s\"\n"}}"#,
    ]);
    until(
        Duration::from_secs(60),
        "the changed ConfigMap in member1",
        || {
            common::fleet::jsonpath(fleet.member("member1"), &cm, "{.data.nginx\\.properties}")
                .contains("20s")
        },
        describe,
    );
    // A reference dropped from the pod template: that dependency goes,
    // the other stays; put back, it returns.
    fleet.hub.ok(&[
        "patch",
        "deployment",
        "my-nginx",
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/spec/template/spec/containers/0/envFrom"}]"#,
    ]);
    until(
        Duration::from_secs(60),
        "the Secret gone from member1, the ConfigMap still there",
        || !has("member1", &secret) && has("member1", &cm),
        describe,
    );
    fleet.hub.ok(&[
        "patch",
        "deployment",
        "my-nginx",
        "--type=json",
        "-p",
        r#"[{"op":"add","path":"/spec/template/spec/containers/0/envFrom","value":[{"secretRef":{"name":"my-nginx-secret"}}]}]"#,
    ]);
    until(
        Duration::from_secs(60),
        "the Secret back in member1",
        || has("member1", &secret),
        describe,
    );
    // The workload moves: its dependencies move with it.
    fleet.hub.ok(&[
        "patch",
        "pp",
        "my-nginx-propagation",
        "--type=merge",
        "-p",
        r#"{"spec":{"placement":{"clusterAffinity":{"clusterNames":["member2"]}}}}"#,
    ]);
    until(
        Duration::from_secs(60),
        "the dependencies in member2 and gone from member1",
        || {
            has("member2", &cm)
                && has("member2", &secret)
                && !has("member1", &cm)
                && !has("member1", &secret)
        },
        describe,
    );
    // The workload goes: so do they, and their attached bindings.
    fleet.hub.ok(&["delete", "deployment", "my-nginx"]);
    until(
        Duration::from_secs(60),
        "the dependencies gone from member2 and their bindings from the hub",
        || {
            !has("member2", &cm)
                && !has("member2", &secret)
                && !exists(&fleet.hub, &["get", "rb", "my-nginx-config-configmap"])
        },
        describe,
    );
    // The templates themselves stay on the control plane.
    assert!(exists(&fleet.hub, &cm) && exists(&fleet.hub, &secret));
}
