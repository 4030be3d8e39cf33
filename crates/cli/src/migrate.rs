//! `flotilla migrate KIND/NAME --to CLUSTER`: moves a placed workload and
//! the data of its volumes from the one cluster it runs in to another,
//! in one command: a backup in the source (Velero's API, both members
//! sharing a storage location), a restore of its claims and data in the
//! target, the workload's own PropagationPolicy pointed at the target,
//! and a wait until it is healthy there. Each step is printed as it
//! goes; a failure before the switch undoes the restore and leaves the
//! workload where it was.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use flotilla_backup::migration::{self, Cluster as Member, Volumes};
use flotilla_federation::api::{
    Binding, Cluster, Policy, Scope, annotations, binding_resource, policy_resource,
};
use flotilla_federation::members::Members;
use flotilla_federation::names;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use crate::inspect::{HubArgs, hub_error, member_client, resolve};

#[derive(clap::Args)]
pub struct MigrateArgs {
    /// The workload, as kubectl names it: deployment/web, sts/db
    pub workload: String,
    /// The cluster to move it to
    #[arg(long)]
    pub to: String,
    #[arg(short, long, default_value = "default")]
    pub namespace: String,
    /// When the cluster it runs in cannot be reached, restore from the
    /// newest completed backup of its namespace instead (what was
    /// written after that backup is not carried)
    #[arg(long)]
    pub from_last_backup: bool,
    /// How long each step may take
    #[arg(long, default_value = "5m", value_parser = humantime_duration)]
    pub timeout: Duration,
    #[command(flatten)]
    pub hub: HubArgs,
}

fn humantime_duration(s: &str) -> Result<Duration, String> {
    flotilla_core::duration::parse_go(s)
        .ok_or_else(|| format!("{s:?} is not a duration (write 90s, 5m, 1h)"))
}

/// The workload on the hub, and where it runs.
struct Placed {
    kind: String,
    name: String,
    namespace: String,
    policy: String,
    source: String,
    volumes: Volumes,
}

pub async fn run(args: MigrateArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let hub = args.hub.client().await?;
    let placed = find(&hub, &args).await?;
    let id = format!("{} {}/{}", placed.kind, placed.namespace, placed.name);
    let clusters: Api<Cluster> = Api::all(hub.clone());
    let target_cluster = clusters
        .get_opt(&args.to)
        .await
        .map_err(hub_error)?
        .with_context(|| {
            format!(
                "no cluster {:?}: `flotilla clusters` lists the fleet",
                args.to
            )
        })?;
    if !target_cluster.is_ready() {
        bail!(
            "cluster {} is not Ready: migrate to a Ready cluster",
            args.to
        );
    }
    let source_cluster = clusters
        .get_opt(&placed.source)
        .await
        .map_err(hub_error)?
        .with_context(|| {
            format!(
                "cluster {} that {id} runs in is not in the fleet",
                placed.source
            )
        })?;
    let members = Members::new(hub.clone());
    let target_client = member_client(Some(&args.hub), &members, &target_cluster)
        .await
        .map_err(|e| anyhow::anyhow!("cannot reach {}: {e}", args.to))?;
    let target = Member {
        name: &args.to,
        client: &target_client,
    };
    let source_client = member_client(Some(&args.hub), &members, &source_cluster).await;
    let restore = migration::move_name("migrate", &placed.name);
    let step = |n: u8, text: String| println!("[{n}/5] {text}");

    // 1. The data, from the source while it answers.
    let source_answers = match &source_client {
        Ok(c) => source_cluster.is_ready() && migration::answers(c).await,
        Err(_) => false,
    };
    let backup = if let (true, Ok(client)) = (source_answers, &source_client) {
        let source = Member {
            name: &placed.source,
            client,
        };
        migration::check_shared_storage(&source, &target).await?;
        let name = restore.clone();
        step(
            1,
            format!(
                "backing up the pods, claims and volume data of {id} in {} (backup {name})",
                placed.source
            ),
        );
        let done = migration::back_up(&source, &placed.volumes, &name, args.timeout).await?;
        println!(
            "      {} items, done in {}",
            done["status"]["progress"]["itemsBackedUp"],
            since(started)
        );
        name
    } else if args.from_last_backup {
        migration::wait_synced_now(&target, args.timeout).await?;
        let Some(last) = migration::latest_backup(&target, &placed.namespace).await? else {
            bail!(
                "{} cannot be reached and {} knows no completed backup of namespace {}: nothing to restore from",
                placed.source,
                args.to,
                placed.namespace
            );
        };
        let name = last["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        step(
            1,
            format!(
                "{} cannot be reached: using backup {name} of {} (what was written since is not carried)",
                placed.source,
                last["status"]["startTimestamp"]
                    .as_str()
                    .unwrap_or("an unknown time")
            ),
        );
        name
    } else {
        bail!(
            "cluster {} that {id} runs in cannot be reached, so its data cannot be backed up now; pass --from-last-backup to restore from the newest completed backup of namespace {} instead",
            placed.source,
            placed.namespace
        );
    };

    // 2. The backup, seen by the target through the shared storage.
    step(2, format!("waiting for {} to see backup {backup}", args.to));
    migration::wait_synced(&target, &backup, args.timeout).await?;

    // 3. The claims in the target, holding their pods until the data is in.
    step(
        3,
        format!("restoring the claims in {} (restore {restore})", args.to),
    );
    if let Err(e) =
        migration::restore_claims(&target, &placed.volumes, &backup, &restore, args.timeout).await
    {
        migration::discard_restore(&target, &placed.volumes, &restore).await;
        return Err(e.into());
    }

    // 4. The switch: the workload's policy places it in the target.
    step(
        4,
        format!(
            "moving {id}: PropagationPolicy {} now places it in {}",
            placed.policy, args.to
        ),
    );
    if let Err(e) = repoint(&hub, &placed, &args.to).await {
        migration::discard_restore(&target, &placed.volumes, &restore).await;
        return Err(e);
    }

    // 5. Its data written back, and the workload healthy there.
    step(
        5,
        format!(
            "waiting for the data and for {id} to be healthy in {}",
            args.to
        ),
    );
    let restored = migration::wait_restored(&target, &restore, args.timeout).await?;
    let bytes: u64 = volume_bytes(&target_client, &restore).await;
    println!(
        "      {} claims restored, {bytes} bytes of data",
        restored["status"]["progress"]["itemsRestored"]
    );
    wait_healthy(&hub, &placed, &args.to, args.timeout).await?;
    println!(
        "migrated {id} from {} to {} in {}",
        placed.source,
        args.to,
        since(started)
    );
    Ok(())
}

