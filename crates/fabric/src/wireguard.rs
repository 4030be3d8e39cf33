//! WireGuard in userspace: a TUN device carries the cluster's outbound
//! packets, boringtun's `Tunn` (one per remote cluster) seals them, and
//! one UDP socket on the underlay carries the sealed datagrams, as the
//! kernel module would with no module to load.
//!
//! Health is measured inside the tunnels: every second each side sends a
//! probe (an IPv4/UDP packet from its health address to the peer's,
//! [`probe`]) that never reaches a TUN device; the reply gives the RTT
//! Submariner reports as `latencyRTT`, and a peer that stops answering
//! is `connecting` again.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use boringtun::noise::handshake::parse_handshake_anon;
use boringtun::noise::{Packet, Tunn, TunnResult};
use boringtun::x25519::{PublicKey, StaticSecret};
use ipnet::Ipv4Net;
use parking_lot::Mutex;
use tokio::net::UdpSocket;
use tracing::{debug, warn};

use crate::offload::{Batch, Underlay};
use crate::probe;
use tun_rs::{GROTable, IDEAL_BATCH_SIZE, VIRTIO_NET_HDR_LEN};

/// Room for a full-size packet and WireGuard's overhead.
const BUF: usize = 65_535 + 64;
/// Room for one packet of the tunnel's MTU (and more, from a peer whose
/// MTU is larger: the buffers grow).
const PACKET_BUF: usize = 2048;
/// Where a packet for the device starts in its buffer: room for the
/// virtio header the device takes with offloads.
const TUN_OFFSET: usize = VIRTIO_NET_HDR_LEN;
/// A buffer the device's write path may coalesce TCP segments into.
const COALESCED_BUF: usize = 2 * TUN_OFFSET + 65_535;
/// The most datagrams one GRO receive holds.
const MAX_GRO_SEGMENTS: usize = 64;
/// WireGuard's keepalive, so NAT and the peer both see a live session.
const KEEPALIVE_SECS: u16 = 10;
/// How often each session's timers run (handshake retries, rekeys).
const TICK: Duration = Duration::from_millis(250);
/// A peer whose probes went unanswered this long is down.
pub const DEAD_AFTER: Duration = Duration::from_secs(4);

/// A cluster's static key pair, base64 as `wg` prints them.
#[derive(Clone)]
pub struct KeyPair {
    pub private: StaticSecret,
    pub public: PublicKey,
}

impl KeyPair {
    pub fn generate() -> KeyPair {
        let bytes: [u8; 32] = rand::random();
        KeyPair::from_private(bytes)
    }

    pub fn from_private(bytes: [u8; 32]) -> KeyPair {
        let private = StaticSecret::from(bytes);
        let public = PublicKey::from(&private);
        KeyPair { private, public }
    }

    pub fn from_base64(text: &str) -> Option<KeyPair> {
        Some(KeyPair::from_private(decode_key(text)?))
    }

    pub fn private_base64(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(self.private.to_bytes())
    }

    pub fn public_base64(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(self.public.as_bytes())
    }
}

/// A 32-byte key from base64, or None.
pub fn decode_key(text: &str) -> Option<[u8; 32]> {
    base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .ok()?
        .try_into()
        .ok()
}

/// What the gateway wants of one remote cluster.
#[derive(Clone, Debug, PartialEq)]
pub struct PeerConfig {
    pub cluster: String,
    pub public_key: [u8; 32],
    pub endpoint: SocketAddr,
    /// Destinations routed to it, and sources accepted from it.
    pub allowed: Vec<Ipv4Net>,
    /// Where its probes come from and are answered.
    pub health_ip: Ipv4Addr,
}

/// Round-trip times and traffic of one peer.
#[derive(Clone, Debug, Default)]
pub struct PeerStats {
    pub last_rtt: Option<Duration>,
    pub min_rtt: Option<Duration>,
    pub max_rtt: Option<Duration>,
    rtt_sum: Duration,
    rtt_squares: f64,
    pub rtt_count: u32,
    /// When a probe was last answered.
    pub last_reply: Option<Instant>,
    pub handshakes: u64,
    pub tx_bytes: u64,
    pub rx_bytes: u64,
    /// Why the last handshake or packet failed, if it did.
    pub last_error: Option<String>,
}

