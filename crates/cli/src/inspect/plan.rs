//! `flotilla plan -f MANIFESTS`: a dry run of matching and scheduling
//! against the fleet as it is: which policy each object would get, where
//! it would go with how many replicas, which overrides would apply, and
//! why the other clusters would be left out. Policies in the manifests
//! take part as if applied. Nothing is written.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::io::Read;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use flotilla_federation::api::{
    Binding, BindingSpec, Cluster, ObjectReference, OverridePolicy, Policy, Scope,
    binding_resource, override_resource, policy_resource,
};
use flotilla_federation::detector::matching::{Template, choose, selectors_match};
use flotilla_federation::detector::skipped_namespace;
use flotilla_federation::kinds::Kinds;
use flotilla_federation::scheduler::core::schedule;
use flotilla_federation::scheduler::tenancy::Limits;
use flotilla_federation::{interpreter, names, overrides};
use kube::api::{DynamicObject, ListParams};
use kube::core::ApiResource;
use kube::core::object::HasSpec;
use kube::{Api, ResourceExt};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::placement::{division, left_out};
use super::{HubArgs, hub_error};

#[derive(clap::Args)]
pub struct PlanArgs {
    /// Manifests (YAML or JSON, several documents each); `-` reads stdin.
    #[arg(short = 'f', long = "filename", required = true)]
    pub files: Vec<PathBuf>,
    /// The namespace of objects that name none.
    #[arg(short, long, default_value = "default")]
    pub namespace: String,
    #[command(flatten)]
    pub hub: HubArgs,
}

/// Every document of the manifests, Lists unpacked.
fn documents(files: &[PathBuf]) -> anyhow::Result<Vec<Value>> {
    let mut docs = Vec::new();
    for f in files {
        let text = if f.as_os_str() == "-" {
            let mut s = String::new();
            std::io::stdin().read_to_string(&mut s)?;
            s
        } else {
            std::fs::read_to_string(f).with_context(|| format!("cannot read {}", f.display()))?
        };
        docs.extend(parse_documents(&text, &f.display().to_string())?);
    }
    Ok(docs)
}

/// The hub's objects that `policies` select, each once.
async fn selected_on_hub(
    hub: &kube::Client,
    kinds: &Kinds,
    policies: &[Policy],
) -> anyhow::Result<Vec<Value>> {
    let mut found: BTreeMap<(String, String, String, String), Value> = BTreeMap::new();
    for policy in policies {
        for selector in &policy.spec.resource_selectors {
            let Ok((resource, namespaced)) =
                kinds.resolve(&selector.api_version, &selector.kind).await
            else {
                continue;
            };
            // A PropagationPolicy selects in its own namespace only.
            let namespace = policy.namespace().or_else(|| selector.namespace.clone());
            let api: Api<DynamicObject> = match (&namespace, namespaced) {
                (Some(ns), true) => Api::namespaced_with(hub.clone(), ns, &resource),
                _ => Api::all_with(hub.clone(), &resource),
            };
            for o in api
                .list(&ListParams::default())
                .await
                .map_err(hub_error)?
                .items
            {
                let labels = o.labels().clone();
                let name = o.name_any();
                let ns = o.namespace();
                let t = Template {
                    api_version: &resource.api_version,
                    kind: &resource.kind,
                    namespace: ns.as_deref(),
                    name: &name,
                    labels: &labels,
                };
                if selectors_match(std::slice::from_ref(selector), &t).is_none() {
                    continue;
                }
                let key = (
                    resource.api_version.clone(),
                    resource.kind.clone(),
                    ns.clone().unwrap_or_default(),
                    name.clone(),
                );
                let mut value = serde_json::to_value(&o)?;
                value["apiVersion"] = resource.api_version.clone().into();
                value["kind"] = resource.kind.clone().into();
                found.insert(key, value);
            }
        }
    }
    Ok(found.into_values().collect())
}

/// The objects of a policy kind as they would be: the hub's, with those
/// of the manifests in place of any of the same namespace and name.
async fn policy_kind<T>(
    hub: &kube::Client,
    resource: ApiResource,
    in_file: Vec<Value>,
) -> anyhow::Result<Vec<T>>
where
    T: kube::Resource<DynamicType = ApiResource> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let mut all = Api::<T>::all_with(hub.clone(), &resource)
        .list(&ListParams::default())
        .await
        .map_err(hub_error)?
        .items;
    for f in in_file {
        let f: T = serde_json::from_value(f)
            .with_context(|| format!("a {} in the manifests is malformed", resource.kind))?;
        all.retain(|h| !(h.name_any() == f.name_any() && h.namespace() == f.namespace()));
        all.push(f);
    }
    Ok(all)
}

pub async fn run(args: PlanArgs) -> anyhow::Result<()> {
    let mut out = String::new();
    let docs = documents(&args.files)?;
    let hub = args.hub.client().await?;
    let result = render(&hub, docs, &args.namespace, &mut out).await;
    super::emit(&out)?;
    result
}

