use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::*;
use crate::api::{Cluster, ClusterSpec, OverridePolicy};

fn cluster(name: &str, region: &str) -> Cluster {
    let mut c = Cluster::new(
        name,
        ClusterSpec {
            region: Some(region.into()),
            ..Default::default()
        },
    );
    c.metadata.labels = Some([("region".to_string(), region.to_string())].into());
    c
}

/// A policy as a user writes it.
fn policy(yaml: &str) -> OverridePolicy {
    serde_yaml::from_str(yaml).unwrap()
}

fn deployment() -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop", "labels": {"app": "web"}},
        "spec": {"replicas": 3, "template": {"spec": {"containers": [
            {"name": "web", "image": "docker.io/library/nginx:1.25", "args": ["--port=80", "--debug"]},
            {"name": "sidecar", "image": "envoyproxy/envoy:v1.30"},
        ]}}},
    })
}

fn run(
    manifest: &mut Value,
    c: &Cluster,
    cluster_policies: &[OverridePolicy],
    policies: &[OverridePolicy],
) -> Result<Applied, OverrideError> {
    let m = manifest.clone();
    let labels: BTreeMap<String, String> = m["metadata"]["labels"]
        .as_object()
        .map(|o| {
            o.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                .collect()
        })
        .unwrap_or_default();
    let t = Template {
        api_version: m["apiVersion"].as_str().unwrap(),
        kind: m["kind"].as_str().unwrap(),
        namespace: m["metadata"]["namespace"].as_str(),
        name: m["metadata"]["name"].as_str().unwrap(),
        labels: &labels,
    };
    apply(manifest, &t, c, cluster_policies, policies)
}

const MIRROR_IN_EU: &str = r#"
apiVersion: policy.karmada.io/v1alpha1
kind: OverridePolicy
metadata: {name: eu-mirror, namespace: shop}
spec:
  resourceSelectors: [{apiVersion: apps/v1, kind: Deployment, name: web}]
  overrideRules:
    - targetCluster: {labelSelector: {matchLabels: {region: eu-west}}}
      overriders:
        imageOverrider:
          - {component: Registry, operator: replace, value: mirror.eu.example.com}
        plaintext:
          - {path: /spec/replicas, operator: replace, value: 5}
"#;

#[test]
fn a_rule_applies_only_in_the_clusters_it_targets() {
    let p = [policy(MIRROR_IN_EU)];
    let mut east = deployment();
    let applied = run(&mut east, &cluster("member1", "us-east"), &[], &p).unwrap();
    assert_eq!(east, deployment(), "us-east gets the template as it is");
    assert!(applied.policies.is_empty());

    let mut eu = deployment();
    let applied = run(&mut eu, &cluster("member2", "eu-west"), &[], &p).unwrap();
    assert_eq!(eu["spec"]["replicas"], 5);
    let containers = &eu["spec"]["template"]["spec"]["containers"];
    assert_eq!(
        containers[0]["image"],
        "mirror.eu.example.com/library/nginx:1.25"
    );
    // A registry is added where the reference had none.
    assert_eq!(
        containers[1]["image"],
        "mirror.eu.example.com/envoyproxy/envoy:v1.30"
    );
    assert_eq!(applied.policies.len(), 1);
    assert_eq!(applied.policies[0]["policyName"], "eu-mirror");
}

