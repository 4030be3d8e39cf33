//! `flotilla cluster`: Cluster API's clusters as clusterctl users handle
//! them: `generate` writes a cluster's manifests, `describe` prints
//! clusterctl's tree, `kubeconfig` the workload cluster's admin
//! kubeconfig.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Context;
use flotilla_apiserver::table::human_duration;
use flotilla_lifecycle::api::{self, Ref};
use flotilla_lifecycle::generate;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject, ListParams};
use serde_json::Value;

use crate::inspect::table::{Cell, Colour, Table};
use crate::inspect::{HubArgs, hub_error};

#[derive(clap::Subcommand)]
pub enum ClusterCommand {
    /// Write the manifests of a cluster for the local provider (CAPD's
    /// kinds), as `clusterctl generate cluster --infrastructure docker`.
    Generate(GenerateArgs),
    /// A cluster's objects as a tree with their state, as `clusterctl
    /// describe cluster`.
    Describe(DescribeArgs),
    /// The workload cluster's admin kubeconfig (from its Secret), as
    /// `clusterctl get kubeconfig`.
    Kubeconfig(KubeconfigArgs),
}

#[derive(clap::Args)]
pub struct GenerateArgs {
    name: String,
    #[arg(short, long, default_value = "default")]
    namespace: String,
    #[arg(long, default_value = "v1.33.0")]
    kubernetes_version: String,
    #[arg(long, default_value_t = 1)]
    control_plane_machine_count: u32,
    #[arg(long, default_value_t = 1)]
    worker_machine_count: u32,
    /// The pod network (the Cluster's clusterNetwork.pods).
    #[arg(long, default_value = "192.168.0.0/16")]
    pod_cidr: String,
    /// The service network (clusterNetwork.services).
    #[arg(long, default_value = "10.128.0.0/12")]
    service_cidr: String,
    /// A named flavor of the template (none is generated yet: the
    /// quick start's ClusterClass manifests apply as they are).
    #[arg(long, default_value = "")]
    flavor: String,
    /// How the cluster's member runs pods: `sim` (simulated) or `netns`
    /// (processes in network namespaces; the control plane needs root).
    #[arg(long, value_parser = ["sim", "netns"])]
    runtime: Option<String>,
}

#[derive(clap::Args)]
pub struct DescribeArgs {
    name: String,
    #[arg(short, long, default_value = "default")]
    namespace: String,
    #[command(flatten)]
    hub: HubArgs,
}

#[derive(clap::Args)]
pub struct KubeconfigArgs {
    name: String,
    #[arg(short, long, default_value = "default")]
    namespace: String,
    #[command(flatten)]
    hub: HubArgs,
}

pub async fn run(command: ClusterCommand) -> anyhow::Result<()> {
    match command {
        ClusterCommand::Generate(a) => {
            let options = generate::Options {
                name: a.name,
                namespace: a.namespace,
                kubernetes_version: a.kubernetes_version,
                control_plane_machines: a.control_plane_machine_count,
                workers: vec![generate::Pool::md0(a.worker_machine_count)],
                pod_cidr: a.pod_cidr,
                service_cidr: a.service_cidr,
                flavor: a.flavor,
                runtime: a.runtime,
            };
            crate::inspect::emit(&generate::yaml(&options)?)
        }
        ClusterCommand::Describe(a) => describe(a).await,
        ClusterCommand::Kubeconfig(a) => {
            let hub = a.hub.client().await?;
            let secrets: Api<Secret> = Api::namespaced(hub, &a.namespace);
            let name = format!("{}-kubeconfig", a.name);
            let secret = secrets.get_opt(&name).await.map_err(hub_error)?.with_context(|| {
                format!(
                    "no Secret {}/{name}: is cluster {} provisioned? (`flotilla cluster describe {}`)",
                    a.namespace, a.name, a.name
                )
            })?;
            let value = secret
                .data
                .and_then(|d| {
                    d.get("value")
                        .map(|v| String::from_utf8_lossy(&v.0).into_owned())
                })
                .with_context(|| format!("Secret {name} has no key `value`"))?;
            crate::inspect::emit(&value)
        }
    }
}

