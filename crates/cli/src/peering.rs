//! Peering's commands, as `liqoctl` gives them: `flotilla peer`,
//! `flotilla unpeer`, `flotilla offload namespace`, `flotilla peering
//! info` and `flotilla peering controller` (the controllers, for a
//! cluster that is not a Flotilla member).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use flotilla_peering::api::{
    ForeignCluster, NamespaceOffloading, ResourceSlice, VirtualNode, tenant_namespace,
    virtual_node_name,
};
use flotilla_peering::peer::{self, PeerOptions, Side};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

/// Where each cluster is.
#[derive(clap::Args, Clone)]
pub struct PairArgs {
    /// The consumer's kubeconfig (the cluster that will use the other's
    /// resources).
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: PathBuf,
    /// The consumer's context, if not the kubeconfig's current one.
    #[arg(long)]
    pub context: Option<String>,
    /// The provider's kubeconfig (the cluster whose resources are used).
    #[arg(long)]
    pub remote_kubeconfig: PathBuf,
    #[arg(long)]
    pub remote_context: Option<String>,
}

#[derive(clap::Args)]
pub struct PeerArgs {
    #[command(flatten)]
    pub pair: PairArgs,
    /// CPU to ask for (default: the provider's share).
    #[arg(long)]
    pub cpu: Option<String>,
    /// Memory to ask for.
    #[arg(long)]
    pub memory: Option<String>,
    /// Pods to ask for.
    #[arg(long)]
    pub pods: Option<String>,
    /// Any other resource to ask for, NAME=QUANTITY (repeatable).
    #[arg(long = "resource", value_parser = parse_resource)]
    pub resources: Vec<(String, String)>,
    /// Make a virtual node from the granted resources.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub create_virtual_node: bool,
    /// How long to wait for the virtual node.
    #[arg(long, default_value = "2m", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
}

fn parse_resource(s: &str) -> Result<(String, String), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?}: expected NAME=QUANTITY"))?;
    if flotilla_peering::quantity::parse(v).is_none() {
        return Err(format!("{v:?} is not a quantity"));
    }
    Ok((k.to_string(), v.to_string()))
}

#[derive(clap::Args)]
pub struct UnpeerArgs {
    #[command(flatten)]
    pub pair: PairArgs,
    #[arg(long, default_value = "2m", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
}

#[derive(clap::Subcommand)]
pub enum OffloadCommand {
    /// Offload a namespace to the peered providers (creates or updates its
    /// NamespaceOffloading `offloading`).
    #[command(visible_alias = "ns")]
    Namespace(OffloadNamespaceArgs),
}

#[derive(clap::Args)]
pub struct OffloadNamespaceArgs {
    pub namespace: String,
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: PathBuf,
    #[arg(long)]
    pub context: Option<String>,
    /// Local, Remote or LocalAndRemote.
    #[arg(long, default_value = "LocalAndRemote", value_parser = ["Local", "Remote", "LocalAndRemote"])]
    pub pod_offloading_strategy: String,
    /// DefaultName, EnforceSameName or SelectedName.
    #[arg(long, default_value = "DefaultName", value_parser = ["DefaultName", "EnforceSameName", "SelectedName"])]
    pub namespace_mapping_strategy: String,
    /// The twin namespace's name, with SelectedName.
    #[arg(long)]
    pub remote_namespace_name: Option<String>,
    /// Selects providers by their virtual nodes' labels: each value is
    /// one term ('region in (eu,us), !staging'), terms are ORed.
    #[arg(long = "selector", short = 'l')]
    pub selectors: Vec<String>,
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
}

#[derive(clap::Subcommand)]
pub enum PeeringCommand {
    /// This cluster's peers: roles, modules, shared and used resources.
    Info(InfoArgs),
    /// Run the peering controllers for a cluster from outside it (a
    /// Flotilla member runs them itself).
    Controller(ControllerArgs),
}

#[derive(clap::Args)]
pub struct InfoArgs {
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: PathBuf,
    #[arg(long)]
    pub context: Option<String>,
    /// `json` for a machine-readable map keyed by cluster ID.
    #[arg(long, short = 'o')]
    pub output: Option<String>,
}

#[derive(clap::Args)]
pub struct ControllerArgs {
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: PathBuf,
    #[arg(long)]
    pub context: Option<String>,
    /// The cluster ID, if the cluster has none yet (default: the
    /// kubeconfig's cluster name).
    #[arg(long)]
    pub cluster_id: Option<String>,
}