fn since(started: Instant) -> String {
    format!("{:.1}s", started.elapsed().as_secs_f64())
}

/// The workload, its policy (which must be its own) and the one cluster
/// it runs in.
async fn find(hub: &Client, args: &MigrateArgs) -> anyhow::Result<Placed> {
    let Some((kind, name)) = args.workload.split_once('/') else {
        bail!(
            "{:?}: name the workload as KIND/NAME (deployment/web, statefulset/db)",
            args.workload
        );
    };
    let resolved = resolve::resource(hub, kind).await?;
    if !resolved.namespaced {
        bail!(
            "{} is cluster-scoped: migrate moves namespaced workloads",
            resolved.ar.kind
        );
    }
    let ns = &args.namespace;
    let templates: Api<DynamicObject> = Api::namespaced_with(hub.clone(), ns, &resolved.ar);
    let template = templates
        .get_opt(name)
        .await
        .map_err(hub_error)?
        .with_context(|| {
            format!(
                "{} {name:?} not found in namespace {ns}",
                resolved.ar.plural
            )
        })?;
    let object = serde_json::to_value(&template)?;
    let Some(volumes) = Volumes::of_workload(ns, &object) else {
        bail!(
            "{} {name} has no pod selector: migrate moves workloads whose pods use volumes (Deployment, StatefulSet, ReplicaSet, DaemonSet, Pod)",
            resolved.ar.kind
        );
    };
    let a = template.annotations();
    let Some(policy) = a.get(annotations::PP_NAME).cloned() else {
        bail!(
            "{} {ns}/{name} is not placed by a PropagationPolicy of its namespace (`flotilla describe placement {}/{name} -n {ns}` says what places it)",
            resolved.ar.kind,
            kind
        );
    };
    // Its own policy: pointing a shared one elsewhere would move others.
    let policies: Api<Policy> =
        Api::namespaced_with(hub.clone(), ns, &policy_resource(Scope::Namespaced));
    let p = policies.get(&policy).await.map_err(hub_error)?;
    let only_this = !p.spec.resource_selectors.is_empty()
        && p.spec
            .resource_selectors
            .iter()
            .all(|s| s.kind == resolved.ar.kind && s.name.as_deref() == Some(name));
    if !only_this {
        bail!(
            "PropagationPolicy {ns}/{policy} also places other resources: give {} {name} a policy of its own (a resourceSelector naming it) before migrating it",
            resolved.ar.kind
        );
    }
    let bindings: Api<Binding> =
        Api::namespaced_with(hub.clone(), ns, &binding_resource(Scope::Namespaced));
    let binding_name = names::binding_name(&resolved.ar.kind, name);
    let binding = bindings
        .get_opt(&binding_name)
        .await
        .map_err(hub_error)?
        .with_context(|| {
            format!(
                "{} {ns}/{name} is not placed yet (no binding {binding_name})",
                resolved.ar.kind
            )
        })?;
    let source = match binding.spec.clusters.as_slice() {
        [one] => one.name.clone(),
        [] => bail!(
            "{} {ns}/{name} is in no cluster yet: there is nothing to migrate",
            resolved.ar.kind
        ),
        many => bail!(
            "{} {ns}/{name} runs in {} clusters ({}): migrate moves a workload from the one cluster it runs in",
            resolved.ar.kind,
            many.len(),
            many.iter()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    if source == args.to {
        bail!("{} {ns}/{name} already runs in {source}", resolved.ar.kind);
    }
    Ok(Placed {
        kind: resolved.ar.kind.clone(),
        name: name.to_string(),
        namespace: ns.clone(),
        policy,
        source,
        volumes,
    })
}

/// Points the workload's own policy at `target` alone.
async fn repoint(hub: &Client, placed: &Placed, target: &str) -> anyhow::Result<()> {
    let policies: Api<DynamicObject> = Api::namespaced_with(
        hub.clone(),
        &placed.namespace,
        &policy_resource(Scope::Namespaced),
    );
    let patch = json!({"spec": {"placement": {
        "clusterAffinity": {"clusterNames": [target]},
        "clusterAffinities": null,
    }}});
    policies
        .patch(
            &placed.policy,
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .map_err(hub_error)?;
    Ok(())
}

/// Waits until the binding places the workload in `target` alone and
/// reports it applied and healthy there.
async fn wait_healthy(
    hub: &Client,
    placed: &Placed,
    target: &str,
    limit: Duration,
) -> anyhow::Result<()> {
    let bindings: Api<Binding> = Api::namespaced_with(
        hub.clone(),
        &placed.namespace,
        &binding_resource(Scope::Namespaced),
    );
    let name = names::binding_name(&placed.kind, &placed.name);
    let deadline = tokio::time::Instant::now() + limit;
    let mut health = String::from("not applied");
    while tokio::time::Instant::now() < deadline {
        if let Some(b) = bindings.get_opt(&name).await.map_err(hub_error)? {
            let only_target = b.spec.clusters.len() == 1 && b.spec.clusters[0].name == target;
            let item = b.status.as_ref().and_then(|s| {
                s.aggregated_status
                    .iter()
                    .find(|i| i.cluster_name == target)
            });
            if let Some(i) = item {
                health = i.health.clone().unwrap_or_else(|| "Unknown".into());
                if only_target && i.applied && health == "Healthy" {
                    return Ok(());
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    bail!(
        "{} {}/{} is {health} in {target} after {}s (its data is there; `flotilla describe placement {}/{} -n {}` says more)",
        placed.kind,
        placed.namespace,
        placed.name,
        limit.as_secs(),
        placed.kind.to_lowercase(),
        placed.name,
        placed.namespace
    )
}

/// The bytes a restore wrote, from its PodVolumeRestores.
async fn volume_bytes(client: &Client, restore: &str) -> u64 {
    let api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        flotilla_backup::api::NAMESPACE,
        &flotilla_backup::api::pod_volume_restores(),
    );
    let params =
        kube::api::ListParams::default().labels(&format!("velero.io/restore-name={restore}"));
    api.list(&params)
        .await
        .map(|l| {
            l.items
                .iter()
                .map(|r| serde_json::to_value(r).unwrap_or(Value::Null))
                .filter_map(|r| r["status"]["progress"]["bytesDone"].as_u64())
                .sum()
        })
        .unwrap_or(0)
}
