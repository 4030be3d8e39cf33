//! What a controller wrote a moment ago that its cache may not show yet.
//!
//! A controller decides from its watch cache; its own write reaches that
//! cache a little later. In that gap the next event of the same object
//! (often the controller's own write of something else) finds the cache
//! without the write and makes it again: a create answered 409, or a
//! second identical update. Remembering each write for a grace period lets
//! the controller wait for its cache instead.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Writes remembered by key, each with a stamp of what was written (a
/// generation, a digest) and when, until the caller forgets them (once
/// its cache shows the write, or the object is gone) or, if they expire,
/// some time after their grace.
pub struct Recent<S> {
    grace: Duration,
    expiring: bool,
    entries: Mutex<Entries<S>>,
}

struct Entries<S> {
    by_key: HashMap<String, (S, Instant)>,
    /// The size at which expired entries are next dropped: twice what
    /// was left the last time, so that dropping costs little per record.
    prune_at: usize,
}

const FIRST_PRUNE_AT: usize = 1024;

impl<S: Clone + PartialEq> Recent<S> {
    /// Writes are awaited for at most `grace` once made, and remembered
    /// until forgotten.
    pub fn new(grace: Duration) -> Self {
        Self::with(grace, false)
    }

    /// As [`Recent::new`], with writes past their grace dropped as more
    /// are recorded: for a caller that only waits on them, and may never
    /// come back to forget one (its object gone meanwhile).
    pub fn expiring(grace: Duration) -> Self {
        Self::with(grace, true)
    }

    fn with(grace: Duration, expiring: bool) -> Self {
        Recent {
            grace,
            expiring,
            entries: Mutex::new(Entries {
                by_key: HashMap::new(),
                prune_at: FIRST_PRUNE_AT,
            }),
        }
    }

    /// `key` was just written as `stamp`.
    pub fn record(&self, key: &str, stamp: S) {
        let mut entries = self.entries.lock();
        if self.expiring && entries.by_key.len() >= entries.prune_at {
            let grace = self.grace;
            entries.by_key.retain(|_, (_, at)| at.elapsed() < grace);
            entries.prune_at = (entries.by_key.len() * 2).max(FIRST_PRUNE_AT);
        }
        entries
            .by_key
            .insert(key.to_string(), (stamp, Instant::now()));
    }

    pub fn forget(&self, key: &str) {
        self.entries.lock().by_key.remove(key);
    }

    /// Whether `key` was last written as `stamp` (however long ago).
    pub fn wrote(&self, key: &str, stamp: &S) -> bool {
        self.entries
            .lock()
            .by_key
            .get(key)
            .is_some_and(|(s, _)| s == stamp)
    }

    /// How much longer to wait for the cache to show `key` written as
    /// `stamp`: `None` when it was not written so, or its grace is over
    /// (then the write itself is taken to be lost).
    pub fn wait(&self, key: &str, stamp: &S) -> Option<Duration> {
        let entries = self.entries.lock();
        let (s, at) = entries.by_key.get(key)?;
        (s == stamp)
            .then(|| self.grace.checked_sub(at.elapsed()))
            .flatten()
            .filter(|left| !left.is_zero())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_is_awaited_for_its_grace_and_only_as_written() {
        let recent = Recent::new(Duration::from_secs(60));
        assert_eq!(recent.wait("a", &1), None);
        recent.record("a", 1);
        assert!(
            recent
                .wait("a", &1)
                .is_some_and(|d| d <= Duration::from_secs(60))
        );
        assert!(recent.wrote("a", &1));
        assert_eq!(recent.wait("a", &2), None, "another stamp is another write");
        recent.forget("a");
        assert!(!recent.wrote("a", &1));

        let over = Recent::new(Duration::ZERO);
        over.record("a", 1);
        assert!(over.wrote("a", &1));
        assert_eq!(over.wait("a", &1), None, "grace over");
    }

    #[test]
    fn expiring_writes_go_once_many_are_held_and_kept_ones_stay() {
        let expiring = Recent::expiring(Duration::ZERO);
        let kept = Recent::new(Duration::ZERO);
        for i in 0..FIRST_PRUNE_AT * 3 {
            expiring.record(&i.to_string(), ());
            kept.record(&i.to_string(), ());
        }
        assert!(expiring.entries.lock().by_key.len() <= FIRST_PRUNE_AT);
        assert!(kept.wrote("0", &()), "kept until forgotten");
    }
}
