//! Every Flotilla component acts with an identity of its own, confined by
//! RBAC: the hub's controllers, the hub's credential in each Push member
//! (revoked by the member in seconds), and a pull agent's token.

mod common;

use std::time::{Duration, Instant};

use base64::Engine;
use common::fleet::Fleet;
use common::{assert_has, flotilla, wait_for};

fn can_i(fleet: &Fleet, user: &str, args: &[&str]) -> String {
    let mut all = vec!["auth", "can-i", "--as", user];
    all.extend_from_slice(args);
    let out = fleet.hub.kubectl(&all);
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn the_hubs_controllers_hold_what_the_pipeline_needs_and_no_more() {
    let fleet = Fleet::new(&[("m1", "us-east")]);
    let controllers = "system:flotilla:controlplane";
    // What the pipeline does: read any template, label it and report its
    // status, write its own objects.
    for (args, expected) in [
        (&["get", "deployments", "-A"][..], "yes"),
        (&["list", "secrets", "-A"], "yes"),
        (&["patch", "deployments/status", "-n", "default"], "yes"),
        (
            &["create", "works.work.karmada.io", "-n", "karmada-es-m1"],
            "yes",
        ),
        (&["update", "clusters.cluster.karmada.io/status"], "yes"),
        (&["create", "namespaces"], "yes"),
        // What it never does: create or delete users' objects, touch
        // RBAC, impersonate, read the other clusters' credentials out of
        // their namespace by deleting them.
        (&["create", "deployments", "-n", "default"], "no"),
        (&["delete", "configmaps", "-n", "default"], "no"),
        (&["create", "clusterrolebindings"], "no"),
        (&["create", "roles", "-n", "default"], "no"),
        (&["impersonate", "users"], "no"),
        (&["delete", "secrets", "-n", "default"], "no"),
        (&["delete", "secrets", "-n", "karmada-cluster"], "yes"),
    ] {
        assert_eq!(can_i(&fleet, controllers, args), expected, "{args:?}");
    }
    // It still propagates with only that.
    fleet.hub.ok_stdin(
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: probe, namespace: default}\ndata: {k: v}\n---\napiVersion: policy.karmada.io/v1alpha1\nkind: PropagationPolicy\nmetadata: {name: probe, namespace: default}\nspec:\n  resourceSelectors: [{apiVersion: v1, kind: ConfigMap, name: probe}]\n  placement: {clusterAffinity: {clusterNames: [m1]}}\n",
    );
    wait_for(Duration::from_secs(60), "the ConfigMap in m1", || {
        fleet
            .member("m1")
            .kubectl(&["get", "configmap", "probe", "-n", "default"])
            .status
            .success()
    });
}

#[test]
fn a_push_members_credential_is_its_own_and_revoking_it_cuts_the_hub_off() {
    let fleet = Fleet::new(&[("m1", "us-east")]);
    // The hub holds a ServiceAccount's token, not the member's admin's.
    let stored = fleet.jsonpath_hub(
        &["get", "secret", "m1", "-n", "karmada-cluster"],
        "{.data.token}",
    );
    let token = base64::engine::general_purpose::STANDARD
        .decode(stored.trim())
        .expect("a base64 token");
    let token = String::from_utf8(token).expect("a text token");
    let member = fleet.member("m1");
    let whoami = member.ok(&[
        "--token",
        &token,
        "auth",
        "whoami",
        "-o",
        "jsonpath={.status.userInfo.username}",
    ]);
    assert_eq!(whoami, "system:serviceaccount:karmada-cluster:karmada-m1");
    let admin_token = std::fs::read_to_string(member.data_dir().join("admin-token")).unwrap();
    assert_ne!(token.trim(), admin_token.trim());

    // The member revokes it: the token's Secret goes, and within seconds
    // the hub can no longer reach the member.
    let started = Instant::now();
    member.ok(&[
        "delete",
        "secret",
        "karmada-m1-token",
        "-n",
        "karmada-cluster",
    ]);
    let out = member.kubectl(&["--token", &token, "get", "ns"]);
    assert_has(&String::from_utf8_lossy(&out.stderr), &["Unauthorized"]);
    wait_for(Duration::from_secs(30), "the hub to lose m1", || {
        fleet.jsonpath_hub(
            &["get", "cluster", "m1"],
            "{.status.conditions[?(@.type==\"Ready\")].status}",
        ) != "True"
    });
    eprintln!("the hub lost m1 {:?} after revocation", started.elapsed());
}

#[test]
fn unjoining_a_push_member_removes_the_hubs_identity_there() {
    let fleet = Fleet::new(&[("m1", "us-east")]);
    let member = fleet.member("m1");
    member.ok(&[
        "get",
        "serviceaccount",
        "karmada-m1",
        "-n",
        "karmada-cluster",
    ]);
    member.ok(&[
        "get",
        "clusterrolebinding",
        "karmada-controller-manager:karmada-m1",
    ]);
    let out = flotilla(&[
        "unjoin",
        "m1",
        "--kubeconfig",
        fleet.hub.kubeconfig.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for args in [
        &[
            "get",
            "serviceaccount",
            "karmada-m1",
            "-n",
            "karmada-cluster",
        ][..],
        &[
            "get",
            "clusterrolebinding",
            "karmada-controller-manager:karmada-m1",
        ],
        &[
            "get",
            "clusterrole",
            "karmada-controller-manager:karmada-m1",
        ],
    ] {
        wait_for(Duration::from_secs(30), &format!("{args:?} to go"), || {
            !member.kubectl(args).status.success()
        });
    }
}
