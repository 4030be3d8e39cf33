//! The invariants, read through the hub's and the members' APIs once the
//! faults have stopped: every acknowledged template as last acknowledged,
//! every member holding exactly the copies the placement says (the
//! override applied where it applies), each binding's status aggregated
//! and Applied, no binding or Work left for a deleted template, every
//! cluster Ready.

use std::collections::BTreeMap;
use std::path::Path;

use flotilla_federation::api::{Binding, Cluster, Scope, Work, binding_resource};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

use super::ledger::{self, Ledger};
use super::load::{LABEL, NAMESPACE, OVERRIDE_LABEL};

/// The members, as the fleet's shape names them.
pub struct Member {
    pub name: String,
    pub kubeconfig: std::path::PathBuf,
}

/// What else a run checks.
#[derive(Clone, Copy)]
pub struct Extra {
    /// The members run gateways (netns fleets): each one's active gateway
    /// must be connected to every other cluster.
    pub fabric: bool,
}

/// Every violated invariant, a line each (empty: all hold). An API that
/// does not answer is a violation too (the fleet has not converged).
pub async fn violations(
    hub_kubeconfig: &Path,
    members: &[Member],
    ledger: &Ledger,
    extra: Extra,
) -> Vec<String> {
    let Some(hub) = super::load::hub_client(hub_kubeconfig).await else {
        return vec!["the hub's kubeconfig cannot be read".into()];
    };
    let mut out = Vec::new();
    let templates = match values(&hub).await {
        Ok(t) => t,
        Err(e) => return vec![format!("the hub does not answer: {e}")],
    };
    out.extend(ledger::templates_violations(ledger, &templates));
    for m in members {
        let Some(client) = super::load::hub_client(&m.kubeconfig).await else {
            out.push(format!("{}: its kubeconfig cannot be read", m.name));
            continue;
        };
        match copies(&client).await {
            Ok((copies, overridden)) => {
                out.extend(ledger::copies_violations(&m.name, &templates, &copies));
                let first = members.first().map(|f| f.name.as_str());
                for (name, label) in overridden {
                    let want = (Some(m.name.as_str()) == first).then(|| m.name.clone());
                    if label != want {
                        out.push(format!(
                            "{}: copy of {name} has {OVERRIDE_LABEL}={}, the override says {}",
                            m.name,
                            label.as_deref().unwrap_or("(none)"),
                            want.as_deref().unwrap_or("(none)")
                        ));
                    }
                }
            }
            Err(e) => out.push(format!("{}: does not answer: {e}", m.name)),
        }
        if extra.fabric {
            let others: Vec<&str> = members
                .iter()
                .filter(|o| o.name != m.name)
                .map(|o| o.name.as_str())
                .collect();
            out.extend(connections(&client, &m.name, &others).await);
        }
    }
    match pipeline(&hub, &templates, members.len()).await {
        Ok(v) => out.extend(v),
        Err(e) => out.push(format!("the hub does not answer: {e}")),
    }
    out
}

/// The run's templates on the hub: name → `data.v`.
async fn values(client: &Client) -> Result<BTreeMap<String, String>, kube::Error> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    let listed = api
        .list(&ListParams::default().labels(&format!("{LABEL}=true")))
        .await?;
    Ok(listed.items.iter().map(value_of).collect())
}

/// A template's or copy's name and `data.v`.
fn value_of(c: &ConfigMap) -> (String, String) {
    let v = c
        .data
        .as_ref()
        .and_then(|d| d.get("v").cloned())
        .unwrap_or_default();
    (c.name_any(), v)
}

type Overrides = Vec<(String, Option<String>)>;

/// A member's copies (name → `data.v`) and each one's override label.
async fn copies(client: &Client) -> Result<(BTreeMap<String, String>, Overrides), kube::Error> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    let listed = match api
        .list(&ListParams::default().labels(&format!("{LABEL}=true")))
        .await
    {
        Ok(l) => l.items,
        // No namespace yet: no copies.
        Err(kube::Error::Api(e)) if e.code == 404 => Vec::new(),
        Err(e) => return Err(e),
    };
    let overridden = listed
        .iter()
        .map(|c| (c.name_any(), c.labels().get(OVERRIDE_LABEL).cloned()))
        .collect();
    let values = listed.iter().map(value_of).collect();
    Ok((values, overridden))
}

