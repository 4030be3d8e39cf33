//! The gateway's Prometheus metrics, named and labelled as Submariner's
//! gateway names them (`pkg/cable/metrics.go`), plus the handshakes
//! boringtun counts, which Submariner has no metric for.

use std::net::SocketAddr;
use std::sync::Arc;

use parking_lot::Mutex;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::api::{Connection, EndpointSpec};
use crate::wireguard::PeerStats;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Cable {
    cable_driver: String,
    local_cluster: String,
    local_hostname: String,
    local_endpoint_ip: String,
    remote_cluster: String,
    remote_hostname: String,
    remote_endpoint_ip: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CableStatus {
    #[prometheus(flatten)]
    cable: Cable,
    status: String,
}

pub struct Metrics {
    registry: Mutex<Registry>,
    gateways: Gauge,
    connections: Family<CableStatus, Gauge>,
    latency: Family<Cable, Gauge<f64, std::sync::atomic::AtomicU64>>,
    rx: Family<Cable, Gauge>,
    tx: Family<Cable, Gauge>,
    handshakes: Family<Cable, Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let gateways = Gauge::default();
        let connections = Family::<CableStatus, Gauge>::default();
        let latency = Family::<Cable, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
        let rx = Family::<Cable, Gauge>::default();
        let tx = Family::<Cable, Gauge>::default();
        let handshakes = Family::<Cable, Gauge>::default();
        registry.register(
            "submariner_gateways",
            "Number of active gateways (1 on the active one)",
            gateways.clone(),
        );
        registry.register(
            "submariner_connections",
            "Number of connections and corresponding status",
            connections.clone(),
        );
        registry.register(
            "submariner_connection_latency_seconds",
            "Connection latency in seconds; last RTT, by cable driver and cable",
            latency.clone(),
        );
        registry.register(
            "submariner_gateway_rx_bytes",
            "Count of bytes received (by cable driver and cable)",
            rx.clone(),
        );
        registry.register(
            "submariner_gateway_tx_bytes",
            "Count of bytes transmitted (by cable driver and cable)",
            tx.clone(),
        );
        registry.register(
            "flotilla_gateway_handshakes",
            "WireGuard handshakes completed (by cable driver and cable)",
            handshakes.clone(),
        );
        Metrics {
            registry: Mutex::new(registry),
            gateways,
            connections,
            latency,
            rx,
            tx,
            handshakes,
        }
    }
}

impl Metrics {
    /// Sets every series from the gateway's current state; a cable no
    /// longer there loses its series, as Submariner's do on disconnect.
    pub fn record(
        &self,
        local: &EndpointSpec,
        active: bool,
        connections: &[Connection],
        stats: Vec<(String, PeerStats)>,
    ) {
        self.gateways.set(i64::from(active));
        self.connections.clear();
        self.latency.clear();
        self.rx.clear();
        self.tx.clear();
        self.handshakes.clear();
        for c in connections {
            let cable = Cable {
                cable_driver: local.backend.clone(),
                local_cluster: local.cluster_id.clone(),
                local_hostname: local.hostname.clone(),
                local_endpoint_ip: local.public_ip.clone(),
                remote_cluster: c.endpoint.cluster_id.clone(),
                remote_hostname: c.endpoint.hostname.clone(),
                remote_endpoint_ip: c.endpoint.public_ip.clone(),
            };
            self.connections
                .get_or_create(&CableStatus {
                    cable: cable.clone(),
                    status: c.status.clone(),
                })
                .set(1);
            if let Some((_, s)) = stats
                .iter()
                .find(|(cluster, _)| *cluster == c.endpoint.cluster_id)
            {
                if let Some(rtt) = s.last_rtt {
                    self.latency.get_or_create(&cable).set(rtt.as_secs_f64());
                }
                self.rx.get_or_create(&cable).set(s.rx_bytes as i64);
                self.tx.get_or_create(&cable).set(s.tx_bytes as i64);
                self.handshakes
                    .get_or_create(&cable)
                    .set(s.handshakes as i64);
            }
        }
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry.lock());
        out
    }

    /// Serves `/metrics` on `addr`; returns the bound address.
    pub async fn serve(self: Arc<Self>, addr: SocketAddr) -> std::io::Result<SocketAddr> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let bound = listener.local_addr()?;
        let app = axum::Router::new().route(
            "/metrics",
            axum::routing::get(move || {
                let m = self.clone();
                async move {
                    (
                        [("content-type", "text/plain; version=0.0.4; charset=utf-8")],
                        m.encode(),
                    )
                }
            }),
        );
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(bound)
    }
}
