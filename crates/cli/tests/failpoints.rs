//! Components stopped exactly at a failpoint (`FLOTILLA_FAILPOINTS`, armed
//! at run time through `/debug/failpoints`), as `kill -9` would stop them
//! there, and what a user sees once they are started again: nothing
//! acknowledged lost, nothing doubled, the pipeline finishing what was cut.

mod common;

use std::time::Duration;

use common::fleet::{Fleet, exists, jsonpath};
use common::{FAILPOINTS, Server, assert_has, flotilla, wait_for};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};

const WAIT: Duration = Duration::from_secs(60);

fn configmap(name: &str, i: usize) -> ConfigMap {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name}, "data": {"i": i.to_string()}}))
    .unwrap()
}

/// The embedded store stopped before a group of writes commits loses the
/// write in flight; stopped after it committed (and synced) but before
/// the answer, keeps it. Either way every acknowledged write is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_stopped_around_a_commit_keeps_every_acknowledged_write() {
    for (point, kept) in [("store-before-commit", false), ("store-after-commit", true)] {
        let mut s = Server::start_with_env(&[], &[(FAILPOINTS, "")]);
        let api: Api<ConfigMap> = Api::namespaced(s.client().await, "default");
        for i in 0..20 {
            api.create(&PostParams::default(), &configmap(&format!("acked-{i}"), i))
                .await
                .unwrap();
        }
        s.arm_failpoint(point, "return(crash)");
        let answer = api
            .create(&PostParams::default(), &configmap("in-flight", 20))
            .await;
        assert!(
            answer.is_err(),
            "{point}: the write stopped there is not acknowledged"
        );
        assert!(s.wait_exit(WAIT), "{point}: the server stopped there");

        s.set_env(&[]);
        s.spawn();
        let api: Api<ConfigMap> = Api::namespaced(s.client().await, "default");
        let listed = api.list(&ListParams::default()).await.unwrap().items;
        for i in 0..20 {
            let name = format!("acked-{i}");
            let found = listed.iter().find(|c| c.name_any() == name);
            assert_eq!(
                found.and_then(|c| c.data.as_ref()?.get("i").cloned()),
                Some(i.to_string()),
                "{point}: acknowledged {name} is there as written"
            );
        }
        assert_eq!(
            listed.iter().any(|c| c.name_any() == "in-flight"),
            kept,
            "{point}: the write in flight is {}",
            if kept {
                "durable (committed and synced)"
            } else {
                "not written"
            }
        );
    }
}

fn configmap_to(clusters: &str, name: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: ConfigMap
metadata: {{name: {name}, namespace: default}}
data: {{greeting: hello}}
---
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata: {{name: {name}, namespace: default}}
spec:
  resourceSelectors:
  - {{apiVersion: v1, kind: ConfigMap, name: {name}}}
  placement:
    clusterAffinity:
      clusterNames: [{clusters}]
"#
    )
}

/// The Works of binding `binding` in the hub: `cluster applied` a line.
fn works_of(fleet: &Fleet, binding: &str) -> Vec<String> {
    let id = fleet.jsonpath_hub(
        &["get", "rb", binding],
        "{.metadata.labels.resourcebinding\\.karmada\\.io/permanent-id}",
    );
    assert!(!id.is_empty(), "binding {binding} has its permanent id");
    let out = jsonpath(
        &fleet.hub,
        &[
            "get",
            "works",
            "-A",
            "-l",
            &format!("resourcebinding.karmada.io/permanent-id={id}"),
        ],
        "{range .items[*]}{.metadata.namespace} {.status.conditions[?(@.type==\"Applied\")].status}{\"\\n\"}{end}",
    );
    let mut lines: Vec<String> = out.lines().map(str::to_string).collect();
    lines.sort();
    lines
}

/// The hub stopped after a Work reached its member and before the Work's
/// status was written: the member holds the copy, and once the hub is
/// back the Work reports Applied and the binding FullyApplied, with the
/// one copy.
#[test]
fn the_hub_stopped_between_a_member_write_and_the_works_status_finishes_it() {
    let mut fleet = Fleet::armable(&[("member1", "us-east")]);
    fleet
        .hub
        .arm_failpoint("execution-after-member-write", "return(crash)");
    fleet.apply(&configmap_to("member1", "cut"));
    assert!(
        fleet.hub.wait_exit(WAIT),
        "the hub stopped at the failpoint"
    );
    let m = fleet.member("member1");
    assert_eq!(
        jsonpath(m, &["get", "cm", "cut"], "{.data.greeting}"),
        "hello",
        "the member write happened before the stop"
    );

    fleet.hub.set_env(&[]);
    fleet.hub.spawn();
    wait_for(WAIT, "the binding FullyApplied", || {
        fleet.jsonpath_hub(
            &["get", "rb", "cut-configmap"],
            "{.status.conditions[?(@.type=='FullyApplied')].status}",
        ) == "True"
    });
    assert_eq!(
        works_of(&fleet, "cut-configmap"),
        ["karmada-es-member1 True"]
    );
    let copies = jsonpath(
        fleet.member("member1"),
        &["get", "cm", "-A", "--field-selector", "metadata.name=cut"],
        "{.items[*].metadata.namespace}",
    );
    assert_eq!(copies, "default", "one copy");
}

