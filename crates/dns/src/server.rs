//! The DNS server: a UDP loop and a TCP listener (length-prefixed
//! messages, several per connection), each query answered from a
//! [`Snapshot`] of the hub's caches.

use std::sync::Arc;
use std::time::Duration;

use flotilla_core::mcs::{MANAGED_BY, MANAGED_BY_LABEL, SERVICE_NAME_LABEL, ServiceImport};
use futures::StreamExt;
use hickory_proto::op::{Message, OpCode, ResponseCode};
use hickory_proto::serialize::binary::{BinDecodable, BinEncodable};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tracing::{debug, warn};

use crate::zone::{self, Snapshot};

/// The hub's ServiceImports and import EndpointSlices, followed.
#[derive(Clone)]
pub struct Caches {
    imports: Store<ServiceImport>,
    slices: Store<EndpointSlice>,
}

impl Caches {
    /// Starts the watches; resolves once both have listed.
    pub async fn follow(hub: Client) -> Result<Caches, watcher::Error> {
        let (imports, iw) = reflector::store();
        let (slices, sw) = reflector::store();
        let i = reflector::reflector(
            iw,
            watcher(
                Api::<ServiceImport>::all(hub.clone()),
                watcher::Config::default(),
            ),
        )
        .default_backoff()
        .for_each(|_| async {});
        let managed =
            watcher::Config::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY}"));
        let s = reflector::reflector(sw, watcher(Api::<EndpointSlice>::all(hub), managed))
            .default_backoff()
            .for_each(|_| async {});
        tokio::spawn(i);
        tokio::spawn(s);
        let caches = Caches { imports, slices };
        let _ = caches.imports.wait_until_ready().await;
        let _ = caches.slices.wait_until_ready().await;
        Ok(caches)
    }

    /// A member's own ServiceImports and import EndpointSlices (any MCS
    /// implementation's: those labelled with an import's name), as
    /// Lighthouse's agent serves them. Returns at once: the MCS CRDs may
    /// not be installed (a member never joined), which reads as no
    /// imports until they are ([`crate::watch`]).
    pub fn follow_optional(client: Client) -> Caches {
        let imports = flotilla_client::follow::follow_optional(
            Api::<ServiceImport>::all(client.clone()),
            watcher::Config::default(),
            || {},
        );
        let slices = flotilla_client::follow::follow_optional(
            Api::<EndpointSlice>::all(client),
            watcher::Config::default().labels(SERVICE_NAME_LABEL),
            || {},
        );
        Caches { imports, slices }
    }

    fn snapshot(&self) -> Snapshot {
        Snapshot {
            imports: self.imports.state(),
            slices: self.slices.state(),
        }
    }
}

/// A zone the server answers from: `clusterset.local` ([`Caches`]) or a
/// cluster's own `cluster.local` ([`crate::cluster::ClusterZone`]).
pub trait Zone: Send + Sync + 'static {
    /// The answer to one question, or `None` when the name is not ours.
    fn answer(
        &self,
        qname: &hickory_proto::rr::Name,
        qtype: hickory_proto::rr::RecordType,
    ) -> Option<zone::Answer>;
}

impl Zone for Caches {
    fn answer(
        &self,
        qname: &hickory_proto::rr::Name,
        qtype: hickory_proto::rr::RecordType,
    ) -> Option<zone::Answer> {
        zone::answer(&self.snapshot(), qname, qtype)
    }
}

/// Several zones served together (a member's `cluster.local` and
/// `clusterset.local`): the first that claims a name answers it.
pub struct Zones(pub Vec<Arc<dyn Zone>>);

impl Zone for Zones {
    fn answer(
        &self,
        qname: &hickory_proto::rr::Name,
        qtype: hickory_proto::rr::RecordType,
    ) -> Option<zone::Answer> {
        self.0.iter().find_map(|z| z.answer(qname, qtype))
    }
}