/// A side of a peering from its kubeconfig.
async fn side(path: &Path, context: Option<&str>, flag: &str) -> anyhow::Result<Side> {
    let mut file = kube::config::Kubeconfig::read_from(path)
        .with_context(|| format!("cannot read {flag} {}", path.display()))?;
    if let Some(c) = context {
        file.current_context = Some(c.to_string());
    }
    let creds = flotilla_federation::join::credentials_from_kubeconfig(path, context)
        .with_context(|| format!("{flag} {}", path.display()))?;
    let ctx_name = file.current_context.clone().unwrap_or_default();
    let name = file
        .contexts
        .iter()
        .find(|c| c.name == ctx_name)
        .and_then(|c| c.context.as_ref())
        .map(|c| c.cluster.clone())
        .unwrap_or(ctx_name);
    let client = crate::kubeconfig::client_from(file)
        .await
        .with_context(|| format!("{flag} {}", path.display()))?;
    Ok(Side {
        client,
        server: creds.server.clone(),
        ca_pem: creds.ca_pem.clone(),
        credentials: creds,
        name,
    })
}

async fn pair(p: &PairArgs) -> anyhow::Result<(Side, Side)> {
    Ok((
        side(&p.kubeconfig, p.context.as_deref(), "--kubeconfig").await?,
        side(
            &p.remote_kubeconfig,
            p.remote_context.as_deref(),
            "--remote-kubeconfig",
        )
        .await?,
    ))
}

