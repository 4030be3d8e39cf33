//! `flotilla describe placement pp/NAME` (or `cpp/NAME`): what each of a
//! policy's resource selectors matched on the hub, which of those
//! templates the policy holds, and, for a selector that matched nothing,
//! why: no such kind served, no object of that name, namespace or labels,
//! or a namespace that is never propagated.

use std::fmt::Write;

use flotilla_federation::api::{Policy, ResourceSelector, annotations};
use flotilla_federation::detector::skipped_namespace;
use kube::api::{DynamicObject, ListParams};
use kube::core::Selector;
use kube::{Api, Client, ResourceExt};

use super::hub_error;
use super::resolve::{self, Resolved};

pub async fn describe(
    hub: &Client,
    r: &Resolved,
    name: &str,
    namespace: Option<&str>,
    out: &mut String,
) -> anyhow::Result<()> {
    let policies: Api<Policy> = match namespace {
        Some(ns) => Api::namespaced_with(hub.clone(), ns, &r.ar),
        None => Api::all_with(hub.clone(), &r.ar),
    };
    let Some(policy) = policies.get_opt(name).await.map_err(hub_error)? else {
        anyhow::bail!(
            "{} \"{name}\" not found{}",
            r.ar.plural,
            namespace.map_or(String::new(), |ns| format!(" in namespace {ns}"))
        );
    };
    let id = match namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    };
    writeln!(
        out,
        "Policy:       {} {id} (priority {})",
        r.ar.kind, policy.spec.priority
    )?;
    writeln!(out, "Selectors:")?;
    for selector in &policy.spec.resource_selectors {
        let verdict = judge(hub, selector, namespace, &r.ar.kind, &id).await?;
        writeln!(out, "  {}: {verdict}", describe_selector(selector))?;
    }
    Ok(())
}

/// A selector as a person writes it: `apps/v1 Deployment web in shop`.
fn describe_selector(s: &ResourceSelector) -> String {
    let mut text = format!("{} {}", s.api_version, s.kind);
    if let Some(name) = s.name.as_deref().filter(|n| !n.is_empty()) {
        write!(text, " {name}").ok();
    }
    if let Some(labels) = s
        .label_selector
        .clone()
        .and_then(|l| Selector::try_from(l).ok())
    {
        write!(text, " with labels {labels}").ok();
    }
    if let Some(ns) = s.namespace.as_deref().filter(|n| !n.is_empty()) {
        write!(text, " in {ns}").ok();
    }
    text
}

/// What one selector matched, or why it matched nothing.
async fn judge(
    hub: &Client,
    s: &ResourceSelector,
    policy_namespace: Option<&str>,
    policy_kind: &str,
    policy_id: &str,
) -> anyhow::Result<String> {
    let group = flotilla_federation::detector::matching::group_of(&s.api_version);
    let input = match group {
        "" => s.kind.to_lowercase(),
        g => format!("{}.{g}", s.kind.to_lowercase()),
    };
    let served = resolve::resource(hub, &input)
        .await
        .ok()
        .filter(|found| found.ar.group == group && found.ar.kind == s.kind);
    let Some(served) = served else {
        return Ok(format!(
            "matched nothing: the hub serves no kind {} in the API group {:?} (kubectl api-resources lists what it serves)",
            s.kind, group
        ));
    };
    // A PropagationPolicy selects in its own namespace; a cluster policy
    // where its selector says, or everywhere.
    let namespace = policy_namespace
        .or(s.namespace.as_deref().filter(|n| !n.is_empty()))
        .filter(|_| served.namespaced);
    if policy_namespace.is_some()
        && s.namespace
            .as_deref()
            .is_some_and(|n| !n.is_empty() && Some(n) != policy_namespace)
    {
        return Ok(format!(
            "matched nothing: a PropagationPolicy selects only in its own namespace, not in {:?}",
            s.namespace.as_deref().unwrap_or_default()
        ));
    }
    let templates: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(hub.clone(), ns, &served.ar),
        None => Api::all_with(hub.clone(), &served.ar),
    };
    let mut params = ListParams::default();
    if let Some(name) = s.name.as_deref().filter(|n| !n.is_empty()) {
        params = params.fields(&format!("metadata.name={name}"));
    } else if let Some(labels) = s.label_selector.clone() {
        let selector = Selector::try_from(labels)
            .map_err(|e| anyhow::anyhow!("the selector's labelSelector is invalid: {e}"))?;
        params = params.labels_from(&selector);
    }
    let found = templates.list(&params).await.map_err(hub_error)?.items;
    let place = namespace.map_or(String::new(), |ns| format!(" in namespace {ns}"));
    if found.is_empty() {
        let what = match (
            s.name.as_deref().filter(|n| !n.is_empty()),
            &s.label_selector,
        ) {
            (Some(name), _) => format!("no {} named {name:?}{place}", s.kind),
            (None, Some(_)) => format!("no {} with those labels{place}", s.kind),
            (None, None) => format!("no {}{place}", s.kind),
        };
        return Ok(format!("matched nothing: {what}"));
    }
    let mut held = Vec::new();
    let mut elsewhere = Vec::new();
    let mut skipped = Vec::new();
    for t in &found {
        let id = match t.namespace() {
            Some(ns) => format!("{ns}/{}", t.name_any()),
            None => t.name_any(),
        };
        if t.namespace().is_some_and(|ns| skipped_namespace(&ns)) {
            skipped.push(id);
            continue;
        }
        let a = t.annotations();
        let holder = match (a.get(annotations::PP_NAME), a.get(annotations::CPP_NAME)) {
            (Some(pp), _) => Some(format!(
                "PropagationPolicy {}/{pp}",
                a.get(annotations::PP_NAMESPACE).map_or("", String::as_str)
            )),
            (None, Some(cpp)) => Some(format!("ClusterPropagationPolicy {cpp}")),
            (None, None) => None,
        };
        match holder {
            Some(h) if h == format!("{policy_kind} {policy_id}") => held.push(id),
            Some(h) => elsewhere.push(format!("{id} (held by {h})")),
            None => elsewhere.push(format!("{id} (not yet claimed)")),
        }
    }
    let mut verdict = format!(
        "matched {} {}{place}",
        found.len(),
        if found.len() == 1 {
            "template"
        } else {
            "templates"
        }
    );
    if !held.is_empty() {
        write!(verdict, "; propagates {}", held.join(", "))?;
    }
    if !elsewhere.is_empty() {
        write!(verdict, "; not by this policy: {}", elsewhere.join(", "))?;
    }
    if !skipped.is_empty() {
        write!(
            verdict,
            "; never propagated (a system namespace): {}",
            skipped.join(", ")
        )?;
    }
    Ok(verdict)
}