/// The hub stopped after writing one of a binding's three Works: once it
/// is back, every member gets its copy, and the binding has exactly one
/// Work per member, all applied.
#[test]
fn the_hub_stopped_between_a_bindings_work_writes_writes_the_rest_once() {
    let mut fleet = Fleet::armable(&[
        ("member1", "us-east"),
        ("member2", "us-west"),
        ("member3", "eu-west"),
    ]);
    fleet
        .hub
        .arm_failpoint("binding-after-work-write", "return(crash)");
    fleet.apply(&configmap_to("member1, member2, member3", "split"));
    assert!(
        fleet.hub.wait_exit(WAIT),
        "the hub stopped at the failpoint"
    );

    fleet.hub.set_env(&[]);
    fleet.hub.spawn();
    wait_for(WAIT, "the binding FullyApplied", || {
        fleet.jsonpath_hub(
            &["get", "rb", "split-configmap"],
            "{.status.conditions[?(@.type=='FullyApplied')].status}",
        ) == "True"
    });
    assert_eq!(
        works_of(&fleet, "split-configmap"),
        [
            "karmada-es-member1 True",
            "karmada-es-member2 True",
            "karmada-es-member3 True"
        ]
    );
    for m in ["member1", "member2", "member3"] {
        assert!(exists(fleet.member(m), &["get", "cm", "split"]), "{m}");
    }
}

const OFFLOADED: &str = r#"
apiVersion: v1
kind: Namespace
metadata:
  name: cut-app
---
apiVersion: offloading.liqo.io/v1beta1
kind: NamespaceOffloading
metadata:
  name: offloading
  namespace: cut-app
spec:
  namespaceMappingStrategy: DefaultName
  podOffloadingStrategy: Remote
  clusterSelector:
    nodeSelectorTerms: []
"#;

/// The consumer stopped right after it made a pod's ShadowPod in the
/// provider, before marking or reflecting the pod: started again, it
/// finds the ShadowPod it made rather than make another, and the pod runs
/// once, its status reflected.
#[test]
fn the_consumer_stopped_after_a_shadowpod_is_made_runs_the_pod_once() {
    let mut east = Server::member_with_env("east", &[], &[(FAILPOINTS, "")]);
    let west = Server::member("west", &[]);
    let kc = |m: &Server| m.kubeconfig.to_str().unwrap().to_string();
    let out = flotilla(&[
        "peer",
        "--kubeconfig",
        &kc(&east),
        "--remote-kubeconfig",
        &kc(&west),
        "--timeout",
        "60s",
    ]);
    assert!(
        out.status.success(),
        "peer: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    east.ok_stdin(&["apply", "-f", "-"], OFFLOADED);
    wait_for(WAIT, "the namespace offloaded", || {
        jsonpath(
            &east,
            &[
                "get",
                "namespaceoffloadings.offloading.liqo.io",
                "offloading",
                "-n",
                "cut-app",
            ],
            "{.status.offloadingPhase}",
        ) == "Ready"
    });
    east.arm_failpoint("peering-after-shadowpod-create", "return(crash)");
    east.ok(&[
        "run",
        "solo",
        "-n",
        "cut-app",
        "--image=busybox",
        "--command",
        "--",
        "sleep",
        "3600",
    ]);
    assert!(
        east.wait_exit(WAIT),
        "the consumer stopped at the failpoint"
    );
    let twin = "cut-app-east";
    assert_eq!(
        jsonpath(
            &west,
            &["get", "shadowpods.offloading.liqo.io", "-n", twin],
            "{.items[*].metadata.name}"
        ),
        "solo",
        "the ShadowPod was made before the stop"
    );

    east.set_env(&[]);
    east.spawn();
    wait_for(WAIT, "the pod Running in the consumer", || {
        jsonpath(
            &east,
            &["get", "pod", "solo", "-n", "cut-app"],
            "{.status.phase}",
        ) == "Running"
    });
    assert_eq!(
        jsonpath(
            &west,
            &["get", "shadowpods.offloading.liqo.io", "-n", twin],
            "{.items[*].metadata.name}"
        ),
        "solo",
        "one ShadowPod"
    );
    assert_eq!(
        jsonpath(
            &west,
            &["get", "pods", "-n", twin],
            "{.items[*].metadata.name}"
        ),
        "solo",
        "one pod in the provider"
    );
    assert_has(
        &jsonpath(
            &east,
            &["get", "pod", "solo", "-n", "cut-app"],
            "{.metadata.labels}",
        ),
        &["liqo.io/shadowPod"],
    );
}
