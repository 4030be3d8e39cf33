//! Every control-plane replica on one etcd serves the whole API: custom
//! resource definitions created, changed and deleted through any replica
//! are served by all of them, replicas started at the same instant install
//! the federation's definitions without losing any, `flotilla join`
//! works through either replica, and a ResourceQuota written through one
//! replica is enforced by the others.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::fleet::stderr;
use common::{Server, flotilla, wait_for};

/// Generous: a replica follows the store's CRDs within about a second.
const FOLLOW: Duration = Duration::from_secs(15);

/// The custom resources in the shared store, as `kubectl api-resources -o
/// name` names them (`plural.group`).
fn stored_definitions(replica: &Server) -> BTreeSet<String> {
    replica
        .ok(&["get", "customresourcedefinitions", "-o", "name"])
        .lines()
        .filter_map(|l| l.rsplit('/').next())
        .map(str::to_string)
        .collect()
}

fn served(replica: &Server) -> BTreeSet<String> {
    let out = replica.kubectl(&["api-resources", "-o", "name"]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

fn widget_crd(versions: &str, column: &str) -> String {
    format!(
        r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {{name: widgets.example.com}}
spec:
  group: example.com
  scope: Namespaced
  names: {{plural: widgets, singular: widget, kind: Widget, shortNames: [wd]}}
  versions:
{versions}
"#
    )
    .replace("COLUMN", column)
}

fn version(name: &str, served: bool, storage: bool) -> String {
    format!(
        r#"  - name: {name}
    served: {served}
    storage: {storage}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {{type: object, properties: {{size: {{type: string}}}}}}
    additionalPrinterColumns:
    - {{name: COLUMN, type: string, jsonPath: .spec.size}}
"#
    )
}

fn kubectl_succeeds(replica: &Server, args: &[&str]) -> bool {
    replica.kubectl(args).status.success()
}

#[test]
fn definitions_follow_the_store_on_every_replica() {
    let etcd = flotilla_store::testing::single();
    // Three replicas started at once: each installs the federation's
    // definitions, racing the others.
    let replicas = Server::controlplanes_on_etcd(3, &etcd.client_url, &[]);

    // Every replica serves every definition in the store.
    let stored = stored_definitions(&replicas[0]);
    assert!(
        stored.contains("clusters.cluster.karmada.io")
            && stored.contains("propagationpolicies.policy.karmada.io")
            && stored.len() >= 14,
        "{stored:?}"
    );
    for (i, r) in replicas.iter().enumerate() {
        wait_for(FOLLOW, &format!("replica {i} serving every CRD"), || {
            stored.is_subset(&served(r))
        });
    }

    // Created through replica 0: served by all, objects written through
    // one replica are read through another.
    let v1 = version("v1", true, true);
    replicas[0].ok_stdin(&["apply", "-f", "-"], &widget_crd(&v1, "SIZE"));
    for (i, r) in replicas.iter().enumerate() {
        wait_for(FOLLOW, &format!("replica {i} serving widgets"), || {
            kubectl_succeeds(r, &["get", "widgets"])
        });
    }
    replicas[1].ok_stdin(
        &["apply", "-f", "-"],
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w1, namespace: default}\nspec: {size: large}\n",
    );
    let table = replicas[2].ok(&["get", "wd", "w1"]);
    assert!(table.contains("SIZE") && table.contains("large"), "{table}");

    // Changed through replica 1: a second version, another printer column.
    let both = format!(
        "{}{}",
        version("v1", true, true),
        version("v2", true, false)
    );
    replicas[1].ok_stdin(&["apply", "-f", "-"], &widget_crd(&both, "BIGNESS"));
    for (i, r) in replicas.iter().enumerate() {
        wait_for(FOLLOW, &format!("replica {i} serving widgets v2"), || {
            let out = r.kubectl(&["get", "widgets.v2.example.com", "w1"]);
            out.status.success() && String::from_utf8_lossy(&out.stdout).contains("BIGNESS")
        });
    }
    // v1 no longer served, through replica 2.
    let v1_off = format!(
        "{}{}",
        version("v1", false, true),
        version("v2", true, false)
    );
    replicas[2].ok_stdin(&["apply", "-f", "-"], &widget_crd(&v1_off, "BIGNESS"));
    for (i, r) in replicas.iter().enumerate() {
        wait_for(FOLLOW, &format!("replica {i} not serving v1"), || {
            !kubectl_succeeds(r, &["get", "widgets.v1.example.com"])
                && kubectl_succeeds(r, &["get", "widgets.v2.example.com"])
        });
        let openapi = r.ok(&["get", "--raw", "/openapi/v3"]);
        assert!(
            openapi.contains("apis/example.com/v2") && !openapi.contains("apis/example.com/v1\""),
            "replica {i}: {openapi}"
        );
    }

    // Deleted through replica 2: no replica serves it once it is gone.
    replicas[2].ok(&["delete", "crd", "widgets.example.com", "--wait=true"]);
    for (i, r) in replicas.iter().enumerate() {
        wait_for(
            FOLLOW,
            &format!("replica {i} no longer serving widgets"),
            || {
                let out = r.kubectl(&["get", "widgets.example.com"]);
                let why = stderr(&out);
                // kubectl says one or the other as its discovery cache is
                // fresh or stale.
                !out.status.success()
                    && (why.contains("the server doesn't have a resource type")
                        || why.contains("the server could not find the requested resource"))
                    && !served(r).contains("widgets.example.com")
            },
        );
    }
    // And created again, through replica 1, it is served everywhere anew.
    replicas[1].ok_stdin(&["apply", "-f", "-"], &widget_crd(&v1, "SIZE"));
    for (i, r) in replicas.iter().enumerate() {
        wait_for(
            FOLLOW,
            &format!("replica {i} serving widgets again"),
            || kubectl_succeeds(r, &["get", "widgets"]),
        );
    }
}

#[test]
fn a_member_joins_through_either_replica() {
    let etcd = flotilla_store::testing::single();
    let replicas = Server::controlplanes_on_etcd(2, &etcd.client_url, &[]);
    let members = [
        Server::member("m1", &["--nodes", "1"]),
        Server::member("m2", &["--nodes", "1"]),
    ];
    // m1 through replica 0, m2 through replica 1, at once after start-up.
    for (member, (name, replica)) in members
        .iter()
        .zip([("m1", &replicas[0]), ("m2", &replicas[1])])
    {
        let out = flotilla(&[
            "join",
            name,
            "--kubeconfig",
            replica.kubeconfig.to_str().unwrap(),
            "--cluster-kubeconfig",
            member.kubeconfig.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "join {name}: {}", stderr(&out));
    }
    for (i, r) in replicas.iter().enumerate() {
        wait_for(
            Duration::from_secs(60),
            &format!("both Ready through replica {i}"),
            || {
                let out = r.kubectl(&[
                "get",
                "clusters",
                "-o",
                "jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type==\"Ready\")].status} {end}",
            ]);
                String::from_utf8_lossy(&out.stdout).trim() == "m1=True m2=True"
            },
        );
    }
}

/// A client behind a load balancer reads its own writes whichever replica
/// answers: reads without a resourceVersion are consistent, and a write
/// naming a version another replica served is not refused as a conflict.
#[tokio::test(flavor = "multi_thread")]
async fn what_one_replica_wrote_the_next_request_reads_through_another() {
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
    use kube::api::{Api, DeleteParams, PostParams};

    let etcd = flotilla_store::testing::single();
    let replicas = Server::controlplanes_on_etcd(2, &etcd.client_url, &["--leader-elect=false"]);
    let a = replicas[0].client().await;
    let b = replicas[1].client().await;
    for i in 0..20 {
        // A namespace made through one replica takes objects through the other.
        let ns = format!("rr{i}");
        Api::<Namespace>::all(a.clone())
            .create(
                &PostParams::default(),
                &serde_json::from_value(serde_json::json!({"metadata": {"name": ns}})).unwrap(),
            )
            .await
            .expect("namespace through A");
        let on_a: Api<ConfigMap> = Api::namespaced(a.clone(), &ns);
        let on_b: Api<ConfigMap> = Api::namespaced(b.clone(), &ns);
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "c"}, "data": {"v": "1"}
        }))
        .unwrap();
        let created = on_b
            .create(&PostParams::default(), &cm)
            .await
            .expect("created through B in a namespace A made");
        // Read back through A at once.
        let mut read = on_a.get("c").await.expect("read through A");
        assert_eq!(
            read.metadata.resource_version,
            created.metadata.resource_version
        );
        // Replaced through A with B's version, then through B with A's.
        read.data = Some([("v".to_string(), "2".to_string())].into());
        let replaced = on_a
            .replace("c", &PostParams::default(), &read)
            .await
            .expect("replace through A");
        let mut again = replaced.clone();
        again.data = Some([("v".to_string(), "3".to_string())].into());
        on_b.replace("c", &PostParams::default(), &again)
            .await
            .expect("replace through B with the version A served");
        // Deleted through A right after B's write; B lists it gone.
        on_a.delete("c", &DeleteParams::default())
            .await
            .expect("delete through A");
        let left = on_b
            .list(&Default::default())
            .await
            .expect("list through B");
        let left: Vec<String> = left
            .items
            .iter()
            .map(|c| c.metadata.name.clone().unwrap_or_default())
            .filter(|n| !common::is_cluster_default(n))
            .collect();
        assert!(left.is_empty(), "B still lists {left:?}");
    }
}

