//! The MachineHealthCheck controller: Machines its selector matches whose
//! node meets an unhealthy condition for longer than its timeout, or has
//! not appeared within `nodeStartupTimeout`, are remediated by deletion
//! (their MachineSet or control plane makes a new one), while no more than
//! `maxUnhealthy` are unhealthy at once.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tracing::info;

use crate::Context;
use crate::api;
use crate::capi::templates;
use crate::error::Error;
use crate::objects::{self, Objects, set_condition};
use crate::runner::{self, Controller, Next};

/// Upstream's default `nodeStartupTimeout`.
const NODE_STARTUP_TIMEOUT: Duration = Duration::from_secs(600);

pub async fn run(ctx: Arc<Context>) {
    let controller = Controller {
        name: "capi-machinehealthcheck",
        kind: api::machine_health_checks(),
        wakers: vec![],
        nodes: None,
    };
    runner::run_in(ctx, controller, |ctx, mhc| async move {
        reconcile(&ctx, mhc).await
    })
    .await;
}

/// One unhealthy-node rule: a condition type and status held for longer
/// than a timeout. v1beta2 writes `checks.unhealthyNodeConditions` with
/// `timeoutSeconds`, v1beta1 `unhealthyConditions` with `timeout`.
#[derive(Debug, PartialEq)]
struct Rule {
    type_: String,
    status: String,
    timeout: Duration,
}

