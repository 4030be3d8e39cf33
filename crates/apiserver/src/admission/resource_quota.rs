//! ResourceQuota: a create that would take a namespace past a quota's
//! `spec.hard` is refused with upstream's 403 (`exceeded quota: q,
//! requested: pods=1, used: pods=2, limited: pods=2`), and a pod that
//! does not say what a compute quota tracks with `must specify`. A
//! controller keeps each quota's `status.hard` and `status.used`.
//!
//! Counted: `pods` (not terminated), `services`, `configmaps`, `secrets`,
//! `persistentvolumeclaims`, `replicationcontrollers`, `resourcequotas`,
//! `count/<resource>[.<group>]`, and the pods' `requests.cpu` (`cpu`),
//! `requests.memory` (`memory`), `limits.cpu`, `limits.memory`.
//! Usage is computed from the store when a write asks, so two creates at
//! the same instant may both pass (upstream serialises them through the
//! quota's status).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};
use tracing::warn;

use super::{Operation, Request, Validating, View, amount, containers, stored};
use crate::error::{ApiError, ApiResult};
use crate::objects::meta_str;
use crate::resources::Registry;
use flotilla_core::quantity::{format_bytes, format_millicores};
use flotilla_store::Store;

pub struct ResourceQuota;

/// What a quota key measures.
enum Measure {
    /// Objects of (group, plural).
    Count(String, String),
    /// A compute resource of pods: (requests or limits, cpu or memory).
    Compute(&'static str, &'static str),
}

fn measure(key: &str) -> Option<Measure> {
    let core = |plural: &str| Some(Measure::Count(String::new(), plural.into()));
    match key {
        "pods"
        | "services"
        | "configmaps"
        | "secrets"
        | "persistentvolumeclaims"
        | "replicationcontrollers"
        | "resourcequotas" => core(key),
        "cpu" | "requests.cpu" => Some(Measure::Compute("requests", "cpu")),
        "memory" | "requests.memory" => Some(Measure::Compute("requests", "memory")),
        "limits.cpu" => Some(Measure::Compute("limits", "cpu")),
        "limits.memory" => Some(Measure::Compute("limits", "memory")),
        _ => {
            let counted = key.strip_prefix("count/")?;
            let (plural, group) = counted.split_once('.').unwrap_or((counted, ""));
            Some(Measure::Count(group.into(), plural.into()))
        }
    }
}

fn is_terminated(pod: &Value) -> bool {
    matches!(
        pod.pointer("/status/phase").and_then(Value::as_str),
        Some("Succeeded" | "Failed")
    )
}

/// A pod's total of `field` (requests or limits) of `resource`; requests
/// default to limits. None when a container does not say.
fn pod_total(pod: &Value, field: &str, resource: &str) -> Option<f64> {
    let mut total = 0.0;
    for c in containers(pod) {
        let given = amount(c.pointer(&format!("/resources/{field}/{resource}")));
        let value = match (field, given) {
            (_, Some(v)) => v,
            ("requests", None) => amount(c.pointer(&format!("/resources/limits/{resource}")))?,
            _ => return None,
        };
        total += value;
    }
    Some(total)
}

/// What a namespace uses of `m`, from its objects as `list` (group,
/// plural) reads them.
fn usage(list: &dyn Fn(&str, &str) -> Vec<Value>, m: &Measure) -> f64 {
    match m {
        Measure::Count(group, plural) => list(group, plural)
            .iter()
            .filter(|o| !(plural == "pods" && group.is_empty() && is_terminated(o)))
            .count() as f64,
        Measure::Compute(field, resource) => list("", "pods")
            .iter()
            .filter(|p| !is_terminated(p))
            .filter_map(|p| pod_total(p, field, resource))
            .sum(),
    }
}

fn show(m: &Measure, v: f64) -> String {
    match m {
        Measure::Compute(_, "cpu") => format_millicores((v * 1000.0).round() as i64),
        Measure::Compute(..) => format_bytes(v.round() as i64),
        Measure::Count(..) => (v.round() as i64).to_string(),
    }
}

impl Validating for ResourceQuota {
    fn validate(&self, view: &View, request: &Request, obj: &Value) -> ApiResult<()> {
        let (Operation::Create, Some(ns)) = (request.operation, request.namespace) else {
            return Ok(());
        };
        let r = request.resource;
        let is_pod = r.group.is_empty() && r.plural == "pods";
        let list = |group: &str, plural: &str| view.list_in(group, plural, ns);
        let quotas = view.quotas.in_namespace(ns).unwrap_or_else(|| {
            list("", "resourcequotas")
                .into_iter()
                .map(Arc::new)
                .collect()
        });
        for quota in quotas {
            let quota_name = meta_str(&quota, "name").to_string();
            let Some(hard) = quota.pointer("/spec/hard").and_then(Value::as_object) else {
                continue;
            };
            for (key, limit) in hard {
                let Some(m) = measure(key) else { continue };
                let delta = match &m {
                    Measure::Count(group, plural) if *group == r.group && *plural == r.plural => {
                        1.0
                    }
                    Measure::Compute(field, resource) if is_pod => {
                        match pod_total(obj, field, resource) {
                            Some(v) => v,
                            None => {
                                return Err(ApiError::forbidden(format!(
                                    "{} \"{}\" is forbidden: failed quota: {quota_name}: must specify {key}",
                                    r.plural,
                                    meta_str(obj, "name")
                                )));
                            }
                        }
                    }
                    _ => continue,
                };
                let Some(limit) = amount(Some(limit)) else {
                    continue;
                };
                let used = usage(&list, &m);
                if used + delta > limit + 1e-9 {
                    return Err(ApiError::forbidden(format!(
                        "{} \"{}\" is forbidden: exceeded quota: {quota_name}, requested: {key}={}, used: {key}={}, limited: {key}={}",
                        r.plural,
                        meta_str(obj, "name"),
                        show(&m, delta),
                        show(&m, used),
                        show(&m, limit)
                    )));
                }
            }
        }
        Ok(())
    }
}

/// Keeps every quota's `status.hard` and `status.used` current.
pub fn spawn_status(store: Arc<dyn Store>, registry: Arc<Registry>) {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            let Some(r) = registry.get("", "v1", "resourcequotas") else {
                continue;
            };
            let listed = match store.list(&r.prefix(), &Default::default()) {
                Ok(l) => l,
                Err(flotilla_store::StoreError::Closed) => return,
                Err(_) => continue,
            };
            for kv in listed.items {
                let Ok(mut quota) = serde_json::from_slice::<Value>(&kv.value) else {
                    continue;
                };
                let ns = meta_str(&quota, "namespace").to_string();
                let list = |group: &str, plural: &str| {
                    stored(store.as_ref(), &registry, (group, "v1", plural), Some(&ns))
                };
                let hard = quota.pointer("/spec/hard").cloned().unwrap_or(json!({}));
                let mut used = Map::new();
                for key in hard.as_object().into_iter().flatten().map(|(k, _)| k) {
                    if let Some(m) = measure(key) {
                        used.insert(key.clone(), json!(show(&m, usage(&list, &m))));
                    }
                }
                let status = json!({"hard": hard, "used": used});
                if quota.get("status") == Some(&status) {
                    continue;
                }
                quota["status"] = status;
                let Ok(bytes) = serde_json::to_vec(&quota) else {
                    continue;
                };
                match store.update(&kv.key, bytes.into(), kv.mod_revision).await {
                    Ok(_) | Err(flotilla_store::StoreError::Conflict { .. }) => {}
                    Err(error) => warn!(%error, "quota status not written"),
                }
            }
        }
    });
}
