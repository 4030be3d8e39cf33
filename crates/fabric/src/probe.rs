//! The health probe gateways exchange inside their tunnels: an IPv4/UDP
//! packet from one gateway's health address to another's, port
//! [`PORT`], carrying a magic, whether it is a reply, and a sequence
//! number. It is answered by the engine and never reaches a TUN device,
//! so it measures the tunnel itself (as Submariner's health checker
//! pings the remote endpoint's `healthCheckIP`).

use std::net::Ipv4Addr;

pub const PORT: u16 = 4800;
const MAGIC: &[u8; 4] = b"FLTP";
const LEN: usize = 20 + 8 + 9;

#[derive(Debug, PartialEq)]
pub struct Probe {
    pub from: Ipv4Addr,
    pub reply: bool,
    pub sequence: u32,
}

/// A probe packet from `from` to `to`.
pub fn build(from: Ipv4Addr, to: Ipv4Addr, sequence: u32, reply: bool) -> Vec<u8> {
    let mut p = vec![0u8; LEN];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(LEN as u16).to_be_bytes());
    p[8] = 64;
    p[9] = 17;
    p[12..16].copy_from_slice(&from.octets());
    p[16..20].copy_from_slice(&to.octets());
    let checksum = ip_checksum(&p[..20]);
    p[10..12].copy_from_slice(&checksum.to_be_bytes());
    p[20..22].copy_from_slice(&PORT.to_be_bytes());
    p[22..24].copy_from_slice(&PORT.to_be_bytes());
    p[24..26].copy_from_slice(&((LEN - 20) as u16).to_be_bytes());
    // A zero UDP checksum means none (RFC 768).
    p[28..32].copy_from_slice(MAGIC);
    p[32] = u8::from(reply);
    p[33..37].copy_from_slice(&sequence.to_be_bytes());
    p
}

/// The probe in `packet` if it is one addressed to `me`.
pub fn parse(packet: &[u8], me: Ipv4Addr) -> Option<Probe> {
    if packet.len() < LEN || packet[0] != 0x45 || packet[9] != 17 {
        return None;
    }
    let to = Ipv4Addr::new(packet[16], packet[17], packet[18], packet[19]);
    let port = u16::from_be_bytes([packet[22], packet[23]]);
    if to != me || port != PORT || &packet[28..32] != MAGIC {
        return None;
    }
    Some(Probe {
        from: Ipv4Addr::new(packet[12], packet[13], packet[14], packet[15]),
        reply: packet[32] == 1,
        sequence: u32::from_be_bytes([packet[33], packet[34], packet[35], packet[36]]),
    })
}

fn ip_checksum(header: &[u8]) -> u16 {
    let mut sum: u32 = header
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_round_trips_and_others_are_not_probes() {
        let a = Ipv4Addr::new(100, 64, 0, 2);
        let b = Ipv4Addr::new(100, 64, 0, 3);
        let p = build(a, b, 7, false);
        assert_eq!(ip_checksum(&p[..20]), 0, "a valid header sums to zero");
        assert_eq!(
            parse(&p, b),
            Some(Probe {
                from: a,
                reply: false,
                sequence: 7
            })
        );
        assert_eq!(parse(&p, a), None, "not addressed to a");
        let mut other = p.clone();
        other[28] = b'X';
        assert_eq!(parse(&other, b), None);
        assert_eq!(parse(&p[..10], b), None);
    }

    #[test]
    fn any_bytes_from_a_tunnel_parse_without_panicking() {
        let me = Ipv4Addr::new(100, 64, 0, 3);
        let good = build(Ipv4Addr::new(100, 64, 0, 2), me, 1, true);
        for _ in 0..20_000 {
            let len = rand::random_range(0..64);
            let mut bytes: Vec<u8> = (0..len).map(|_| rand::random()).collect();
            let _ = parse(&bytes, me);
            // Mutations of a valid probe, too.
            bytes = good.clone();
            let i = rand::random_range(0..bytes.len());
            bytes[i] = rand::random();
            bytes.truncate(rand::random_range(0..=bytes.len()));
            let _ = parse(&bytes, me);
        }
    }
}