/// Services created at the same moment through two replicas get distinct
/// ClusterIPs and NodePorts.
#[tokio::test(flavor = "multi_thread")]
async fn replicas_creating_services_at_once_never_share_an_address() {
    use k8s_openapi::api::core::v1::Service;
    use kube::api::{Api, PostParams};

    let etcd = flotilla_store::testing::single();
    let replicas = Server::controlplanes_on_etcd(2, &etcd.client_url, &["--leader-elect=false"]);
    let clients = [replicas[0].client().await, replicas[1].client().await];
    let mut creates = Vec::new();
    for i in 0..24 {
        let api: Api<Service> = Api::namespaced(clients[i % 2].clone(), "default");
        let svc: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("s{i}")},
            "spec": {"type": "NodePort", "ports": [{"port": 80}]}
        }))
        .unwrap();
        creates.push(tokio::spawn(async move {
            api.create(&PostParams::default(), &svc).await
        }));
    }
    let mut ips = BTreeSet::new();
    let mut ports = BTreeSet::new();
    for create in creates {
        let svc = create.await.unwrap().expect("service created");
        let spec = svc.spec.expect("spec");
        let ip = spec.cluster_ip.expect("a ClusterIP");
        assert!(ips.insert(ip.clone()), "ClusterIP {ip} handed out twice");
        let port = spec.ports.unwrap()[0].node_port.expect("a NodePort");
        assert!(ports.insert(port), "NodePort {port} handed out twice");
    }
    // As each replica lists them, too.
    for r in &replicas {
        let listed = r.ok(&[
            "get",
            "services",
            "-o",
            "jsonpath={.items[*].spec.clusterIP}",
        ]);
        let distinct: BTreeSet<&str> = listed.split_whitespace().collect();
        assert_eq!(
            distinct.len(),
            listed.split_whitespace().count(),
            "{listed}"
        );
    }
}

#[test]
fn a_quota_written_through_one_replica_binds_the_others() {
    let etcd = flotilla_store::testing::single();
    let replicas = Server::controlplanes_on_etcd(2, &etcd.client_url, &[]);
    replicas[0].ok(&["create", "namespace", "quota-follow"]);
    replicas[0].ok(&[
        "-n",
        "quota-follow",
        "create",
        "quota",
        "none",
        "--hard=configmaps=0",
    ]);
    let mut n = 0;
    let mut create = |replica: &Server| {
        n += 1;
        replica.kubectl(&[
            "-n",
            "quota-follow",
            "create",
            "configmap",
            &format!("c{n}"),
        ])
    };
    wait_for(FOLLOW, "replica 1 refusing past the quota", || {
        let out = create(&replicas[1]);
        !out.status.success() && stderr(&out).contains("exceeded quota: none")
    });
    replicas[0].ok(&["-n", "quota-follow", "delete", "quota", "none"]);
    wait_for(FOLLOW, "replica 1 admitting once it is gone", || {
        create(&replicas[1]).status.success()
    });
}