impl PeerStats {
    fn record(&mut self, rtt: Duration) {
        self.last_rtt = Some(rtt);
        self.min_rtt = Some(self.min_rtt.map_or(rtt, |m| m.min(rtt)));
        self.max_rtt = Some(self.max_rtt.map_or(rtt, |m| m.max(rtt)));
        self.rtt_sum += rtt;
        self.rtt_squares += rtt.as_secs_f64().powi(2);
        self.rtt_count += 1;
        self.last_reply = Some(Instant::now());
    }

    pub fn mean_rtt(&self) -> Option<Duration> {
        (self.rtt_count > 0).then(|| self.rtt_sum / self.rtt_count)
    }

    pub fn std_dev(&self) -> Option<Duration> {
        let n = f64::from(self.rtt_count);
        let mean = self.mean_rtt()?.as_secs_f64();
        let var = (self.rtt_squares / n - mean * mean).max(0.0);
        Some(Duration::from_secs_f64(var.sqrt()))
    }

    /// Answered recently.
    pub fn alive(&self) -> bool {
        self.last_reply.is_some_and(|t| t.elapsed() < DEAD_AFTER)
    }
}

struct Peer {
    config: PeerConfig,
    tunn: Tunn,
    /// Where it was last heard from (WireGuard roaming).
    addr: SocketAddr,
    stats: PeerStats,
    /// Probes in flight: sequence number → when sent.
    probes: HashMap<u32, Instant>,
    /// When the last probe went (a new peer is probed at the next tick).
    last_probe: Option<Instant>,
}

#[derive(Default)]
struct Peers {
    by_index: HashMap<u32, Peer>,
    by_key: HashMap<[u8; 32], u32>,
    next_index: u32,
}

impl Peers {
    fn route(&self, dst: Ipv4Addr) -> Option<u32> {
        // Longest prefix wins; a handful of peers needs no trie.
        self.by_index
            .iter()
            .flat_map(|(i, p)| p.config.allowed.iter().map(move |n| (i, n)))
            .filter(|(_, n)| n.contains(&dst))
            .max_by_key(|(_, n)| n.prefix_len())
            .map(|(i, _)| *i)
            .or_else(|| {
                self.by_index
                    .iter()
                    .find(|(_, p)| p.config.health_ip == dst)
                    .map(|(i, _)| *i)
            })
    }
}

/// The tunnels of one gateway.
pub struct Engine {
    keys: KeyPair,
    health_ip: Ipv4Addr,
    tun: tun_rs::AsyncDevice,
    udp: Underlay,
    peers: Mutex<Peers>,
    sequence: std::sync::atomic::AtomicU32,
    /// Woken when a peer first answers (the gateway reports at once).
    changed: Arc<tokio::sync::Notify>,
}

impl Engine {
    /// Runs the tunnels over `tun` and `udp` until the returned handle
    /// is dropped.
    pub fn start(
        keys: KeyPair,
        health_ip: Ipv4Addr,
        tun: tun_rs::AsyncDevice,
        udp: UdpSocket,
        changed: Arc<tokio::sync::Notify>,
    ) -> (Arc<Engine>, EngineTasks) {
        let engine = Arc::new(Engine {
            keys,
            health_ip,
            tun,
            udp: Underlay::new(udp),
            peers: Mutex::new(Peers::default()),
            sequence: Default::default(),
            changed,
        });
        let tasks = vec![
            tokio::spawn(engine.clone().outbound()),
            tokio::spawn(engine.clone().inbound()),
            tokio::spawn(engine.clone().timers()),
        ];
        (engine, EngineTasks(tasks))
    }