fn rules(mhc: &Value) -> Vec<Rule> {
    let v2 = mhc["spec"]["checks"]["unhealthyNodeConditions"].as_array();
    let v1 = mhc["spec"]["unhealthyConditions"].as_array();
    v2.or(v1)
        .map(|list| {
            list.iter()
                .filter_map(|r| {
                    Some(Rule {
                        type_: r["type"].as_str()?.to_string(),
                        status: r["status"].as_str()?.to_string(),
                        timeout: flotilla_core::duration::parse(&r["timeoutSeconds"])
                            .or_else(|| flotilla_core::duration::parse(&r["timeout"]))?,
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

fn startup_timeout(mhc: &Value) -> Duration {
    flotilla_core::duration::parse(&mhc["spec"]["checks"]["nodeStartupTimeoutSeconds"])
        .or_else(|| flotilla_core::duration::parse(&mhc["spec"]["nodeStartupTimeout"]))
        .unwrap_or(NODE_STARTUP_TIMEOUT)
}

/// How many Machines may be unhealthy at once (`maxUnhealthy`, v1beta1;
/// `remediation.triggerIf.unhealthyLessThanOrEqualTo`, v1beta2): a count
/// or a percentage of the Machines watched; all of them when unset.
fn max_unhealthy(mhc: &Value, total: usize) -> usize {
    let v = &mhc["spec"]["remediation"]["triggerIf"]["unhealthyLessThanOrEqualTo"];
    let v = if v.is_null() {
        &mhc["spec"]["maxUnhealthy"]
    } else {
        v
    };
    match v {
        Value::Number(n) => n.as_u64().unwrap_or(total as u64) as usize,
        Value::String(s) => match s.strip_suffix('%').and_then(|p| p.parse::<usize>().ok()) {
            Some(p) => total * p / 100,
            None => s.parse().unwrap_or(total),
        },
        _ => total,
    }
}

/// Seconds since an RFC 3339 time, if it parses.
fn since(time: &Value) -> Option<Duration> {
    let t: jiff::Timestamp = time.as_str()?.parse().ok()?;
    let d = jiff::Timestamp::now().duration_since(t);
    Duration::try_from(d).ok()
}

/// Why a Machine is unhealthy, if it is; with the time left before it
/// would be, when it is not yet.
fn verdict(
    machine: &Value,
    rules: &[Rule],
    startup: Duration,
    node: Option<&Value>,
) -> (Option<String>, Option<Duration>) {
    let Some(node) = node else {
        if machine["status"]["nodeRef"].is_object() {
            return (Some("NodeDeleted: the Machine's node is gone".into()), None);
        }
        let age = since(&machine["metadata"]["creationTimestamp"]).unwrap_or_default();
        return if age > startup {
            (
                Some(format!(
                    "NodeStartupTimeout: no node within {}s",
                    startup.as_secs()
                )),
                None,
            )
        } else {
            (None, Some(startup - age))
        };
    };
    let mut soonest: Option<Duration> = None;
    for c in node["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
    {
        for rule in rules {
            if c["type"] != rule.type_.as_str() || c["status"] != rule.status.as_str() {
                continue;
            }
            let held = since(&c["lastTransitionTime"]).unwrap_or_default();
            if held > rule.timeout {
                return (
                    Some(format!(
                        "UnhealthyNode: condition {}={} for more than {}s",
                        rule.type_,
                        rule.status,
                        rule.timeout.as_secs()
                    )),
                    None,
                );
            }
            let left = rule.timeout - held;
            soonest = Some(soonest.map_or(left, |s| s.min(left)));
        }
    }
    (None, soonest)
}

async fn reconcile(ctx: &Context, mhc: Value) -> Result<Next, Error> {
    let namespace = objects::namespace(&mhc).to_string();
    let name = objects::name(&mhc).to_string();
    let cluster = mhc["spec"]["clusterName"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let objects = Objects::new(ctx.client.clone(), &namespace);
    if objects::deleting(&mhc) {
        return Ok(None);
    }
    let selector = templates::selector_string(&mhc["spec"]["selector"]["matchLabels"]);
    let machines: Vec<Value> = objects
        .list(&api::machines(), &selector)
        .await?
        .into_iter()
        .filter(|m| m["spec"]["clusterName"] == cluster.as_str() && templates::active(m))
        .collect();
    let rules = rules(&mhc);
    let startup = startup_timeout(&mhc);
    // The workload cluster does not answer: judge nothing.
    let Some(nodes) = ctx.workloads.nodes(&namespace, &cluster).await? else {
        return Ok(Some(Duration::from_secs(5)));
    };
    let nodes: Vec<Value> = nodes
        .iter()
        .filter_map(|n| serde_json::to_value(n).ok())
        .collect();
    let mut unhealthy = Vec::new();
    let mut next: Option<Duration> = None;
    for m in &machines {
        let provider_id = m["spec"]["providerID"].as_str().unwrap_or_default();
        let node = nodes
            .iter()
            .find(|n| !provider_id.is_empty() && n["spec"]["providerID"] == provider_id);
        let (why, left) = verdict(m, &rules, startup, node);
        if let Some(why) = why {
            unhealthy.push((m, why));
        }
        if let Some(left) = left {
            next = Some(next.map_or(left, |n| n.min(left)));
        }
    }
    let total = machines.len();
    let allowed = max_unhealthy(&mhc, total);
    let mut status = mhc["status"].clone();
    if !status.is_object() {
        status = json!({});
    }
    status["expectedMachines"] = json!(total);
    status["currentHealthy"] = json!(total - unhealthy.len());
    status["remediationsAllowed"] = json!(allowed.saturating_sub(unhealthy.len()));
    status["targets"] = json!(machines.iter().map(objects::name).collect::<Vec<_>>());
    status["observedGeneration"] = mhc["metadata"]["generation"].clone();
    if unhealthy.len() > allowed {
        set_condition(
            &mut status,
            "RemediationAllowed",
            "False",
            "TooManyUnhealthy",
            &format!(
                "{} of {total} Machines are unhealthy, more than the {allowed} allowed: nothing is remediated",
                unhealthy.len()
            ),
        );
    } else {
        set_condition(
            &mut status,
            "RemediationAllowed",
            "True",
            "RemediationAllowed",
            "",
        );
        for (m, why) in &unhealthy {
            info!(machine = %objects::name(m), health_check = %name, reason = %why, "remediating an unhealthy machine");
            objects.delete(&api::machines(), objects::name(m)).await?;
        }
    }
    set_condition(&mut status, "Paused", "False", "NotPaused", "");
    if status != mhc["status"] {
        objects
            .status(&api::machine_health_checks(), &name, status)
            .await?;
    }
    // Look again when the soonest rule could fire, and now and then.
    let again = next.map_or(Duration::from_secs(5), |n| {
        (n + Duration::from_millis(200)).min(Duration::from_secs(5))
    });
    Ok(Some(again))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_of_both_versions_are_read() {
        let v2 = json!({"spec": {"checks": {"unhealthyNodeConditions": [{"type": "Ready", "status": "False", "timeoutSeconds": 300}]}}});
        let v1 = json!({"spec": {"unhealthyConditions": [{"type": "Ready", "status": "False", "timeout": "5m"}]}});
        assert_eq!(rules(&v2), rules(&v1));
        assert_eq!(rules(&v1)[0].timeout, Duration::from_secs(300));
        assert_eq!(
            flotilla_core::duration::parse_go("1h30m"),
            Some(Duration::from_secs(5400))
        );
        assert_eq!(flotilla_core::duration::parse_go("5x"), None);
    }

    #[test]
    fn max_unhealthy_is_a_count_or_a_share() {
        assert_eq!(
            max_unhealthy(&json!({"spec": {"maxUnhealthy": "40%"}}), 5),
            2
        );
        assert_eq!(max_unhealthy(&json!({"spec": {"maxUnhealthy": 1}}), 5), 1);
        assert_eq!(max_unhealthy(&json!({"spec": {}}), 5), 5);
    }

    #[test]
    fn a_node_unready_past_its_timeout_is_unhealthy() {
        let rules = vec![Rule {
            type_: "Ready".into(),
            status: "False".into(),
            timeout: Duration::from_secs(1),
        }];
        let machine = json!({"metadata": {"creationTimestamp": "2020-01-01T00:00:00Z"}, "status": {"nodeRef": {"name": "n"}}});
        let old = json!({"status": {"conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": "2020-01-01T00:00:00Z"}]}});
        assert!(
            verdict(&machine, &rules, NODE_STARTUP_TIMEOUT, Some(&old))
                .0
                .is_some()
        );
        let ready = json!({"status": {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2020-01-01T00:00:00Z"}]}});
        assert!(
            verdict(&machine, &rules, NODE_STARTUP_TIMEOUT, Some(&ready))
                .0
                .is_none()
        );
        assert!(
            verdict(&machine, &rules, NODE_STARTUP_TIMEOUT, None)
                .0
                .is_some()
        );
    }
}
