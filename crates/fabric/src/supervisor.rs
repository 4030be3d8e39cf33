//! Keeps a gateway process running on each of a member's gateway nodes
//! (labelled `submariner.io/gateway=true`), as Submariner's DaemonSet
//! does: one `flotilla gateway` per node, restarted when it exits,
//! stopped when the node loses the label or the member stops. Each
//! child's stdin is a pipe from the member, so none outlives it.
//!
//! A member with no labelled node gets its first two nodes labelled, so
//! it has an active gateway and a standby.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use ipnet::Ipv4Net;
use k8s_openapi::api::core::v1::Node;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tokio::process::{Child, Command};
use tracing::{info, warn};

use crate::api::GATEWAY_LABEL;

/// A gateway node the supervisor may run a gateway on.
#[derive(Clone, Debug)]
pub struct GatewayNode {
    pub name: String,
    pub netns: String,
    pub ip: std::net::Ipv4Addr,
}

pub struct SupervisorConfig {
    pub member: Client,
    /// This binary.
    pub binary: PathBuf,
    /// The member's kubeconfig, which gateways reach it with.
    pub kubeconfig: PathBuf,
    /// Logs and pid files: `<dir>/<node>.log`, `<dir>/<node>.pid`.
    pub dir: PathBuf,
    pub router_netns: String,
    pub nodes: Vec<GatewayNode>,
    pub underlay: String,
    pub cluster_cidrs: Vec<Ipv4Net>,
    pub service_cidrs: Vec<Ipv4Net>,
    /// Gateways to label when none is.
    pub gateways: usize,
}

struct Running {
    child: Child,
    started: Instant,
}

/// Runs until dropped (the task is aborted; children die with their
/// stdin).
pub async fn run(config: SupervisorConfig) {
    let _ = std::fs::create_dir_all(&config.dir);
    let mut running: HashMap<String, Running> = HashMap::new();
    let mut labelled_once = false;
    loop {
        let wanted = match gateway_nodes(&config, &mut labelled_once).await {
            Ok(w) => w,
            Err(error) => {
                warn!(%error, "cannot list the gateway nodes");
                tokio::time::sleep(Duration::from_secs(2)).await;
                continue;
            }
        };
        running.retain(|name, r| {
            let keep = wanted.iter().any(|n| &n.name == name);
            if !keep {
                info!(node = %name, "no longer a gateway node; stopping its gateway");
                drop(r.child.stdin.take());
            }
            keep
        });
        for node in &wanted {
            if let Some(r) = running.get_mut(&node.name) {
                match r.child.try_wait() {
                    Ok(None) => continue,
                    Ok(Some(status)) => {
                        warn!(node = %node.name, %status, "the gateway exited; restarting it");
                        // A gateway that dies at once waits before the next try.
                        if r.started.elapsed() < Duration::from_secs(5) {
                            tokio::time::sleep(Duration::from_secs(2)).await;
                        }
                    }
                    Err(_) => continue,
                }
            }
            match spawn(&config, node) {
                Ok(child) => {
                    if let Some(pid) = child.id() {
                        let _ = std::fs::write(
                            config.dir.join(format!("{}.pid", node.name)),
                            pid.to_string(),
                        );
                    }
                    running.insert(
                        node.name.clone(),
                        Running {
                            child,
                            started: Instant::now(),
                        },
                    );
                }
                Err(error) => warn!(%error, node = %node.name, "cannot start a gateway"),
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn gateway_nodes(
    config: &SupervisorConfig,
    labelled_once: &mut bool,
) -> Result<Vec<GatewayNode>, kube::Error> {
    let api: Api<Node> = Api::all(config.member.clone());
    let selector = format!("{GATEWAY_LABEL}=true");
    let mut labelled: Vec<String> = api
        .list(&ListParams::default().labels(&selector))
        .await?
        .items
        .iter()
        .map(|n| n.name_any())
        .collect();
    if labelled.is_empty() && !*labelled_once {
        *labelled_once = true;
        for node in config.nodes.iter().take(config.gateways) {
            api.patch(
                &node.name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {GATEWAY_LABEL: "true"}}})),
            )
            .await?;
            labelled.push(node.name.clone());
        }
    }
    Ok(config
        .nodes
        .iter()
        .filter(|n| labelled.contains(&n.name))
        .cloned()
        .collect())
}

fn spawn(config: &SupervisorConfig, node: &GatewayNode) -> std::io::Result<Child> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(config.dir.join(format!("{}.log", node.name)))?;
    let join = |nets: &[Ipv4Net]| {
        nets.iter()
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    let mut command = Command::new(&config.binary);
    command
        .arg("gateway")
        .arg("--kubeconfig")
        .arg(&config.kubeconfig)
        .args(["--node", &node.name])
        .args(["--node-netns", &node.netns])
        .args(["--node-ip", &node.ip.to_string()])
        .args(["--router-netns", &config.router_netns])
        .args(["--underlay", &config.underlay])
        .args(["--cluster-cidr", &join(&config.cluster_cidrs)])
        .args(["--service-cidr", &join(&config.service_cidrs)])
        .args(["--metrics-listen", "127.0.0.1:0"])
        .stdin(Stdio::piped())
        .stdout(log.try_clone()?)
        .stderr(log)
        .kill_on_drop(true);
    info!(node = %node.name, "starting a gateway");
    command.spawn()
}