#[test]
fn cluster_policies_apply_first_and_the_most_specific_policy_last() {
    let label = |kind: &str, name: &str, ns: Option<&str>, selector: &str, value: &str| {
        let ns = ns.map(|n| format!("namespace: {n}, ")).unwrap_or_default();
        policy(&format!(
            r#"
kind: {kind}
metadata: {{{ns}name: {name}}}
spec:
  resourceSelectors: [{selector}]
  overrideRules:
    - overriders:
        labelsOverrider: [{{operator: add, value: {{tier: {value}}}}}]
"#
        ))
    };
    let by_name = r#"{apiVersion: apps/v1, kind: Deployment, name: web}"#;
    let by_label =
        r#"{apiVersion: apps/v1, kind: Deployment, labelSelector: {matchLabels: {app: web}}}"#;
    let by_kind = r#"{apiVersion: apps/v1, kind: Deployment}"#;
    let c = cluster("member1", "us-east");
    // Listed most specific first: the order they are given in is not the
    // order they apply in.
    let policies = [
        label("OverridePolicy", "a-name", Some("shop"), by_name, "name"),
        label("OverridePolicy", "b-label", Some("shop"), by_label, "label"),
        label("OverridePolicy", "c-kind", Some("shop"), by_kind, "kind"),
        label(
            "OverridePolicy",
            "other",
            Some("elsewhere"),
            by_name,
            "other-namespace",
        ),
    ];
    let cluster_policies = [label(
        "ClusterOverridePolicy",
        "z-everything",
        None,
        by_name,
        "cluster",
    )];
    let mut d = deployment();
    let applied = run(&mut d, &c, &cluster_policies, &policies).unwrap();
    assert_eq!(d["metadata"]["labels"]["tier"], "name");
    let names: Vec<&str> = applied
        .policies
        .iter()
        .map(|e| e["policyName"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["c-kind", "b-label", "a-name"]);
    assert_eq!(applied.cluster_policies[0]["policyName"], "z-everything");

    // Same specificity: by name, ascending, so the later name wins.
    let mut d = deployment();
    let twins = [
        label("OverridePolicy", "beta", Some("shop"), by_kind, "beta"),
        label("OverridePolicy", "alpha", Some("shop"), by_kind, "alpha"),
    ];
    run(&mut d, &c, &[], &twins).unwrap();
    assert_eq!(d["metadata"]["labels"]["tier"], "beta");

    // Only cluster policies for a cluster-scoped template.
    let mut ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}});
    let everything = r#"{apiVersion: v1, kind: Namespace}"#;
    let applied = run(
        &mut ns,
        &c,
        &[label(
            "ClusterOverridePolicy",
            "cop",
            None,
            everything,
            "cop",
        )],
        &[label(
            "OverridePolicy",
            "op",
            Some("shop"),
            everything,
            "op",
        )],
    )
    .unwrap();
    assert_eq!(ns["metadata"]["labels"]["tier"], "cop");
    assert!(applied.policies.is_empty());
}

#[test]
fn every_overrider_kind_does_what_karmada_does() {
    let p = policy(
        r#"
kind: OverridePolicy
metadata: {name: all, namespace: shop}
spec:
  overrideRules:
    - overriders:
        imageOverrider:
          - {component: Tag, operator: replace, value: "1.26"}
          - {component: Repository, operator: add, value: -hardened}
        commandOverrider:
          - {containerName: web, operator: add, value: [nginx, -g, daemon off;]}
        argsOverrider:
          - {containerName: web, operator: remove, value: [--debug]}
          - {containerName: missing, operator: add, value: [--never]}
        labelsOverrider:
          - {operator: add, value: {app.kubernetes.io/part-of: shop}}
          - {operator: replace, value: {app: shop-web, absent: x}}
        annotationsOverrider:
          - {operator: add, value: {owner: team-a, drop: me}}
          - {operator: remove, value: {drop: ""}}
"#,
    );
    let mut d = deployment();
    run(&mut d, &cluster("member1", "us-east"), &[], &[p]).unwrap();
    let web = &d["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(web["image"], "docker.io/library/nginx-hardened:1.26");
    assert_eq!(web["command"], json!(["nginx", "-g", "daemon off;"]));
    assert_eq!(web["args"], json!(["--port=80"]));
    let sidecar = &d["spec"]["template"]["spec"]["containers"][1];
    assert_eq!(sidecar["image"], "envoyproxy/envoy-hardened:1.26");
    assert!(sidecar.get("args").is_none());
    assert_eq!(
        d["metadata"]["labels"],
        json!({"app": "shop-web", "app.kubernetes.io/part-of": "shop"})
    );
    assert_eq!(d["metadata"]["annotations"], json!({"owner": "team-a"}));
}

#[test]
fn field_overriders_edit_json_and_yaml_held_in_a_string() {
    let p = policy(
        r#"
kind: OverridePolicy
metadata: {name: config, namespace: shop}
spec:
  resourceSelectors: [{apiVersion: v1, kind: ConfigMap}]
  overrideRules:
    - overriders:
        fieldOverrider:
          - fieldPath: /data/settings.json
            json:
              - {subPath: /db/host, operator: replace, value: db.eu.internal}
              - {subPath: /features/-, operator: add, value: eu-billing}
          - fieldPath: /data/app.yaml
            yaml:
              - {subPath: /log/level, operator: replace, value: warn}
              - {subPath: /debug, operator: remove}
"#,
    );
    let mut cm = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": "shop"},
        "data": {
            "settings.json": r#"{"db":{"host":"db.us.internal","port":5432},"features":["base"]}"#,
            "app.yaml": "log:\n  level: info\ndebug: true\nname: shop\n",
        },
    });
    run(&mut cm, &cluster("member2", "eu-west"), &[], &[p]).unwrap();
    let settings: Value =
        serde_json::from_str(cm["data"]["settings.json"].as_str().unwrap()).unwrap();
    assert_eq!(
        settings,
        json!({"db": {"host": "db.eu.internal", "port": 5432}, "features": ["base", "eu-billing"]})
    );
    let app: Value = serde_yaml::from_str(cm["data"]["app.yaml"].as_str().unwrap()).unwrap();
    assert_eq!(app, json!({"log": {"level": "warn"}, "name": "shop"}));
}

