//! `flotilla describe placement KIND/NAME`: where a template went and why:
//! its policy, the division, each cluster's replicas, Work and status, the
//! overrides applied, and why the other clusters were left out. Of a
//! policy (`pp/NAME`, `cpp/NAME`): what each of its resource selectors
//! matched, and why one that matched nothing did not.

use std::fmt::Write;
use std::sync::Arc;

use anyhow::{Context, bail};
use flotilla_federation::api::{Binding, Cluster, Scope, Work, annotations, binding_resource};
use flotilla_federation::names;
use flotilla_federation::scheduler::tenancy::Limits;
use kube::api::{DynamicObject, ListParams};
use kube::{Api, ResourceExt};
use serde_json::Value;

use super::placement::{affinity, division, left_out};
use super::resolve;
use super::table::{Cell, Colour, Table};
use super::{HubArgs, hub_error};

/// KubeFed's federated kinds: each has a template of its target kind.
use flotilla_federation::frontends::kubefed::api::TYPES_GROUP as KUBEFED_TYPES_GROUP;

#[derive(clap::Subcommand)]
pub enum Describe {
    /// Where a template was placed, and why.
    Placement(PlacementArgs),
}

#[derive(clap::Args)]
pub struct PlacementArgs {
    /// The template, as KIND/NAME (deploy/nginx, configmap/settings, ...).
    pub target: String,
    /// Its namespace [default: default]
    #[arg(short, long, default_value = "default")]
    pub namespace: String,
    #[command(flatten)]
    pub hub: HubArgs,
}

pub async fn run(cmd: Describe) -> anyhow::Result<()> {
    let Describe::Placement(args) = cmd;
    let mut out = String::new();
    let hub = args.hub.client().await?;
    let result = placement(&hub, &args.target, &args.namespace, true, &mut out).await;
    super::emit(&out)?;
    result
}

