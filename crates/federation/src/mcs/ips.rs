//! ClusterSetIPs: one per IP family a range is configured for, the lowest
//! free address of the range (its network and broadcast addresses aside).

use std::collections::{HashMap, HashSet};
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

/// The ClusterSetIPs given to imports the informer's cache does not show
/// yet. The cache lags the controller's own writes, and reconciles of
/// different services run at once: without this, two services exported
/// moments apart could both get the lowest free address.
#[derive(Debug, Default)]
pub struct Ledger {
    pending: HashMap<String, Vec<String>>,
}

impl Ledger {
    /// The IPs of the import `key`: [`assign`] against what the cache
    /// shows (`cached`: the import's own IPs; `others`: every other
    /// import's) and what was given but is not shown yet. What it gives
    /// that the cache does not show is remembered until it does. Call it
    /// with the cache read under the same lock as the ledger.
    pub fn assign(
        &mut self,
        key: &str,
        ranges: &[IpNet],
        cached: Option<&[String]>,
        others: impl IntoIterator<Item = IpAddr>,
    ) -> Result<Vec<String>, String> {
        if let (Some(shown), Some(given)) = (cached, self.pending.get(key))
            && given.iter().all(|ip| shown.contains(ip))
        {
            self.pending.remove(key);
        }
        let mut used: HashSet<IpAddr> = others.into_iter().collect();
        // Another import's IPs the cache shows in use need no remembering.
        self.pending.retain(|k, ips| {
            k == key
                || !ips
                    .iter()
                    .filter_map(|s| s.parse::<IpAddr>().ok())
                    .all(|ip| used.contains(&ip))
        });
        let have = self
            .pending
            .get(key)
            .map(Vec::as_slice)
            .or(cached)
            .unwrap_or_default();
        used.extend(
            self.pending
                .iter()
                .filter(|(k, _)| *k != key)
                .flat_map(|(_, ips)| ips.iter().filter_map(|s| s.parse::<IpAddr>().ok())),
        );
        let ips = assign(ranges, have, &used)?;
        if cached == Some(ips.as_slice()) {
            self.pending.remove(key);
        } else {
            self.pending.insert(key.to_string(), ips.clone());
        }
        Ok(ips)
    }

    /// The import `key` is gone: its IPs are free once the cache agrees.
    pub fn forget(&mut self, key: &str) {
        self.pending.remove(key);
    }
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

    #[test]
    fn the_ledger_never_gives_an_ip_twice_while_the_cache_lags() {
        let ranges: Vec<IpNet> = vec!["243.0.0.0/24".parse().unwrap()];
        let mut ledger = Ledger::default();
        // Two imports before the cache shows either: different IPs.
        let a = ledger.assign("shop/a", &ranges, None, []).unwrap();
        let b = ledger.assign("shop/b", &ranges, None, []).unwrap();
        assert_eq!((a[0].as_str(), b[0].as_str()), ("243.0.0.1", "243.0.0.2"));
        // A again, still not shown: it keeps its IP.
        assert_eq!(ledger.assign("shop/a", &ranges, None, []).unwrap(), a);
        // The cache shows a: a keeps it, and it stays taken for others.
        let a_ip: IpAddr = a[0].parse().unwrap();
        assert_eq!(
            ledger.assign("shop/a", &ranges, Some(&a), []).unwrap(),
            a,
            "kept once shown"
        );
        let c = ledger.assign("shop/c", &ranges, None, [a_ip]).unwrap();
        assert_eq!(c, ["243.0.0.3"], "b is still pending");
        // b is withdrawn: its IP is free again.
        ledger.forget("shop/b");
        let d = ledger.assign("shop/d", &ranges, None, [a_ip]).unwrap();
        assert_eq!(d, ["243.0.0.2"]);
    }
}