/// One object of the tree.
struct Node {
    name: String,
    replicas: String,
    available: String,
    ready: String,
    up_to_date: String,
    condition: Option<Value>,
}

fn condition(object: &Value, type_: &str) -> Option<Value> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .cloned()
}

fn count(v: &Value) -> String {
    v.as_i64().map(|n| n.to_string()).unwrap_or_default()
}

fn flag(object: &Value, type_: &str) -> String {
    let on = condition(object, type_).is_some_and(|c| c["status"] == "True");
    (if on { "1" } else { "0" }).to_string()
}

fn machine_node(m: &Value) -> Node {
    Node {
        name: format!(
            "Machine/{}",
            m["metadata"]["name"].as_str().unwrap_or_default()
        ),
        replicas: "1".into(),
        available: flag(m, "Available"),
        ready: flag(m, "Ready"),
        up_to_date: flag(m, "UpToDate"),
        condition: condition(m, "Ready"),
    }
}

fn counters(object: &Value, available_condition: &str, name: String) -> Node {
    let s = &object["status"];
    Node {
        name,
        replicas: format!(
            "{}/{}",
            count(&s["replicas"]),
            count(&object["spec"]["replicas"])
        ),
        available: count(&s["availableReplicas"]),
        ready: count(&s["readyReplicas"]),
        up_to_date: count(&s["upToDateReplicas"]),
        condition: condition(object, available_condition),
    }
}

/// Machines in the same state shown as one `N Machines...` row, as
/// clusterctl groups them.
fn grouped(machines: &[&Value]) -> Vec<Node> {
    type State = (String, String, String, String, String);
    let mut groups: BTreeMap<State, Vec<(Node, &str)>> = BTreeMap::new();
    for m in machines {
        let n = machine_node(m);
        let c = n.condition.clone().unwrap_or_default();
        let key = (
            n.available.clone(),
            n.ready.clone(),
            n.up_to_date.clone(),
            c["status"].as_str().unwrap_or_default().to_string(),
            c["reason"].as_str().unwrap_or_default().to_string(),
        );
        let name = m["metadata"]["name"].as_str().unwrap_or_default();
        groups.entry(key).or_default().push((n, name));
    }
    groups
        .into_values()
        .filter_map(|mut group| {
            let count = group.len();
            let names: Vec<&str> = group.iter().map(|(_, name)| *name).collect();
            let shown = names.iter().take(2).copied().collect::<Vec<_>>().join(", ");
            let more = if count > 2 { ", ..." } else { "" };
            let mut node = group.drain(..).next()?.0;
            if count == 1 {
                return Some(node);
            }
            let total = |flag: &str| count.to_string().repeat(usize::from(flag == "1"));
            node.name = format!("{count} Machines...");
            node.replicas = String::new();
            node.available = total(&node.available);
            node.ready = total(&node.ready);
            node.up_to_date = total(&node.up_to_date);
            if let Some(c) = node.condition.as_mut() {
                c["message"] = Value::String(format!("See {shown}{more}"));
            }
            Some(node)
        })
        .collect()
}

/// The rows of `machines` under `stem`, grouped, each with its branch.
fn machine_rows(table: &mut Table, stem: &str, machines: &[&Value]) {
    let nodes = grouped(machines);
    let n = nodes.len();
    for (i, node) in nodes.into_iter().enumerate() {
        let branch = if i + 1 == n { "└─" } else { "├─" };
        row(table, &format!("{stem}{branch}"), node);
    }
}