/// Writes where `target` (KIND/NAME, in `namespace` when namespaced) went
/// and why to `out`, read through `hub`; `for_stdout`: its tables fitted
/// and coloured when stdout is a terminal (plain otherwise).
pub async fn placement(
    hub: &kube::Client,
    target: &str,
    namespace: &str,
    for_stdout: bool,
    out: &mut String,
) -> anyhow::Result<()> {
    let Some((kind, name)) = target.split_once('/') else {
        bail!("{target:?} is not KIND/NAME (example: flotilla describe placement deploy/nginx)");
    };
    let hub = hub.clone();
    let mut r = resolve::resource(&hub, kind).await?;
    if r.ar.group == KUBEFED_TYPES_GROUP
        && let Some(target) = r.ar.kind.strip_prefix("Federated")
    {
        // A KubeFed object is placed as its template, of the same name.
        writeln!(out, "{}:  its template, {target} {name}", r.ar.kind)?;
        r = resolve::resource(&hub, target).await?;
    }
    let namespace = r.namespaced.then_some(namespace);
    let templates: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(hub.clone(), ns, &r.ar),
        None => Api::all_with(hub.clone(), &r.ar),
    };
    if r.ar.group == flotilla_federation::api::POLICY_GROUP
        && matches!(
            r.ar.plural.as_str(),
            "propagationpolicies" | "clusterpropagationpolicies"
        )
    {
        return super::policy::describe(&hub, &r, name, namespace, out).await;
    }
    let Some(template) = templates.get_opt(name).await.map_err(hub_error)? else {
        bail!(
            "{} \"{name}\" not found{}",
            r.ar.plural,
            namespace.map_or(String::new(), |ns| format!(" in namespace {ns}"))
        );
    };
    let id = match namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    };
    writeln!(out, "Template:     {} {} {id}", r.ar.api_version, r.ar.kind)?;
    let a = template.annotations();
    let policy = match (a.get(annotations::PP_NAME), a.get(annotations::CPP_NAME)) {
        (Some(pp), _) => format!(
            "PropagationPolicy {}/{pp}",
            a.get(annotations::PP_NAMESPACE)
                .cloned()
                .unwrap_or_default()
        ),
        (None, Some(cpp)) => format!("ClusterPropagationPolicy {cpp}"),
        (None, None) => {
            writeln!(
                out,
                "Policy:       none matches it: it stays on the hub only (`flotilla plan -f` shows what a policy would do)"
            )?;
            return Ok(());
        }
    };
    writeln!(out, "Policy:       {policy}")?;

    let scope = if namespace.is_some() {
        Scope::Namespaced
    } else {
        Scope::Cluster
    };
    let bar = binding_resource(scope);
    let bindings: Api<Binding> = match namespace {
        Some(ns) => Api::namespaced_with(hub.clone(), ns, &bar),
        None => Api::all_with(hub.clone(), &bar),
    };
    let binding_name = names::binding_name(&r.ar.kind, name);
    let Some(binding) = bindings.get_opt(&binding_name).await.map_err(hub_error)? else {
        writeln!(
            out,
            "Binding:      {binding_name} not created yet: the detector has not seen it"
        )?;
        return Ok(());
    };
    let spec = &binding.spec;
    let placement = spec.placement.clone().unwrap_or_default();
    let status = binding.status.clone().unwrap_or_default();
    writeln!(out, "Binding:      {} {binding_name}", bar.kind)?;
    writeln!(out, "Division:     {}", division(&placement))?;
    let term = if placement.cluster_affinities.is_empty() {
        format!(
            "clusterAffinity: {}",
            affinity(&placement.cluster_affinity.clone().unwrap_or_default())
        )
    } else {
        let names: Vec<&str> = placement
            .cluster_affinities
            .iter()
            .map(|t| t.affinity_name.as_str())
            .collect();
        format!(
            "clusterAffinities {} (in use: {})",
            names.join(", "),
            status
                .scheduler_observing_affinity_name
                .as_deref()
                .unwrap_or(names.first().copied().unwrap_or("-"))
        )
    };
    writeln!(out, "Affinity:     {term}")?;
    if let Some(n) = spec.replicas {
        writeln!(out, "Replicas:     {n}")?;
    }
    for c in &status.conditions {
        writeln!(
            out,
            "{:<13} {} {} {}",
            format!("{}:", c.type_),
            c.status,
            c.reason,
            c.message
        )?;
    }

    let works: Vec<Work> = {
        let mut all = Vec::new();
        for t in &spec.clusters {
            let api: Api<Work> =
                Api::namespaced(hub.clone(), &Cluster::execution_namespace(&t.name));
            let wn = names::work_name(&r.ar.kind, namespace.unwrap_or(""), name);
            if let Some(w) = api.get_opt(&wn).await.map_err(hub_error)? {
                all.push(w);
            }
        }
        all
    };
    let mut table = Table::new([
        "CLUSTER",
        "REPLICAS",
        "WORK",
        "APPLIED",
        "HEALTH",
        "STATUS",
        "OVERRIDES",
    ]);
    for t in &spec.clusters {
        let work = works
            .iter()
            .find(|w| w.namespace().as_deref() == Some(&Cluster::execution_namespace(&t.name)));
        let agg = status
            .aggregated_status
            .iter()
            .find(|s| s.cluster_name == t.name);
        let applied = match agg {
            Some(s) if s.applied => Cell::coloured("True", Colour::Green),
            Some(s) => Cell::coloured(
                format!("False: {}", s.applied_message.clone().unwrap_or_default()),
                Colour::Red,
            ),
            None => Cell::from("-"),
        };
        let health = match agg.and_then(|s| s.health.as_deref()) {
            Some("Healthy") => Cell::coloured("Healthy", Colour::Green),
            Some("Unhealthy") => Cell::coloured("Unhealthy", Colour::Red),
            Some(h) => Cell::from(h),
            None => Cell::from("-"),
        };
        let overrides = work.map_or("-".to_string(), applied_overrides);
        table.row(vec![
            t.name.clone().into(),
            t.replicas.map_or("-".into(), |n| n.to_string()).into(),
            work.map_or("-".to_string(), |w| w.name_any()).into(),
            applied,
            health,
            agg.and_then(|s| s.status.as_ref())
                .map_or("-".to_string(), status_summary)
                .into(),
            overrides.into(),
        ]);
    }
    writeln!(out)?;
    if table.is_empty() {
        writeln!(out, "Placed in no cluster.")?;
    } else {
        out.push_str(&if for_stdout {
            table.for_stdout()
        } else {
            table.render(None, false)
        });
    }

    let clusters: Vec<Arc<Cluster>> = Api::<Cluster>::all(hub.clone())
        .list(&ListParams::default())
        .await
        .context("cannot list the clusters")?
        .items
        .into_iter()
        .map(Arc::new)
        .collect();
    // The tenant's cluster sets: which are bound, and what they allow.
    let restriction = match namespace {
        Some(ns) => super::placement::restriction(&hub, ns, &clusters).await?,
        None => None,
    };
    match (&restriction, namespace) {
        (Some(r), _) => {
            let allowed: Vec<&str> = r.clusters.iter().map(String::as_str).collect();
            writeln!(
                out,
                "\nCluster sets: {} (bound to namespace {}; clusters: {})",
                if r.bound.is_empty() {
                    "none valid".to_string()
                } else {
                    r.bound.join(", ")
                },
                r.namespace,
                if allowed.is_empty() {
                    "none".to_string()
                } else {
                    allowed.join(", ")
                }
            )?;
        }
        (None, Some(ns)) => writeln!(
            out,
            "\nCluster sets: none bound to namespace {ns} (every cluster may be used)"
        )?,
        (None, None) => {}
    }
    let limits = Limits {
        restriction,
        ..Default::default()
    };
    let left = left_out(
        spec,
        status.scheduler_observing_affinity_name.as_deref(),
        &clusters,
        &limits,
    );
    if !left.is_empty() {
        writeln!(out, "\nNot placed in:")?;
        for (cluster, why) in left {
            writeln!(out, "  {cluster:<12} {why}")?;
        }
    }
    if !spec.graceful_eviction_tasks.is_empty() {
        writeln!(out, "\nBeing left (graceful eviction):")?;
        for t in &spec.graceful_eviction_tasks {
            writeln!(
                out,
                "  {:<12} {} ({}), purgeMode {}{}",
                t.from_cluster,
                t.reason,
                t.message.as_deref().unwrap_or_default(),
                t.purge_mode.as_deref().unwrap_or("Gracefully"),
                t.creation_timestamp
                    .as_deref()
                    .map_or(String::new(), |c| format!(", since {c}"))
            )?;
        }
    }
    Ok(())
}

