//! `POST .../pods/NAME/eviction` (policy/v1 Eviction, what `kubectl drain`
//! sends): the pod is deleted unless a PodDisruptionBudget that selects it
//! would be violated, which upstream answers with 429.
//!
//! Upstream's disruption controller keeps each budget's status, and the
//! eviction reads it. Here the budget is computed when the eviction asks
//! (and [`spawn_status`] keeps the status for `kubectl get pdb`):
//! the healthy pods are the budget's pods that are Ready and not being
//! deleted; `minAvailable` or `maxUnavailable` (a number or a percentage
//! of the budget's pods) gives how many must stay.

use axum::response::{IntoResponse, Response};
use http::{StatusCode, header};
use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult, Cause, Details};
use crate::handlers::{self, Ctx};
use crate::objects::{self, meta_str};
use crate::request;
use flotilla_core::selector::LabelSelector;

pub async fn evict(ctx: &Ctx, body: &[u8]) -> ApiResult<Response> {
    let eviction = request::parse_body(&ctx.headers, body)?;
    let kind = eviction
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("Eviction");
    if kind != "Eviction" {
        return Err(ApiError::bad_request(format!(
            "the body of an /eviction request must be a policy/v1 Eviction, not {kind}"
        )));
    }
    let name = ctx.name.clone().unwrap_or_default();
    let named = meta_str(&eviction, "name");
    if !named.is_empty() && named != name {
        return Err(ApiError::bad_request(format!(
            "name in URL does not match name in Eviction object: {name} != {named}"
        )));
    }
    let ns = ctx.namespace.clone().unwrap_or_default();
    let api = &ctx.api;
    let pods_r = ctx.resource.clone();
    let pod_kv = api
        .get_latest(&pods_r.key(Some(&ns), &name))
        .await?
        .ok_or_else(|| ApiError::not_found("", "pods", &name))?;
    let pod = objects::decode(&pods_r, &pod_kv)?;
    if objects::is_deleting(&pod) || !is_healthy(&pod) {
        // Not counted by any budget: evicting it takes nothing away.
        return delete(ctx, &name, &eviction).await;
    }
    let Some(pdbs) = api.registry.get("policy", "v1", "poddisruptionbudgets") else {
        return delete(ctx, &name, &eviction).await;
    };
    let budgets = api
        .store
        .list(&pdbs.collection_prefix(Some(&ns)), &Default::default())?;
    let pods = api
        .store
        .list(&pods_r.collection_prefix(Some(&ns)), &Default::default())?;
    let pods: Vec<Value> = pods
        .items
        .iter()
        .filter_map(|kv| objects::decode(&pods_r, kv).ok())
        .collect();
    for kv in &budgets.items {
        let budget = objects::decode(&pdbs, kv)?;
        let Some(selector) = selector_of(&budget) else {
            continue;
        };
        if !selector.matches(labels(&pod)) {
            continue;
        }
        let Assessment {
            healthy, desired, ..
        } = assess(&budget, &selector, &pods);
        if healthy - 1 < desired {
            let budget_name = meta_str(&budget, "name").to_string();
            let mut e = ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "TooManyRequests",
                "Cannot evict pod as it would violate the pod's disruption budget.",
            );
            e.details = Some(Box::new(Details {
                name: String::new(),
                group: String::new(),
                kind: String::new(),
                causes: vec![Cause {
                    reason: "DisruptionBudget",
                    field: String::new(),
                    message: format!(
                        "The disruption budget {budget_name} needs {desired} healthy pods and has {healthy} currently"
                    ),
                }],
            }));
            return Err(e);
        }
    }
    delete(ctx, &name, &eviction).await
}

/// Deletes the pod with the eviction's deleteOptions; answers upstream's
/// 201 Success.
async fn delete(ctx: &Ctx, name: &str, eviction: &Value) -> ApiResult<Response> {
    let options = eviction
        .get("deleteOptions")
        .map(|o| serde_json::to_vec(o).unwrap_or_default())
        .unwrap_or_default();
    let opts = handlers::delete_options(ctx, &options)?;
    crate::registry::delete(&ctx.request()?, name, &opts).await?;
    let body = serde_json::to_vec(
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
                                          "status": "Success", "code": 201}),
    )
    .map_err(|e| ApiError::internal(e.to_string()))?;
    Ok((
        StatusCode::CREATED,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response())
}

fn labels(obj: &Value) -> Option<&serde_json::Map<String, Value>> {
    obj.pointer("/metadata/labels").and_then(Value::as_object)
}

fn is_healthy(pod: &Value) -> bool {
    pod.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|c| {
            c.iter().any(|c| {
                c.get("type").and_then(Value::as_str) == Some("Ready")
                    && c.get("status").and_then(Value::as_str) == Some("True")
            })
        })
}

/// A budget's selector (in policy/v1 an empty one selects every pod of
/// the namespace); none selects nothing.
fn selector_of(budget: &Value) -> Option<LabelSelector> {
    let selector = budget.pointer("/spec/selector")?;
    LabelSelector::parse(&crate::scale::format_label_selector(Some(selector))).ok()
}