fn row(table: &mut Table, prefix: &str, node: Node) {
    let c = node.condition.unwrap_or_default();
    let status = c["status"].as_str().unwrap_or_default().to_string();
    let colour = match status.as_str() {
        "True" => Some(Colour::Green),
        "False" => Some(Colour::Red),
        "Unknown" => Some(Colour::Yellow),
        _ => None,
    };
    let since = c["lastTransitionTime"]
        .as_str()
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        .map(|t| human_duration(jiff::Timestamp::now().as_second() - t.as_second()))
        .unwrap_or_default();
    table.row(vec![
        Cell::from(format!("{prefix}{}", node.name)),
        node.replicas.into(),
        node.available.into(),
        node.ready.into(),
        node.up_to_date.into(),
        match colour {
            Some(colour) => Cell::coloured(status, colour),
            None => status.into(),
        },
        c["reason"].as_str().unwrap_or_default().into(),
        since.into(),
        c["message"].as_str().unwrap_or_default().into(),
    ]);
}

async fn describe(a: DescribeArgs) -> anyhow::Result<()> {
    let hub = a.hub.client().await?;
    let get = |r: &kube::api::ApiResource| {
        Api::<DynamicObject>::namespaced_with(hub.clone(), &a.namespace, r)
    };
    let value = |o: DynamicObject| serde_json::to_value(o).unwrap_or_default();
    let cluster = get(&api::clusters())
        .get_opt(&a.name)
        .await
        .map_err(hub_error)?
        .map(value)
        .with_context(|| {
            format!(
                "no Cluster {}/{} (`kubectl get cl -A` lists them)",
                a.namespace, a.name
            )
        })?;
    let of_cluster = format!("{}={}", api::CLUSTER_NAME_LABEL, a.name);
    let machines: Vec<Value> = get(&api::machines())
        .list(&ListParams::default().labels(&of_cluster))
        .await
        .map_err(hub_error)?
        .items
        .into_iter()
        .map(value)
        .collect();
    let mut table = Table::new([
        "NAME",
        "REPLICAS",
        "AVAILABLE",
        "READY",
        "UP TO DATE",
        "STATUS",
        "REASON",
        "SINCE",
        "MESSAGE",
    ]);
    let s = &cluster["status"];
    let sum = |f: &str| {
        s["controlPlane"][f].as_i64().unwrap_or(0) + s["workers"][f].as_i64().unwrap_or(0)
    };
    row(
        &mut table,
        "",
        Node {
            name: format!("Cluster/{}", a.name),
            replicas: format!("{}/{}", sum("replicas"), sum("desiredReplicas")),
            available: sum("availableReplicas").to_string(),
            ready: sum("readyReplicas").to_string(),
            up_to_date: sum("upToDateReplicas").to_string(),
            condition: condition(&cluster, "Available"),
        },
    );
    if let Some(r) = Ref::from_value(&cluster["spec"]["infrastructureRef"]) {
        let infra = get(&r.resource())
            .get_opt(&r.name)
            .await
            .ok()
            .flatten()
            .map(value)
            .unwrap_or_default();
        row(
            &mut table,
            "├─",
            Node {
                name: format!("ClusterInfrastructure - {r}"),
                replicas: String::new(),
                available: String::new(),
                ready: String::new(),
                up_to_date: String::new(),
                condition: condition(&infra, "Ready")
                    .or_else(|| condition(&cluster, "InfrastructureReady")),
            },
        );
    }
    let deployments: Vec<Value> = get(&api::machine_deployments())
        .list(&ListParams::default())
        .await
        .map_err(hub_error)?
        .items
        .into_iter()
        .map(value)
        .filter(|md| md["spec"]["clusterName"] == a.name.as_str())
        .collect();
    let cp_last = if deployments.is_empty() {
        "└─"
    } else {
        "├─"
    };
    let cp_child = if deployments.is_empty() { "  " } else { "│ " };
    if let Some(r) = Ref::from_value(&cluster["spec"]["controlPlaneRef"]) {
        let cp = get(&r.resource())
            .get_opt(&r.name)
            .await
            .ok()
            .flatten()
            .map(value)
            .unwrap_or_default();
        row(
            &mut table,
            cp_last,
            counters(&cp, "Available", format!("ControlPlane - {r}")),
        );
        let ours: Vec<&Value> = machines
            .iter()
            .filter(|m| {
                m["metadata"]["labels"]
                    .get(api::CONTROL_PLANE_LABEL)
                    .is_some()
            })
            .collect();
        machine_rows(&mut table, cp_child, &ours);
    }
    if !deployments.is_empty() {
        row(
            &mut table,
            "└─",
            Node {
                name: "Workers".into(),
                replicas: String::new(),
                available: String::new(),
                ready: String::new(),
                up_to_date: String::new(),
                condition: None,
            },
        );
        let d = deployments.len();
        for (i, md) in deployments.iter().enumerate() {
            let last = i + 1 == d;
            let md_name = md["metadata"]["name"].as_str().unwrap_or_default();
            row(
                &mut table,
                if last { "  └─" } else { "  ├─" },
                counters(md, "Available", format!("MachineDeployment/{md_name}")),
            );
            let ours: Vec<&Value> = machines
                .iter()
                .filter(|m| m["metadata"]["labels"][api::DEPLOYMENT_NAME_LABEL] == md_name)
                .collect();
            machine_rows(&mut table, if last { "    " } else { "  │ " }, &ours);
        }
    }
    crate::inspect::emit(&table.for_stdout())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(name: &str, available: &str) -> Value {
        serde_json::json!({
            "metadata": {"name": name},
            "status": {"conditions": [
                {"type": "Available", "status": available},
                {"type": "Ready", "status": available, "reason": "Ready"},
                {"type": "UpToDate", "status": "True"},
            ]},
        })
    }

    #[test]
    fn machines_in_the_same_state_are_one_row() {
        let ms = [
            machine("a", "True"),
            machine("b", "True"),
            machine("c", "True"),
            machine("d", "False"),
        ];
        let refs: Vec<&Value> = ms.iter().collect();
        let rows = grouped(&refs);
        assert_eq!(rows.len(), 2);
        let (single, group) = if rows[0].name.starts_with("Machine/") {
            (&rows[0], &rows[1])
        } else {
            (&rows[1], &rows[0])
        };
        assert_eq!(single.name, "Machine/d");
        assert_eq!(single.available, "0");
        assert_eq!(group.name, "3 Machines...");
        assert_eq!((group.available.as_str(), group.ready.as_str()), ("3", "3"));
        assert_eq!(
            group.condition.as_ref().unwrap()["message"],
            "See a, b, ..."
        );
    }
}