/// The override policies a Work's annotations say were applied.
fn applied_overrides(work: &Work) -> String {
    let a = work.annotations();
    let mut names = Vec::new();
    for (key, kind) in [
        (
            annotations::APPLIED_CLUSTER_OVERRIDES,
            "ClusterOverridePolicy",
        ),
        (annotations::APPLIED_OVERRIDES, "OverridePolicy"),
    ] {
        let entries: Vec<Value> = a
            .get(key)
            .and_then(|v| serde_json::from_str(v).ok())
            .unwrap_or_default();
        for e in entries {
            if let Some(n) = e["policyName"].as_str() {
                names.push(format!("{kind}/{n}"));
            }
        }
    }
    if names.is_empty() {
        "-".into()
    } else {
        names.join(", ")
    }
}

/// A member's status in a few words: `2/3 ready` for workloads.
fn status_summary(s: &Value) -> String {
    let n = |k: &str| s.get(k).and_then(Value::as_i64);
    match (n("readyReplicas"), n("replicas")) {
        (ready, Some(total)) => format!("{}/{total} ready", ready.unwrap_or(0)),
        _ => match (n("succeeded"), n("active")) {
            (Some(done), _) => format!("{done} succeeded"),
            (_, Some(active)) => format!("{active} active"),
            _ => "-".into(),
        },
    }
}