#[test]
fn an_override_that_cannot_apply_names_the_policy_the_rule_and_the_cause() {
    let bad_path = policy(
        r#"
kind: OverridePolicy
metadata: {name: broken, namespace: shop}
spec:
  overrideRules:
    - overriders:
        labelsOverrider: [{operator: add, value: {ok: "yes"}}]
    - overriders:
        plaintext: [{path: /spec/strategy/rollingUpdate/maxSurge, operator: replace, value: 2}]
"#,
    );
    let mut d = deployment();
    let e = run(&mut d, &cluster("member1", "us-east"), &[], &[bad_path]).unwrap_err();
    assert_eq!(e.policy, "OverridePolicy/shop/broken");
    assert!(
        e.message
            .starts_with("overrideRules[1].plaintext[0]: replace /spec/strategy"),
        "{e}"
    );

    let not_yaml = policy(
        r#"
kind: ClusterOverridePolicy
metadata: {name: cfg}
spec:
  overrideRules:
    - overriders:
        fieldOverrider: [{fieldPath: /data/missing, json: [{subPath: /a, operator: remove}]}]
"#,
    );
    let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "shop"}, "data": {}});
    let e = run(&mut cm, &cluster("member1", "us-east"), &[not_yaml], &[]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "ClusterOverridePolicy/cfg: overrideRules[0].fieldOverrider[0]: fieldPath /data/missing does not exist"
    );

    let predicate = policy(
        r#"
kind: OverridePolicy
metadata: {name: img, namespace: shop}
spec:
  overrideRules:
    - overriders:
        imageOverrider: [{predicate: {path: /spec/image}, component: Tag, operator: replace, value: v2}]
"#,
    );
    let mut d = deployment();
    let e = run(&mut d, &cluster("member1", "us-east"), &[], &[predicate]).unwrap_err();
    assert!(
        e.message
            .contains("predicate.path /spec/image is not a string field"),
        "{e}"
    );
}

#[test]
fn a_predicate_finds_the_image_of_any_kind_and_the_legacy_pair_still_applies() {
    let p = policy(
        r#"
kind: OverridePolicy
metadata: {name: legacy, namespace: shop}
spec:
  targetCluster: {clusterNames: [member2]}
  overriders:
    imageOverrider:
      - {predicate: {path: /spec/runner/image}, component: Registry, operator: remove}
"#,
    );
    let custom = json!({
        "apiVersion": "ci.example.com/v1", "kind": "Pipeline",
        "metadata": {"name": "build", "namespace": "shop"},
        "spec": {"runner": {"image": "registry.example.com:5000/ci/runner:v3"}},
    });
    let mut in_member1 = custom.clone();
    run(
        &mut in_member1,
        &cluster("member1", "us-east"),
        &[],
        std::slice::from_ref(&p),
    )
    .unwrap();
    assert_eq!(in_member1, custom);
    let mut in_member2 = custom.clone();
    run(&mut in_member2, &cluster("member2", "eu-west"), &[], &[p]).unwrap();
    assert_eq!(in_member2["spec"]["runner"]["image"], "ci/runner:v3");
}
