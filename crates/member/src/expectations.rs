//! Controller expectations, as upstream's: after creating or deleting pods
//! a controller waits until its cache shows those changes before counting
//! pods again, so a stale cache never makes it create or delete twice.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// After this long, expectations are dropped (a lost event must not stall
/// a controller forever).
const TTL: Duration = Duration::from_secs(30);

#[derive(Default)]
pub struct Expectations {
    pending: Mutex<HashMap<String, Pending>>,
}

struct Pending {
    adds: HashSet<String>,
    deletes: HashSet<String>,
    since: Instant,
}

impl Expectations {
    /// Records that `owner` created `adds` and deleted `deletes`.
    pub fn expect(&self, owner: &str, adds: Vec<String>, deletes: Vec<String>) {
        if adds.is_empty() && deletes.is_empty() {
            return;
        }
        let mut p = self.pending.lock();
        let e = p.entry(owner.to_string()).or_insert_with(|| Pending {
            adds: HashSet::new(),
            deletes: HashSet::new(),
            since: Instant::now(),
        });
        e.adds.extend(adds);
        e.deletes.extend(deletes);
        e.since = Instant::now();
    }

    /// Whether the cache (`exists` answers for it) has caught up with what
    /// `owner` did.
    pub fn satisfied(&self, owner: &str, exists: impl Fn(&str) -> bool) -> bool {
        let mut p = self.pending.lock();
        let Some(e) = p.get_mut(owner) else {
            return true;
        };
        e.adds.retain(|n| !exists(n));
        e.deletes.retain(|n| exists(n));
        if (e.adds.is_empty() && e.deletes.is_empty()) || e.since.elapsed() > TTL {
            p.remove(owner);
            return true;
        }
        false
    }

    pub fn forget(&self, owner: &str) {
        self.pending.lock().remove(owner);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_for_the_cache() {
        let e = Expectations::default();
        e.expect("ns/rs", vec!["a".into()], vec!["b".into()]);
        assert!(!e.satisfied("ns/rs", |n| n == "b"));
        assert!(!e.satisfied("ns/rs", |n| n == "a" || n == "b"));
        assert!(e.satisfied("ns/rs", |n| n == "a"));
        assert!(e.satisfied("other", |_| false));
    }
}
