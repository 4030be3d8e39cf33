//! The underlay network fabric tests put gateways on: made for a test,
//! deleted when it ends.

use super::{fleet::stderr, flotilla};

pub struct Underlay(pub String);

impl Underlay {
    pub fn new() -> Underlay {
        let name = format!("flt-ul-{:08x}", rand_u32());
        let out = flotilla(&["underlay", "create", &name, "--cidr", "100.64.0.0/16"]);
        assert!(out.status.success(), "underlay: {}", stderr(&out));
        Underlay(name)
    }

    pub fn cut(&self) {
        let out = flotilla(&["underlay", "cut", &self.0]);
        assert!(out.status.success(), "{}", stderr(&out));
    }

    pub fn restore(&self) {
        let out = flotilla(&["underlay", "restore", &self.0]);
        assert!(out.status.success(), "{}", stderr(&out));
    }
}

impl Drop for Underlay {
    fn drop(&mut self) {
        let _ = flotilla(&["underlay", "delete", &self.0]);
    }
}

/// A number that differs between tests and runs (names of host-wide
/// objects: underlays, markers).
pub fn rand_u32() -> u32 {
    use std::sync::atomic::{AtomicU32, Ordering};
    // Tests of one binary start together, and two read the same clock
    // value often enough to make the same name: a per-process count
    // tells them apart.
    static CALLS: AtomicU32 = AtomicU32::new(0);
    let call = CALLS.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    nanos ^ std::process::id().rotate_left(16) ^ call.wrapping_mul(0x9E37_79B9)
}