/// The endpoint in front of a control plane's members, and its etcd.
#[derive(clap::Args)]
pub struct EndpointArgs {
    #[arg(long)]
    listen: std::net::SocketAddr,
    /// Each subdirectory a member's data dir.
    #[arg(long)]
    members: PathBuf,
    #[arg(long)]
    exit_with_dir: Option<PathBuf>,
    /// The etcd binary to keep running.
    #[arg(long)]
    etcd: Option<PathBuf>,
    #[arg(long, requires = "etcd")]
    etcd_data_dir: Option<PathBuf>,
    #[arg(long, default_value_t = 2379)]
    etcd_client_port: u16,
    #[arg(long, default_value_t = 2380)]
    etcd_peer_port: u16,
}

pub async fn endpoint(args: EndpointArgs) -> anyhow::Result<()> {
    use flotilla_lifecycle::docker::loadbalancer::{Etcd, Options, serve};
    let etcd = match (args.etcd, args.etcd_data_dir) {
        (Some(binary), Some(data_dir)) => Some(Etcd {
            binary,
            data_dir,
            client_port: args.etcd_client_port,
            peer_port: args.etcd_peer_port,
        }),
        _ => None,
    };
    serve(Options {
        listen: args.listen,
        members: args.members,
        exit_with_dir: args.exit_with_dir,
        etcd,
    })
    .await?;
    Ok(())
}