    /// Makes the peers exactly `want`: new ones added, changed ones
    /// (key, endpoint, subnets) replaced, missing ones removed.
    pub fn set_peers(&self, want: &[PeerConfig]) {
        let mut peers = self.peers.lock();
        let keep: Vec<u32> = peers
            .by_index
            .iter()
            .filter(|(_, p)| {
                want.iter()
                    .any(|w| w.public_key == p.config.public_key && w.cluster == p.config.cluster)
            })
            .map(|(i, _)| *i)
            .collect();
        peers.by_index.retain(|i, _| keep.contains(i));
        peers.by_key.retain(|_, i| keep.contains(i));
        for w in want {
            if let Some(i) = peers.by_key.get(&w.public_key).copied()
                && let Some(p) = peers.by_index.get_mut(&i)
            {
                if p.config.endpoint != w.endpoint {
                    p.addr = w.endpoint;
                }
                p.config = w.clone();
                continue;
            }
            peers.next_index = (peers.next_index + 1) & 0x00ff_ffff;
            let index = peers.next_index;
            let tunn = Tunn::new(
                self.keys.private.clone(),
                PublicKey::from(w.public_key),
                None,
                Some(KEEPALIVE_SECS),
                index,
                None,
            );
            peers.by_key.insert(w.public_key, index);
            peers.by_index.insert(
                index,
                Peer {
                    config: w.clone(),
                    tunn,
                    addr: w.endpoint,
                    stats: PeerStats::default(),
                    probes: HashMap::new(),
                    last_probe: None,
                },
            );
        }
    }

    /// Each peer's cluster and stats.
    pub fn stats(&self) -> Vec<(String, PeerStats)> {
        let peers = self.peers.lock();
        peers
            .by_index
            .values()
            .map(|p| {
                let mut stats = p.stats.clone();
                let (_, tx, rx, _, _) = p.tunn.stats();
                stats.tx_bytes = tx as u64;
                stats.rx_bytes = rx as u64;
                (p.config.cluster.clone(), stats)
            })
            .collect()
    }

    /// TUN → peers. With offloads a read is a whole TCP send of up to
    /// 64 KiB, split here into tunnel-MTU packets; each is sealed, and the
    /// sealed datagrams to one peer leave in one GSO send.
    async fn outbound(self: Arc<Self>) {
        let mut original = vec![0u8; VIRTIO_NET_HDR_LEN + 65_535];
        let mut packets = vec![vec![0u8; PACKET_BUF]; IDEAL_BATCH_SIZE];
        let mut sizes = vec![0usize; IDEAL_BATCH_SIZE];
        let mut sealed = vec![0u8; BUF];
        let mut batch = Batch::default();
        loop {
            let n = match self
                .tun
                .recv_multiple(&mut original, &mut packets, &mut sizes, 0)
                .await
            {
                Ok(n) => n,
                // A packet the offload code cannot split is dropped.
                Err(error) if error.raw_os_error().is_none() => {
                    debug!(%error, "dropped a packet from the tunnel device");
                    continue;
                }
                Err(error) => {
                    warn!(%error, "the tunnel device failed; the gateway stops forwarding");
                    return;
                }
            };
            // Full batches (a read for several peers) wait for the lock's
            // release to be sent.
            let mut full = Vec::new();
            {
                let mut peers = self.peers.lock();
                for (packet, size) in packets.iter().zip(&sizes).take(n) {
                    let Some((datagram, to)) = seal(&mut peers, &packet[..*size], &mut sealed)
                    else {
                        continue;
                    };
                    if !batch.push(datagram, to) {
                        full.push(std::mem::take(&mut batch));
                        batch.push(datagram, to);
                    }
                }
            }
            for mut b in full {
                let _ = self.udp.flush(&mut b).await;
            }
            let _ = self.udp.flush(&mut batch).await;
        }
    }

