//! The member's cluster DNS, as CoreDNS is in a kubeadm cluster: the
//! `kube-dns` Service in `kube-system` at the service range's tenth
//! address, whose one endpoint is a DNS server this process runs on the
//! member's bridge (UDP and TCP port 53), answering `cluster.local` from
//! the cluster's Services and EndpointSlices (`flotilla_dns::cluster`,
//! the library `flotilla dns` serves `clusterset.local` with). Pods'
//! resolv.conf points at the Service; the proxy's rules carry it.
//!
//! The same server answers `clusterset.local` from the member's own
//! ServiceImports and import EndpointSlices (which the hub's MCS
//! controller writes here), as Submariner Lighthouse's agent does: names
//! of multi-cluster services keep resolving while the hub is down. A
//! member without the MCS CRDs answers no clusterset names (NXDOMAIN for
//! its services) and `cluster.local` as ever.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use flotilla_dns::cluster::ClusterZone;
use flotilla_dns::server;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;

use flotilla_host as host;

const NAMESPACE: &str = "kube-system";
const NAME: &str = "kube-dns";
const MANAGER: &str = "flotilla-netns-runtime";

/// Serves DNS on `address` (in the `netns` namespace) and publishes it
/// as the `kube-dns` Service at `service_ip`.
pub async fn start(
    client: Client,
    netns: &str,
    address: Ipv4Addr,
    service_ip: Ipv4Addr,
) -> Result<(), String> {
    let addr = SocketAddr::from((address, 53));
    let udp = host::in_netns(netns, move || {
        let s = std::net::UdpSocket::bind(addr)?;
        s.set_nonblocking(true)?;
        Ok(s)
    })
    .await
    .map_err(|e| format!("cannot serve cluster DNS on {addr}/udp: {e}"))?;
    let tcp = host::in_netns(netns, move || {
        let l = std::net::TcpListener::bind(addr)?;
        l.set_nonblocking(true)?;
        Ok(l)
    })
    .await
    .map_err(|e| format!("cannot serve cluster DNS on {addr}/tcp: {e}"))?;
    let udp = tokio::net::UdpSocket::from_std(udp).map_err(|e| e.to_string())?;
    let tcp = tokio::net::TcpListener::from_std(tcp).map_err(|e| e.to_string())?;
    // clusterset.local does not wait for its CRDs: cluster.local must work.
    let zone: Arc<dyn server::Zone> = Arc::new(server::Zones(vec![
        Arc::new(ClusterZone::follow(client.clone()).await),
        Arc::new(server::Caches::follow_optional(client.clone())),
    ]));
    tokio::spawn(server::serve_udp(udp, zone.clone()));
    tokio::spawn(server::serve_tcp(tcp, zone));
    publish(client, address, service_ip)
        .await
        .map_err(|e| format!("cannot publish the kube-dns Service: {e}"))
}

async fn publish(
    client: Client,
    address: Ipv4Addr,
    service_ip: Ipv4Addr,
) -> Result<(), kube::Error> {
    let params = PatchParams::apply(MANAGER).force();
    let services: Api<Service> = Api::namespaced(client.clone(), NAMESPACE);
    let service = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": NAME, "labels": {"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS"}},
        "spec": {
            "clusterIP": service_ip.to_string(),
            "ports": [
                {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
            ],
        },
    });
    services
        .patch(NAME, &params, &Patch::Apply(&service))
        .await?;
    let slices: Api<EndpointSlice> = Api::namespaced(client, NAMESPACE);
    let slice = json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": NAME, "labels": {
            "kubernetes.io/service-name": NAME,
            "endpointslice.kubernetes.io/managed-by": "flotilla-netns-runtime",
        }},
        "addressType": "IPv4",
        "ports": [
            {"name": "dns", "port": 53, "protocol": "UDP"},
            {"name": "dns-tcp", "port": 53, "protocol": "TCP"},
        ],
        "endpoints": [{"addresses": [address.to_string()], "conditions": {"ready": true}}],
    });
    slices.patch(NAME, &params, &Patch::Apply(&slice)).await?;
    Ok(())
}