/// The documents of manifests in YAML or JSON (several per text, Lists
/// unpacked); `source` names them in errors.
pub fn parse_documents(text: &str, source: &str) -> anyhow::Result<Vec<Value>> {
    let mut docs = Vec::new();
    for d in serde_yaml::Deserializer::from_str(text) {
        let v =
            Value::deserialize(d).with_context(|| format!("{source} is not valid YAML or JSON"))?;
        match v {
            Value::Null => {}
            v if v["kind"].as_str().is_some_and(|k| k.ends_with("List")) => {
                docs.extend(v["items"].as_array().cloned().unwrap_or_default());
            }
            v => docs.push(v),
        }
    }
    Ok(docs)
}

/// Writes the plan for `docs` (objects of `namespace` unless they name
/// one), read through `hub`, to `out`.
pub async fn render(
    hub: &kube::Client,
    docs: Vec<Value>,
    namespace: &str,
    out: &mut String,
) -> anyhow::Result<()> {
    let hub = hub.clone();
    let clusters: Vec<Arc<Cluster>> = Api::<Cluster>::all(hub.clone())
        .list(&ListParams::default())
        .await
        .map_err(hub_error)?
        .items
        .into_iter()
        .map(Arc::new)
        .collect();

    let mut from_file: BTreeMap<&str, Vec<Value>> = BTreeMap::new();
    let mut templates = Vec::new();
    for d in &docs {
        let kind = d["kind"].as_str().unwrap_or_default();
        let group = d["apiVersion"].as_str().unwrap_or_default();
        match (group.starts_with("policy.karmada.io/"), kind) {
            (
                true,
                "PropagationPolicy"
                | "ClusterPropagationPolicy"
                | "OverridePolicy"
                | "ClusterOverridePolicy",
            ) => {
                let mut d = d.clone();
                if !kind.starts_with("Cluster") && d["metadata"]["namespace"].is_null() {
                    d["metadata"]["namespace"] = namespace.into();
                }
                from_file.entry(kind).or_default().push(d);
            }
            _ => templates.push(d.clone()),
        }
    }
    let in_file = |kind: &str| from_file.get(kind).cloned().unwrap_or_default();
    let policies: [Vec<Policy>; 2] = [
        policy_kind(
            &hub,
            policy_resource(Scope::Namespaced),
            in_file("PropagationPolicy"),
        )
        .await?,
        policy_kind(
            &hub,
            policy_resource(Scope::Cluster),
            in_file("ClusterPropagationPolicy"),
        )
        .await?,
    ];
    let override_policies: [Vec<OverridePolicy>; 2] = [
        policy_kind(
            &hub,
            override_resource(Scope::Namespaced),
            in_file("OverridePolicy"),
        )
        .await?,
        policy_kind(
            &hub,
            override_resource(Scope::Cluster),
            in_file("ClusterOverridePolicy"),
        )
        .await?,
    ];
    let file_policies: Vec<(String, Option<String>)> =
        ["PropagationPolicy", "ClusterPropagationPolicy"]
            .into_iter()
            .flat_map(in_file)
            .map(|d| {
                (
                    d["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    d["metadata"]["namespace"].as_str().map(str::to_string),
                )
            })
            .collect();

    let kinds = Kinds::new(hub.clone());
    if templates.is_empty() {
        // Only policies (an edited one, say): plan the hub's templates
        // they would select.
        let file_policies: Vec<Policy> = ["PropagationPolicy", "ClusterPropagationPolicy"]
            .into_iter()
            .flat_map(in_file)
            .filter_map(|d| serde_json::from_value(d).ok())
            .collect();
        templates = selected_on_hub(&hub, &kinds, &file_policies).await?;
        if templates.is_empty() {
            writeln!(
                out,
                "No objects to place: the manifests hold only policies, and they select nothing on the hub."
            )?;
        } else {
            writeln!(
                out,
                "The hub's objects these policies select ({}), planned with them:\n",
                templates.len()
            )?;
        }
    }
    for t in &templates {
        let api_version = t["apiVersion"].as_str().unwrap_or_default();
        let kind = t["kind"].as_str().unwrap_or_default();
        let name = t["metadata"]["name"].as_str().unwrap_or_default();
        let Ok((_, namespaced)) = kinds.resolve(api_version, kind).await else {
            writeln!(
                out,
                "{api_version} {kind} {name}\n  not served by the hub: apply its CRD first\n"
            )?;
            continue;
        };
        let namespace = namespaced.then(|| {
            t["metadata"]["namespace"]
                .as_str()
                .unwrap_or(namespace)
                .to_string()
        });
        let id = match &namespace {
            Some(ns) => format!("{ns}/{name}"),
            None => name.to_string(),
        };
        writeln!(out, "{api_version} {kind} {id}")?;
        if namespace.as_deref().is_some_and(skipped_namespace) {
            writeln!(
                out,
                "  not propagated: {} is a system namespace\n",
                namespace.unwrap_or_default()
            )?;
            continue;
        }
        let labels: BTreeMap<String, String> = t["metadata"]["labels"]
            .as_object()
            .map(|l| {
                l.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        let template = Template {
            api_version,
            kind,
            namespace: namespace.as_deref(),
            name,
            labels: &labels,
        };
        let Some((policy, namespaced_policy)) = choose(&policies[0], &policies[1], &template)
        else {
            writeln!(
                out,
                "  no policy matches it: it would stay on the hub only\n"
            )?;
            continue;
        };
        let source = if file_policies.contains(&(policy.name_any(), policy.namespace())) {
            "in the manifests"
        } else {
            "on the hub"
        };
        match (namespaced_policy, policy.namespace()) {
            (true, Some(ns)) => writeln!(
                out,
                "  policy     PropagationPolicy {ns}/{} ({source})",
                policy.name_any()
            ),
            _ => writeln!(
                out,
                "  policy     ClusterPropagationPolicy {} ({source})",
                policy.name_any()
            ),
        }?;
        let placement = policy.spec().placement.clone();
        writeln!(out, "  division   {}", division(&placement))?;

        // What the binding would be; the existing one's placement counts,
        // as the scheduler keeps replicas where they are.
        let scope = if namespaced {
            Scope::Namespaced
        } else {
            Scope::Cluster
        };
        let bar = binding_resource(scope);
        let bindings: Api<Binding> = match &namespace {
            Some(ns) => Api::namespaced_with(hub.clone(), ns, &bar),
            None => Api::all_with(hub.clone(), &bar),
        };
        let existing = bindings
            .get_opt(&names::binding_name(kind, name))
            .await
            .map_err(hub_error)?;
        let replicas = interpreter::replicas(api_version, kind, t);
        let spec = BindingSpec {
            resource: ObjectReference {
                api_version: api_version.to_string(),
                kind: kind.to_string(),
                namespace: namespace.clone().unwrap_or_default(),
                name: name.to_string(),
                ..Default::default()
            },
            replicas: replicas.as_ref().map(|(n, _)| *n),
            replica_requirements: replicas.and_then(|(_, r)| r),
            placement: Some(placement),
            clusters: existing
                .as_ref()
                .map(|b| b.spec.clusters.clone())
                .unwrap_or_default(),
            graceful_eviction_tasks: existing
                .as_ref()
                .map(|b| b.spec.graceful_eviction_tasks.clone())
                .unwrap_or_default(),
            ..Default::default()
        };
        let observing = existing
            .as_ref()
            .and_then(|b| b.status.as_ref())
            .and_then(|s| s.scheduler_observing_affinity_name.clone());
        let uid = existing
            .as_ref()
            .and_then(|b| b.metadata.uid.clone())
            .unwrap_or_else(|| format!("plan-{id}"));
        // The tenant's cluster sets hold here too (its quotas are the
        // scheduler's to weigh against what is placed).
        let limits = Limits {
            restriction: match &namespace {
                Some(ns) => super::placement::restriction(&hub, ns, &clusters).await?,
                None => None,
            },
            ..Default::default()
        };
        let decision = match schedule(&spec, &uid, &clusters, observing.as_deref(), false, &limits)
        {
            Ok(d) => d,
            Err(f) => {
                writeln!(out, "  cannot be scheduled ({}): {}\n", f.reason, f.message)?;
                continue;
            }
        };
        let manifest = interpreter::manifest(t);
        for target in &decision.clusters {
            let replicas = match target.replicas {
                Some(1) => "1 replica".to_string(),
                Some(n) => format!("{n} replicas"),
                None => "a copy".to_string(),
            };
            let overrides = match clusters.iter().find(|c| c.name_any() == target.name) {
                Some(c) => {
                    let mut m = manifest.clone();
                    match overrides::apply(
                        &mut m,
                        &template,
                        c,
                        &override_policies[1],
                        &override_policies[0],
                    ) {
                        Ok(applied) => {
                            let mut names: Vec<String> = Vec::new();
                            for (kind, entries) in [
                                ("ClusterOverridePolicy", &applied.cluster_policies),
                                ("OverridePolicy", &applied.policies),
                            ] {
                                names.extend(entries.iter().filter_map(|e| {
                                    Some(format!("{kind}/{}", e["policyName"].as_str()?))
                                }));
                            }
                            if names.is_empty() {
                                String::new()
                            } else {
                                format!("   overrides: {}", names.join(", "))
                            }
                        }
                        Err(e) => format!("   an override would fail: {e}"),
                    }
                }
                None => String::new(),
            };
            writeln!(out, "  {:<10} {replicas}{overrides}", target.name)?;
        }
        let placed = BindingSpec {
            clusters: decision.clusters.clone(),
            ..spec
        };
        for (cluster, why) in left_out(
            &placed,
            decision.affinity_name.as_deref(),
            &clusters,
            &limits,
        ) {
            writeln!(out, "  not {cluster}: {why}")?;
        }
        writeln!(out)?;
    }
    Ok(())
}