/// The response to one query message (its bytes), or None when it cannot
/// even be read as one.
pub fn respond(zone: &dyn Zone, query: &[u8]) -> Option<Vec<u8>> {
    let request = match Message::from_bytes(query) {
        Ok(m) => m,
        Err(error) => {
            debug!(%error, "unreadable DNS message");
            // The id is the first two bytes, if there are two.
            let id = u16::from_be_bytes([*query.first()?, *query.get(1)?]);
            return Message::error_msg(id, OpCode::Query, ResponseCode::FormErr)
                .to_bytes()
                .ok();
        }
    };
    let meta = &request.metadata;
    let mut response = Message::response(meta.id, meta.op_code);
    response.metadata.recursion_desired = meta.recursion_desired;
    response.metadata.authoritative = true;
    response.add_queries(request.queries.clone());
    let code = if meta.op_code != OpCode::Query || request.queries.len() != 1 {
        ResponseCode::NotImp
    } else {
        let q = &request.queries[0];
        match zone.answer(q.name(), q.query_type()) {
            Some(a) => {
                response.add_answers(a.records);
                response.authorities.extend(a.authority);
                a.code
            }
            None => {
                response.metadata.authoritative = false;
                ResponseCode::Refused
            }
        }
    };
    response.metadata.response_code = code;
    response.to_bytes().ok()
}

/// Serves UDP queries on `socket` for ever.
pub async fn serve_udp(socket: UdpSocket, zone: Arc<dyn Zone>) {
    let socket = Arc::new(socket);
    let mut buf = vec![0u8; 4096];
    loop {
        let (n, peer) = match socket.recv_from(&mut buf).await {
            Ok(r) => r,
            Err(error) => {
                warn!(%error, "DNS over UDP: receive failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Some(mut out) = respond(zone.as_ref(), &buf[..n]) else {
            continue;
        };
        if out.len() > 512 {
            // Too long for plain UDP: the client retries over TCP.
            if let Ok(m) = Message::from_bytes(&out) {
                out = m.truncate().to_bytes().unwrap_or_default();
            }
        }
        if let Err(error) = socket.send_to(&out, peer).await {
            debug!(%error, %peer, "DNS over UDP: send failed");
        }
    }
}

/// Serves TCP connections on `listener` for ever.
pub async fn serve_tcp(listener: TcpListener, zone: Arc<dyn Zone>) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                tokio::spawn(connection(stream, zone.clone()));
            }
            Err(error) => {
                warn!(%error, "DNS over TCP: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn connection(mut stream: TcpStream, zone: Arc<dyn Zone>) {
    loop {
        let read = async {
            let len = stream.read_u16().await? as usize;
            let mut buf = vec![0u8; len];
            stream.read_exact(&mut buf).await?;
            Ok::<_, std::io::Error>(buf)
        };
        // An idle connection is closed after a while, as servers do.
        let Ok(Ok(query)) = tokio::time::timeout(Duration::from_secs(10), read).await else {
            return;
        };
        let Some(out) = respond(zone.as_ref(), &query) else {
            return;
        };
        let Ok(len) = u16::try_from(out.len()) else {
            return;
        };
        if stream.write_u16(len).await.is_err() || stream.write_all(&out).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::rr::{Name, RecordType};

    /// Claims the names under one domain, answering NXDOMAIN.
    struct Claims(&'static str);

    impl Zone for Claims {
        fn answer(&self, qname: &Name, _: RecordType) -> Option<zone::Answer> {
            Name::from_ascii(self.0)
                .ok()?
                .zone_of(qname)
                .then(|| zone::Answer {
                    code: ResponseCode::NXDomain,
                    records: Vec::new(),
                    authority: Vec::new(),
                })
        }
    }

    #[test]
    fn combined_zones_each_answer_their_own_names() {
        let zones = Zones(vec![
            Arc::new(Claims("cluster.local.")),
            Arc::new(Claims("clusterset.local.")),
        ]);
        let ask = |n: &str| zones.answer(&Name::from_ascii(n).unwrap(), RecordType::A);
        assert!(ask("web.shop.svc.cluster.local.").is_some());
        assert!(ask("web.shop.svc.clusterset.local.").is_some());
        assert!(ask("example.com.").is_none(), "refused: not ours");
    }
}