/// Bindings and Works against the templates: one binding per template,
/// FullyApplied, a Work per member all Applied; none for a template
/// that is gone; every cluster Ready.
async fn pipeline(
    hub: &Client,
    templates: &BTreeMap<String, String>,
    members: usize,
) -> Result<Vec<String>, kube::Error> {
    let mut out = Vec::new();
    let bindings: Api<Binding> =
        Api::namespaced_with(hub.clone(), NAMESPACE, &binding_resource(Scope::Namespaced));
    let bindings = bindings.list(&ListParams::default()).await?.items;
    let mut bound: BTreeMap<String, &Binding> = BTreeMap::new();
    for b in &bindings {
        let of = &b.spec.resource;
        if of.kind != "ConfigMap" {
            continue;
        }
        if !templates.contains_key(&of.name) {
            out.push(format!(
                "binding {} left for deleted template {}",
                b.name_any(),
                of.name
            ));
        }
        bound.insert(of.name.clone(), b);
    }
    for name in templates.keys() {
        match bound.get(name) {
            None => out.push(format!("template {name}: no binding")),
            Some(b) => {
                let fully = b.status.as_ref().is_some_and(|s| {
                    s.conditions
                        .iter()
                        .any(|c| c.type_ == "FullyApplied" && c.status == "True")
                });
                if !fully {
                    out.push(format!(
                        "template {name}: binding {} not FullyApplied",
                        b.name_any()
                    ));
                }
            }
        }
    }
    let works: Api<Work> = Api::all(hub.clone());
    let works = works.list(&ListParams::default()).await?.items;
    let mut per_template: BTreeMap<String, usize> = BTreeMap::new();
    for w in &works {
        for m in w.spec.workload.parsed() {
            let (ns, name) = (
                m["metadata"]["namespace"].as_str().unwrap_or_default(),
                m["metadata"]["name"].as_str().unwrap_or_default(),
            );
            if ns != NAMESPACE || m["kind"] != "ConfigMap" {
                continue;
            }
            if !templates.contains_key(name) {
                out.push(format!(
                    "Work {}/{} left for deleted template {name}",
                    w.namespace().unwrap_or_default(),
                    w.name_any()
                ));
            }
            *per_template.entry(name.to_string()).or_default() += 1;
        }
    }
    for name in templates.keys() {
        let n = per_template.get(name).copied().unwrap_or_default();
        if n != members {
            out.push(format!("template {name}: {n} Works for {members} members"));
        }
    }
    let clusters: Api<Cluster> = Api::all(hub.clone());
    for c in clusters.list(&ListParams::default()).await?.items {
        if !c.is_ready() {
            out.push(format!("cluster {} not Ready", c.name_any()));
        }
    }
    Ok(out)
}

/// The member's active gateway against the other clusters: a line per
/// cluster it is not connected to.
async fn connections(client: &Client, member: &str, others: &[&str]) -> Vec<String> {
    use flotilla_fabric::api::{Gateway, OPERATOR_NAMESPACE};
    let api: Api<Gateway> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let gateways = match api.list(&ListParams::default()).await {
        Ok(l) => l.items,
        Err(e) => return vec![format!("{member}: its gateways cannot be read: {e}")],
    };
    let Some(active) = gateways.iter().find(|g| g.status.ha_status == "active") else {
        return vec![format!("{member}: no active gateway")];
    };
    others
        .iter()
        .filter(|o| {
            !active
                .status
                .connections
                .iter()
                .any(|c| c.endpoint.cluster_id == **o && c.status == "connected")
        })
        .map(|o| format!("{member}: its gateway is not connected to {o}"))
        .collect()
}
