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
/// its cache shows the write, or the object is gone).
pub struct Recent<S> {
    grace: Duration,
    entries: Mutex<HashMap<String, (S, Instant)>>,
}

impl<S: Clone + PartialEq> Recent<S> {
    /// Writes are awaited for at most `grace` once made.
    pub fn new(grace: Duration) -> Self {
        Recent {
            grace,
            entries: Mutex::default(),
        }
    }

    /// `key` was just written as `stamp`.
    pub fn record(&self, key: &str, stamp: S) {
        self.entries
            .lock()
            .insert(key.to_string(), (stamp, Instant::now()));
    }

    pub fn forget(&self, key: &str) {
        self.entries.lock().remove(key);
    }

    /// Whether `key` was last written as `stamp` (however long ago).
    pub fn wrote(&self, key: &str, stamp: &S) -> bool {
        self.entries
            .lock()
            .get(key)
            .is_some_and(|(s, _)| s == stamp)
    }

    /// How much longer to wait for the cache to show `key` written as
    /// `stamp`: `None` when it was not written so, or its grace is over
    /// (then the write itself is taken to be lost).
    pub fn wait(&self, key: &str, stamp: &S) -> Option<Duration> {
        let entries = self.entries.lock();
        let (s, at) = entries.get(key)?;
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
}