/// A budget's pods as its status counts them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Assessment {
    /// The pods it selects.
    pub expected: i64,
    /// Those Ready and not being deleted.
    pub healthy: i64,
    /// How many must stay healthy.
    pub desired: i64,
}

fn assess(budget: &Value, selector: &LabelSelector, pods: &[Value]) -> Assessment {
    let covered: Vec<&Value> = pods
        .iter()
        .filter(|p| selector.matches(labels(p)))
        .collect();
    let expected = covered.len() as i64;
    let healthy = covered
        .iter()
        .filter(|p| is_healthy(p) && !objects::is_deleting(p))
        .count() as i64;
    Assessment {
        expected,
        healthy,
        desired: desired_healthy(budget, expected),
    }
}

/// Keeps every PodDisruptionBudget's status (what `kubectl get pdb` shows
/// as ALLOWED DISRUPTIONS), as upstream's disruption controller, every 5 s.
pub fn spawn_status(api: std::sync::Arc<crate::storage::Storage>) {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(std::time::Duration::from_secs(5)).await;
            let (Some(pdbs), Some(pods_r)) = (
                api.registry.get("policy", "v1", "poddisruptionbudgets"),
                api.registry.get("", "v1", "pods"),
            ) else {
                continue;
            };
            let listed = match api.store.list(&pdbs.prefix(), &Default::default()) {
                Ok(l) => l,
                Err(flotilla_store::StoreError::Closed) => return,
                Err(_) => continue,
            };
            for kv in listed.items {
                let Ok(mut budget) = serde_json::from_slice::<Value>(&kv.value) else {
                    continue;
                };
                let ns = meta_str(&budget, "namespace").to_string();
                let Some(selector) = selector_of(&budget) else {
                    continue;
                };
                let pods: Vec<Value> = api
                    .store
                    .list(&pods_r.collection_prefix(Some(&ns)), &Default::default())
                    .map(|l| {
                        l.items
                            .iter()
                            .filter_map(|kv| serde_json::from_slice(&kv.value).ok())
                            .collect()
                    })
                    .unwrap_or_default();
                let a = assess(&budget, &selector, &pods);
                let allowed = (a.healthy - a.desired).max(0);
                let generation = budget
                    .pointer("/metadata/generation")
                    .cloned()
                    .unwrap_or(json!(1));
                let (condition, reason) = if allowed > 0 {
                    ("True", "SufficientPods")
                } else {
                    ("False", "InsufficientPods")
                };
                let old = budget.get("status").cloned().unwrap_or(json!({}));
                let unchanged = old.get("disruptionsAllowed") == Some(&json!(allowed))
                    && old.get("currentHealthy") == Some(&json!(a.healthy))
                    && old.get("desiredHealthy") == Some(&json!(a.desired))
                    && old.get("expectedPods") == Some(&json!(a.expected))
                    && old.get("observedGeneration") == Some(&generation);
                if unchanged {
                    continue;
                }
                budget["status"] = json!({
                    "observedGeneration": generation,
                    "disruptionsAllowed": allowed,
                    "currentHealthy": a.healthy,
                    "desiredHealthy": a.desired,
                    "expectedPods": a.expected,
                    "conditions": [{"type": "DisruptionAllowed", "status": condition,
                                    "reason": reason, "message": "",
                                    "observedGeneration": generation,
                                    "lastTransitionTime": crate::meta::now()}],
                });
                let Ok(bytes) = serde_json::to_vec(&budget) else {
                    continue;
                };
                // A lost race is settled at the next pass.
                let _ = api.store.update_from(&kv, bytes.into()).await;
            }
        }
    });
}

/// How many of `expected` pods the budget keeps healthy.
fn desired_healthy(budget: &Value, expected: i64) -> i64 {
    let amount = |v: &Value, round_up: bool| -> i64 {
        match v {
            Value::Number(n) => n.as_i64().unwrap_or(0),
            Value::String(s) => {
                let percent = s
                    .trim_end_matches('%')
                    .parse::<i64>()
                    .unwrap_or(0)
                    .clamp(0, 100);
                let scaled = expected * percent;
                if round_up {
                    (scaled + 99) / 100
                } else {
                    scaled / 100
                }
            }
            _ => 0,
        }
    };
    if let Some(min) = budget.pointer("/spec/minAvailable") {
        return amount(min, true);
    }
    if let Some(max) = budget.pointer("/spec/maxUnavailable") {
        return (expected - amount(max, true)).max(0);
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_count_numbers_and_percentages_as_upstream() {
        let b = |spec: Value| json!({"spec": spec});
        assert_eq!(desired_healthy(&b(json!({"minAvailable": 2})), 3), 2);
        assert_eq!(desired_healthy(&b(json!({"minAvailable": "50%"})), 3), 2);
        assert_eq!(desired_healthy(&b(json!({"maxUnavailable": 1})), 3), 2);
        assert_eq!(desired_healthy(&b(json!({"maxUnavailable": "34%"})), 3), 1);
        assert_eq!(desired_healthy(&b(json!({})), 3), 0);
    }
}
