//! The Gateway object: what this gateway is (active or passive), its own
//! endpoint, and one connection per remote cluster with Submariner's
//! statuses and messages.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use super::MANAGER;
use super::plan::Plan;
use crate::api::{
    CONNECTED, CONNECTING, Connection, ERROR, EndpointSpec, Gateway, GatewayStatus, LatencyRtt,
    OPERATOR_NAMESPACE,
};
use crate::wireguard::PeerStats;

/// How long a new peer may take to answer before it is an error.
pub const HANDSHAKE_GRACE: Duration = Duration::from_secs(15);

/// A Go duration string ("1.2ms"), as Submariner writes RTTs.
pub fn go_duration(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 1000.0 {
        format!("{}µs", trim(us))
    } else if us < 1e6 {
        format!("{}ms", trim(us / 1000.0))
    } else {
        format!("{}s", trim(us / 1e6))
    }
}

fn trim(v: f64) -> String {
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// One connection per remote cluster in `plan`.
pub fn connections(
    plan: &Plan,
    stats: &[(String, PeerStats)],
    since: &HashMap<String, (String, Instant)>,
) -> Vec<Connection> {
    plan.remotes
        .iter()
        .map(|remote| {
            let cluster = &remote.endpoint.cluster_id;
            let stats = stats.iter().find(|(c, _)| c == cluster).map(|(_, s)| s);
            let using_ip = remote.endpoint.public_ip.clone();
            let (status, message) = match (&remote.problem, stats) {
                (Some(problem), _) => (ERROR, problem.clone()),
                (None, Some(s)) if s.alive() => (
                    CONNECTED,
                    format!("Rx={} Bytes, Tx={} Bytes", s.rx_bytes, s.tx_bytes),
                ),
                (None, s) => {
                    let age = since.get(cluster).map(|(_, t)| t.elapsed()).unwrap_or_default();
                    let heard = s.and_then(|s| s.last_reply);
                    match heard {
                        None if age < HANDSHAKE_GRACE => (CONNECTING, "no initial handshake yet".to_string()),
                        None => (
                            ERROR,
                            format!(
                                "no handshake with {using_ip} for {:.1} seconds: the endpoint is unreachable on the underlay, or its key does not match{}",
                                age.as_secs_f64(),
                                s.and_then(|s| s.last_error.as_ref())
                                    .map(|e| format!(" (last error: {e})"))
                                    .unwrap_or_default()
                            ),
                        ),
                        Some(t) => (
                            ERROR,
                            format!("no reply through the tunnel for {:.1} seconds", t.elapsed().as_secs_f64()),
                        ),
                    }
                }
            };
            let latency_rtt = stats.filter(|s| s.rtt_count > 0).map(|s| LatencyRtt {
                last: s.last_rtt.map(go_duration).unwrap_or_default(),
                min: s.min_rtt.map(go_duration).unwrap_or_default(),
                average: s.mean_rtt().map(go_duration).unwrap_or_default(),
                max: s.max_rtt.map(go_duration).unwrap_or_default(),
                std_dev: s.std_dev().map(go_duration).unwrap_or_default(),
            });
            Connection {
                status: status.into(),
                status_message: message,
                endpoint: remote.endpoint.clone(),
                using_ip,
                using_nat: false,
                latency_rtt,
            }
        })
        .collect()
}

pub fn gateway(
    node: &str,
    active: bool,
    local_endpoint: EndpointSpec,
    failure: &str,
    connections: Vec<Connection>,
) -> Gateway {
    Gateway {
        metadata: ObjectMeta {
            name: Some(node.into()),
            namespace: Some(OPERATOR_NAMESPACE.into()),
            annotations: Some(
                [(
                    "update-timestamp".to_string(),
                    jiff::Timestamp::now().as_second().to_string(),
                )]
                .into(),
            ),
            ..Default::default()
        },
        status: GatewayStatus {
            version: env!("CARGO_PKG_VERSION").into(),
            ha_status: if active { "active" } else { "passive" }.into(),
            local_endpoint,
            status_failure: failure.into(),
            connections,
        },
    }
}

/// Creates the Gateway if needed and writes its status.
pub async fn write(member: &Client, gateway: &Gateway) -> Result<(), kube::Error> {
    let api: Api<Gateway> = Api::namespaced(member.clone(), OPERATOR_NAMESPACE);
    let name = gateway.metadata.name.clone().unwrap_or_default();
    if api.get_opt(&name).await?.is_none() {
        let mut fresh = gateway.clone();
        fresh.status = GatewayStatus::default();
        match api.create(&PostParams::default(), &fresh).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e),
        }
    }
    let mut body = serde_json::to_value(gateway).unwrap_or_default();
    body["apiVersion"] = json!("submariner.io/v1");
    body["kind"] = json!("Gateway");
    let params = PatchParams::apply(MANAGER).force();
    api.patch(&name, &params, &Patch::Apply(&body)).await?;
    api.patch_status(&name, &params, &Patch::Apply(&body))
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_like_gos() {
        assert_eq!(go_duration(Duration::from_micros(1500)), "1.5ms");
        assert_eq!(go_duration(Duration::from_micros(250)), "250µs");
        assert_eq!(go_duration(Duration::from_millis(2500)), "2.5s");
    }
}