pub async fn peer(args: PeerArgs) -> anyhow::Result<()> {
    let (consumer, provider) = pair(&args.pair).await?;
    let mut resources: BTreeMap<String, Quantity> = BTreeMap::new();
    for (k, v) in [
        ("cpu", &args.cpu),
        ("memory", &args.memory),
        ("pods", &args.pods),
    ] {
        if let Some(v) = v {
            if flotilla_peering::quantity::parse(v).is_none() {
                bail!("--{k} {v:?} is not a quantity (for example 4, 500m, 8Gi)");
            }
            resources.insert(k.into(), Quantity(v.clone()));
        }
    }
    for (k, v) in &args.resources {
        resources.insert(k.clone(), Quantity(v.clone()));
    }
    let options = PeerOptions {
        resources,
        create_virtual_node: args.create_virtual_node,
        timeout: args.timeout,
    };
    let start = std::time::Instant::now();
    let ids = peer::peer(&consumer, &provider, &options, &mut |step| {
        eprintln!("  {step}");
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    eprintln!(
        "peered: {} consumes {} ({:.1}s); offload a namespace with `flotilla offload namespace NS`",
        ids.consumer,
        ids.provider,
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

pub async fn unpeer(args: UnpeerArgs) -> anyhow::Result<()> {
    let (consumer, provider) = pair(&args.pair).await?;
    let ids = peer::unpeer(&consumer, &provider, args.timeout, &mut |step| {
        eprintln!("  {step}");
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    eprintln!(
        "unpeered: {} no longer consumes {}",
        ids.consumer, ids.provider
    );
    Ok(())
}

/// `region in (eu,us), !staging` as node selector requirements.
fn selector_term(s: &str) -> anyhow::Result<serde_json::Value> {
    let parsed = flotilla_core::selector::LabelSelector::parse(s)
        .map_err(|e| anyhow::anyhow!("--selector {s:?}: {e}"))?;
    Ok(json!({"matchExpressions": parsed.requirements_json()}))
}

pub async fn offload(cmd: OffloadCommand) -> anyhow::Result<()> {
    let OffloadCommand::Namespace(args) = cmd;
    if args.namespace_mapping_strategy == "SelectedName" && args.remote_namespace_name.is_none() {
        bail!("--namespace-mapping-strategy SelectedName needs --remote-namespace-name");
    }
    let (consumer, _) = (
        side(&args.kubeconfig, args.context.as_deref(), "--kubeconfig").await?,
        (),
    );
    let terms = args
        .selectors
        .iter()
        .map(|s| selector_term(s))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut spec = json!({
        "namespaceMappingStrategy": args.namespace_mapping_strategy,
        "podOffloadingStrategy": args.pod_offloading_strategy,
        "clusterSelector": {"nodeSelectorTerms": terms},
    });
    if let Some(n) = &args.remote_namespace_name {
        spec["remoteNamespaceName"] = json!(n);
    }
    let body = json!({"apiVersion": "offloading.liqo.io/v1beta1", "kind": "NamespaceOffloading",
        "metadata": {"name": "offloading", "namespace": args.namespace}, "spec": spec});
    let api: Api<NamespaceOffloading> = Api::namespaced(consumer.client.clone(), &args.namespace);
    api.patch(
        "offloading",
        &PatchParams::apply("flotilla-offload").force(),
        &Patch::Apply(&body),
    )
    .await
    .with_context(|| format!("cannot offload namespace {}", args.namespace))?;
    let start = std::time::Instant::now();
    loop {
        let o = api.get("offloading").await?;
        let status = o.status.unwrap_or_default();
        match status.offloading_phase.as_str() {
            "Ready" => {
                eprintln!(
                    "namespace {} offloaded: twin {} in {}",
                    args.namespace,
                    status.remote_namespace_name,
                    status
                        .remote_namespaces_conditions
                        .iter()
                        .filter(|(_, cs)| cs
                            .iter()
                            .any(|c| c.type_ == "Ready" && c.status == "True"))
                        .map(|(k, _)| k.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                return Ok(());
            }
            "NoClusterSelected" => {
                bail!(
                    "namespace {}: no peered provider is selected (peer one with `flotilla peer`, or change --selector)",
                    args.namespace
                )
            }
            "AllFailed" | "SomeFailed" => {
                let why: Vec<String> = status
                    .remote_namespaces_conditions
                    .iter()
                    .flat_map(|(id, cs)| {
                        cs.iter()
                            .filter(|c| c.type_ == "Ready" && c.status == "False")
                            .map(move |c| format!("{id}: {}", c.message))
                    })
                    .collect();
                bail!(
                    "namespace {} not offloaded ({}): {}",
                    args.namespace,
                    status.offloading_phase,
                    why.join("; ")
                );
            }
            _ => {}
        }
        if start.elapsed() > args.timeout {
            bail!(
                "namespace {} still {} after {:?}",
                args.namespace,
                status.offloading_phase,
                args.timeout
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

pub async fn run(cmd: PeeringCommand) -> anyhow::Result<()> {
    match cmd {
        PeeringCommand::Info(args) => info(args).await,
        PeeringCommand::Controller(args) => {
            let s = side(&args.kubeconfig, args.context.as_deref(), "--kubeconfig").await?;
            let id = args.cluster_id.unwrap_or(s.name);
            flotilla_peering::run(s.client, &id).await;
            crate::apiserver::shutdown_signal().await;
            Ok(())
        }
    }
}

async fn info(args: InfoArgs) -> anyhow::Result<()> {
    let s = side(&args.kubeconfig, args.context.as_deref(), "--kubeconfig").await?;
    let fcs = Api::<ForeignCluster>::all(s.client.clone())
        .list(&ListParams::default())
        .await
        .context("cannot list ForeignClusters (is this cluster peered?)")?;
    let mut out = serde_json::Map::new();
    for fc in fcs.items {
        let id = fc.spec.cluster_id.clone();
        let status = fc.status.clone().unwrap_or_default();
        let health = |m: &flotilla_peering::api::Module| {
            if !m.enabled {
                return ("Disabled", Vec::new());
            }
            let alerts: Vec<String> = m
                .conditions
                .iter()
                .filter(|c| c.status != "Established" && c.status != "Ready")
                .map(|c| format!("{}: {} {}", c.type_, c.status, c.message))
                .collect();
            (
                if alerts.is_empty() {
                    "Healthy"
                } else {
                    "Unhealthy"
                },
                alerts,
            )
        };
        let mut slices = Vec::new();
        // What we consume from it (our slice in its tenant namespace here)
        // and what it consumes from us (its slice in its tenant here).
        for (ns, action) in [
            (tenant_namespace(&id), "Consuming"),
            (tenant_namespace(&id), "Providing"),
        ] {
            let api: Api<ResourceSlice> = Api::namespaced(s.client.clone(), &ns);
            for slice in api
                .list(&ListParams::default())
                .await
                .map(|l| l.items)
                .unwrap_or_default()
            {
                let ours = slice.spec.provider_cluster_id.as_deref() == Some(id.as_str());
                if (action == "Consuming") != ours {
                    continue;
                }
                let st = slice.status.clone().unwrap_or_default();
                let accepted = st
                    .conditions
                    .iter()
                    .any(|c| c.type_ == "Resources" && c.status == "Accepted");
                slices.push(json!({"name": slice.name_any(), "action": action,
                    "accepted": accepted, "resources": st.resources,
                    "alerts": st.conditions.iter().filter(|c| c.status == "Denied").map(|c| c.message.clone()).collect::<Vec<_>>()}));
            }
        }
        let mut vnodes = Vec::new();
        let vns: Api<VirtualNode> = Api::namespaced(s.client.clone(), &tenant_namespace(&id));
        for vn in vns
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
        {
            let node_name = virtual_node_name(&vn.spec.cluster_id);
            let node = Api::<Node>::all(s.client.clone())
                .get_opt(&node_name)
                .await
                .ok()
                .flatten();
            let ready = node
                .and_then(|n| n.status?.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            let used = used_on(&s.client, &node_name).await;
            vnodes.push(
                json!({"name": node_name, "status": if ready {"Healthy"} else {"Unhealthy"},
                "secret": vn.spec.kubeconfig_secret_ref.as_ref().map(|r| r.name.clone()),
                "resourceSlice": vn.name_any(), "resources": vn.spec.resource_quota.hard,
                "used": used}),
            );
        }
        let (auth, auth_alerts) = health(&status.modules.authentication);
        let (off, off_alerts) = health(&status.modules.offloading);
        let (net, net_alerts) = health(&status.modules.networking);
        out.insert(
            id.clone(),
            json!({
                "info": {"clusterID": id, "role": status.role},
                "network": {"status": net, "alerts": net_alerts},
                "authentication": {"status": auth, "alerts": auth_alerts,
                    "APIServerAddr": status.api_server_url, "resourceSlices": slices},
                "offloading": {"status": off, "alerts": off_alerts, "virtualNodes": vnodes},
            }),
        );
    }
    if args.output.as_deref() == Some("json") {
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    if out.is_empty() {
        println!("no peers");
        return Ok(());
    }
    for (id, v) in &out {
        println!("Peer cluster {id}");
        println!(
            "  Role:            {}",
            v["info"]["role"].as_str().unwrap_or("")
        );
        println!(
            "  Authentication:  {}",
            v["authentication"]["status"].as_str().unwrap_or("")
        );
        println!(
            "  API server:      {}",
            v["authentication"]["APIServerAddr"].as_str().unwrap_or("")
        );
        for s in v["authentication"]["resourceSlices"]
            .as_array()
            .into_iter()
            .flatten()
        {
            println!(
                "  ResourceSlice {} ({}): {} {}",
                s["name"].as_str().unwrap_or(""),
                s["action"].as_str().unwrap_or(""),
                if s["accepted"].as_bool() == Some(true) {
                    "accepted"
                } else {
                    "not accepted"
                },
                describe(&s["resources"])
            );
        }
        println!(
            "  Offloading:      {}",
            v["offloading"]["status"].as_str().unwrap_or("")
        );
        for n in v["offloading"]["virtualNodes"]
            .as_array()
            .into_iter()
            .flatten()
        {
            println!(
                "  Virtual node {}: {}; shared {}; used {}",
                n["name"].as_str().unwrap_or(""),
                n["status"].as_str().unwrap_or(""),
                describe(&n["resources"]),
                describe(&n["used"])
            );
        }
        for a in ["authentication", "offloading", "network"] {
            for alert in v[a]["alerts"].as_array().into_iter().flatten() {
                println!("  ! {a}: {}", alert.as_str().unwrap_or(""));
            }
        }
    }
    Ok(())
}

fn describe(v: &serde_json::Value) -> String {
    match v.as_object() {
        Some(m) if !m.is_empty() => m
            .iter()
            .map(|(k, v)| {
                format!(
                    "{k} {}",
                    v.as_str().map(str::to_string).unwrap_or(v.to_string())
                )
            })
            .collect::<Vec<_>>()
            .join(", "),
        _ => "nothing".into(),
    }
}

/// The requests of the pods running on `node`: cpu, memory, pods.
async fn used_on(client: &kube::Client, node: &str) -> serde_json::Value {
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::all(client.clone());
    let list = pods
        .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    let (mut cpu, mut memory) = (0.0, 0.0);
    let mut count = 0;
    for p in &list {
        if matches!(
            p.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        ) {
            continue;
        }
        count += 1;
        for c in p.spec.iter().flat_map(|s| s.containers.iter()) {
            let req = c.resources.as_ref().and_then(|r| r.requests.as_ref());
            cpu += req
                .and_then(|r| r.get("cpu"))
                .and_then(|q| flotilla_peering::quantity::parse(&q.0))
                .unwrap_or(0.0);
            memory += req
                .and_then(|r| r.get("memory"))
                .and_then(|q| flotilla_peering::quantity::parse(&q.0))
                .unwrap_or(0.0);
        }
    }
    json!({"cpu": flotilla_peering::quantity::format("cpu", cpu).0,
           "memory": flotilla_peering::quantity::format("memory", memory).0,
           "pods": count.to_string()})
}