    /// Underlay → TUN (or the prober). A receive holds one datagram or,
    /// with GRO, a run of them from one sender; what they carry is written
    /// to the device as a batch, TCP segments coalesced again.
    async fn inbound(self: Arc<Self>) {
        let mut datagrams = vec![0u8; BUF];
        // Room to coalesce a whole 64 KiB into any of them (the device
        // code will not grow a buffer); pages untouched stay unallocated.
        let mut packets: Vec<Vec<u8>> = (0..2 * MAX_GRO_SEGMENTS)
            .map(|_| Vec::with_capacity(COALESCED_BUF))
            .collect();
        let mut gro = GROTable::default();
        let mut replies = Vec::new();
        let mut scratch = vec![0u8; BUF];
        loop {
            let mut received = match self.udp.recv(&mut datagrams).await {
                Ok(r) => r,
                Err(error) => {
                    warn!(%error, "the underlay socket failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let mut ready = 0;
            loop {
                {
                    let mut peers = self.peers.lock();
                    let from = received.from;
                    let peers = &mut *peers;
                    for d in datagrams[..received.len].chunks(received.segment) {
                        if ready == packets.len() {
                            packets.push(Vec::with_capacity(COALESCED_BUF));
                        }
                        let packet = &mut packets[ready];
                        packet.clear();
                        packet.resize(TUN_OFFSET + d.len(), 0);
                        let delivered = self.open(
                            peers,
                            d,
                            from,
                            &mut packet[TUN_OFFSET..],
                            &mut scratch,
                            &mut replies,
                        );
                        if let Some(len) = delivered {
                            packet.truncate(TUN_OFFSET + len);
                            ready += 1;
                        }
                    }
                }
                for (d, to) in replies.drain(..) {
                    let _ = self.udp.send_to(&d, to).await;
                }
                // Another receive only while a whole one surely fits.
                if ready + MAX_GRO_SEGMENTS > packets.len() {
                    break;
                }
                match self.udp.try_recv(&mut datagrams) {
                    Ok(r) => received = r,
                    Err(_) => break,
                }
            }
            if ready > 0
                && let Err(error) = self
                    .tun
                    .send_multiple(&mut gro, &mut packets[..ready], TUN_OFFSET)
                    .await
            {
                debug!(%error, "the tunnel device refused a packet");
            }
        }
    }

    /// One datagram from `from`: returns the length of the packet it
    /// carried for the device, written at the start of `deliver`; what
    /// goes back to the network is added to `replies`.
    fn open(
        &self,
        peers: &mut Peers,
        datagram: &[u8],
        from: SocketAddr,
        deliver: &mut [u8],
        scratch: &mut [u8],
        replies: &mut Vec<(Vec<u8>, SocketAddr)>,
    ) -> Option<usize> {
        let parsed = Tunn::parse_incoming_packet(datagram);
        let is_handshake = matches!(
            parsed,
            Ok(Packet::HandshakeInit(_) | Packet::HandshakeResponse(_))
        );
        let index = match parsed {
            Ok(Packet::HandshakeInit(init)) => {
                match parse_handshake_anon(&self.keys.private, &self.keys.public, &init) {
                    Ok(half) => peers.by_key.get(&half.peer_static_public).copied(),
                    Err(e) => {
                        debug!(error = ?e, %from, "a handshake with an unknown key");
                        None
                    }
                }
            }
            Ok(Packet::HandshakeResponse(p)) => Some(p.receiver_idx >> 8),
            Ok(Packet::PacketCookieReply(p)) => Some(p.receiver_idx >> 8),
            Ok(Packet::PacketData(p)) => Some(p.receiver_idx >> 8),
            Err(_) => None,
        };
        let peer = index.and_then(|i| peers.by_index.get_mut(&i))?;
        let mut delivered = None;
        let mut probe_reply = None;
        match peer.tunn.decapsulate(Some(from.ip()), datagram, deliver) {
            TunnResult::WriteToNetwork(d) => {
                replies.push((d.to_vec(), from));
                // Packets queued behind the handshake go out now.
                while let TunnResult::WriteToNetwork(d) = peer.tunn.decapsulate(None, &[], scratch)
                {
                    replies.push((d.to_vec(), from));
                }
            }
            TunnResult::WriteToTunnelV4(packet, src) => {
                if let Some(p) = probe::parse(packet, self.health_ip) {
                    if p.reply {
                        if let Some(sent) = peer.probes.remove(&p.sequence) {
                            let was_alive = peer.stats.alive();
                            peer.stats.record(sent.elapsed());
                            if !was_alive {
                                self.changed.notify_one();
                            }
                        }
                    } else {
                        probe_reply = Some(probe::build(self.health_ip, p.from, p.sequence, true));
                    }
                } else if peer.config.allowed.iter().any(|n| n.contains(&src)) {
                    delivered = Some(packet.len());
                } else {
                    debug!(%src, cluster = %peer.config.cluster, "dropped: source not routed to that cluster");
                }
            }
            TunnResult::Err(e) => {
                peer.stats.last_error = Some(format!("{e:?}"));
                debug!(error = ?e, cluster = %peer.config.cluster, %from, "cannot open a datagram");
                return None;
            }
            _ => {}
        }
        if is_handshake {
            peer.stats.handshakes += 1;
            peer.stats.last_error = None;
        }
        // The peer roamed (a gateway failed over): answer where it is.
        peer.addr = from;
        if let Some(reply) = probe_reply
            && let TunnResult::WriteToNetwork(d) = peer.tunn.encapsulate(&reply, scratch)
        {
            replies.push((d.to_vec(), from));
        }
        delivered
    }

    /// Session timers, and a probe per peer every second (a new peer's
    /// first at the next tick).
    async fn timers(self: Arc<Self>) {
        let mut buf = vec![0u8; BUF];
        loop {
            tokio::time::sleep(TICK).await;
            let mut sends = Vec::new();
            {
                let mut peers = self.peers.lock();
                for peer in peers.by_index.values_mut() {
                    match peer.tunn.update_timers(&mut buf) {
                        TunnResult::WriteToNetwork(d) => sends.push((d.to_vec(), peer.addr)),
                        TunnResult::Err(e) => peer.stats.last_error = Some(format!("{e:?}")),
                        _ => {}
                    }
                    let probing = peer
                        .last_probe
                        .is_none_or(|t| t.elapsed() >= Duration::from_secs(1));
                    if probing {
                        peer.last_probe = Some(Instant::now());
                        let sequence = self
                            .sequence
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        peer.probes.retain(|_, t| t.elapsed() < DEAD_AFTER);
                        peer.probes.insert(sequence, Instant::now());
                        let p =
                            probe::build(self.health_ip, peer.config.health_ip, sequence, false);
                        if let TunnResult::WriteToNetwork(d) = peer.tunn.encapsulate(&p, &mut buf) {
                            sends.push((d.to_vec(), peer.addr));
                        }
                    }
                }
            }
            for (d, addr) in sends {
                let _ = self.udp.send_to(&d, addr).await;
            }
        }
    }
}

/// Seals one packet from the device for the peer its destination is
/// routed to: the datagram and where it goes.
fn seal<'a>(
    peers: &mut Peers,
    packet: &[u8],
    sealed: &'a mut [u8],
) -> Option<(&'a [u8], SocketAddr)> {
    let Some(IpAddr::V4(dst)) = Tunn::dst_address(packet) else {
        return None;
    };
    let index = peers.route(dst)?;
    let peer = peers.by_index.get_mut(&index)?;
    match peer.tunn.encapsulate(packet, sealed) {
        TunnResult::WriteToNetwork(out) => Some((out, peer.addr)),
        TunnResult::Err(e) => {
            debug!(error = ?e, cluster = %peer.config.cluster, "cannot seal a packet");
            None
        }
        _ => None,
    }
}

/// The engine's tasks: dropping this stops the tunnels.
pub struct EngineTasks(Vec<tokio::task::JoinHandle<()>>);

impl Drop for EngineTasks {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_through_base64() {
        let k = KeyPair::generate();
        let again = KeyPair::from_base64(&k.private_base64()).unwrap();
        assert_eq!(again.public_base64(), k.public_base64());
        assert!(decode_key("not base64").is_none());
        assert!(decode_key("AAAA").is_none());
    }

    #[test]
    fn rtt_statistics() {
        let mut s = PeerStats::default();
        s.record(Duration::from_millis(2));
        s.record(Duration::from_millis(4));
        assert_eq!(s.min_rtt, Some(Duration::from_millis(2)));
        assert_eq!(s.max_rtt, Some(Duration::from_millis(4)));
        assert_eq!(s.mean_rtt(), Some(Duration::from_millis(3)));
        let sd = s.std_dev().unwrap().as_secs_f64();
        assert!((sd - 0.001).abs() < 1e-6, "{sd}");
        assert!(s.alive());
    }
}
