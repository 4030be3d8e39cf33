//! ClusterSetIPs: one per IP family a range is configured for, the lowest
//! free address of the range (its network and broadcast addresses aside).

use std::collections::HashSet;
use std::net::IpAddr;

use ipnet::IpNet;

/// A free address of `range` not in `used`, or None when it is full.
pub fn allocate(range: &IpNet, used: &HashSet<IpAddr>) -> Option<IpAddr> {
    let network = range.network();
    let broadcast = range.broadcast();
    range
        .hosts()
        .find(|ip| *ip != network && *ip != broadcast && !used.contains(ip))
}

/// The ClusterSetIPs an import keeps or gets: those it has in the
/// configured ranges, and for each range without one a free address.
pub fn assign(
    ranges: &[IpNet],
    have: &[String],
    used: &HashSet<IpAddr>,
) -> Result<Vec<String>, String> {
    let mut ips = Vec::new();
    for range in ranges {
        let kept = have
            .iter()
            .filter_map(|s| s.parse::<IpAddr>().ok())
            .find(|ip| range.contains(ip));
        match kept.or_else(|| allocate(range, used)) {
            Some(ip) => ips.push(ip.to_string()),
            None => return Err(format!("the ClusterSetIP range {range} is full")),
        }
    }
    Ok(ips)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lowest_free_per_family_and_kept_once_given() {
        let ranges: Vec<IpNet> = vec![
            "242.0.0.0/30".parse().unwrap(),
            "fd00:242::/120".parse().unwrap(),
        ];
        let mut used = HashSet::new();
        let first = assign(&ranges, &[], &used).unwrap();
        assert_eq!(first, ["242.0.0.1", "fd00:242::1"]);
        used.extend(first.iter().map(|s| s.parse::<IpAddr>().unwrap()));
        assert_eq!(assign(&ranges, &first, &used).unwrap(), first, "kept");
        let second = assign(&ranges, &[], &used).unwrap();
        assert_eq!(second, ["242.0.0.2", "fd00:242::2"]);
        used.extend(second.iter().map(|s| s.parse::<IpAddr>().unwrap()));
        assert_eq!(
            assign(&ranges, &[], &used).unwrap_err(),
            "the ClusterSetIP range 242.0.0.0/30 is full"
        );
    }
}
