//! `flotilla-failpoint`: failpoints for tests of recovery, on TiKV's `fail` crate: named places
//! in the commit path, the pipeline's controllers, the gateway and the
//! peering where a test stops a component exactly, set per process with
//! `FLOTILLA_FAILPOINTS="name=actions;..."` (none unless set; an unset
//! point costs one lookup in an empty map).
//!
//! Besides `fail`'s own actions (`sleep(ms)`, `pause`, `panic`, counts such
//! as `2*off->...`), `return(crash)` ends the whole process on the spot, as
//! `kill -9` would: no destructor runs, nothing buffered is flushed, no
//! reply goes out (`std::process::abort`; CI keeps no core files).
//!
//! The points (see docs/architecture.md, "Failpoints"):
//! - `store-before-commit`, `store-after-commit`: the embedded store's
//!   writer, before a group of writes commits, and after it committed
//!   but before any of them is acknowledged;
//! - `execution-after-member-write`: a Work applied to its member, its
//!   status not yet written;
//! - `binding-after-work-write`: one of a binding's Works written, the
//!   next not yet;
//! - `gateway-after-key-made`: a gateway made the cluster's new key pair
//!   and stored it, before publishing its Endpoint with it;
//! - `peering-after-shadowpod-create`: the consumer created a pod's
//!   ShadowPod in the provider, before marking the local pod;
//! - `backup-before-upload`: a backup about to upload its files.
#![forbid(unsafe_code)]

/// Evaluates failpoint `name` (a no-op unless configured).
pub fn hit(name: &str) {
    fail::fail_point!(name, |action: Option<String>| {
        if action.as_deref() == Some("crash") {
            std::process::abort();
        }
    });
}

/// Whether this process was started for tests of recovery
/// (`FLOTILLA_FAILPOINTS` set, even empty): only then do the API servers
/// serve `/debug/failpoints`, where a test or `flotilla chaos` arms a
/// point at run time.
pub fn runtime_control_enabled() -> bool {
    std::env::var_os("FLOTILLA_FAILPOINTS").is_some()
}

/// Arms `name` with `actions` (`fail`'s syntax); the error says why not.
pub fn set(name: &str, actions: &str) -> Result<(), String> {
    fail::cfg(name, actions).map_err(|e| format!("failpoint {name}: {e}"))
}

/// Disarms `name`.
pub fn remove(name: &str) {
    fail::remove(name);
}

/// The armed points and their actions, `name=actions`, by name.
pub fn list() -> Vec<String> {
    let mut all: Vec<String> = fail::list()
        .into_iter()
        .map(|(name, actions)| format!("{name}={actions}"))
        .collect();
    all.sort();
    all
}

/// Configures failpoints from `FLOTILLA_FAILPOINTS` (`name=actions`,
/// separated by `;`); an error names the bad entry.
pub fn configure_from_env() -> Result<(), String> {
    let Ok(all) = std::env::var("FLOTILLA_FAILPOINTS") else {
        return Ok(());
    };
    configure(&all)
}

fn configure(all: &str) -> Result<(), String> {
    for point in all.split(';').filter(|p| !p.trim().is_empty()) {
        let (name, actions) = point
            .split_once('=')
            .ok_or_else(|| format!("FLOTILLA_FAILPOINTS: {point:?} is not name=actions"))?;
        set(name.trim(), actions.trim()).map_err(|e| format!("FLOTILLA_FAILPOINTS: {e}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_entries_are_named() {
        let e = configure("no-equals-sign").unwrap_err();
        assert!(e.contains("\"no-equals-sign\" is not name=actions"), "{e}");
        let e = configure("failpoint-test-bad=bogus(1)").unwrap_err();
        assert!(e.contains("failpoint-test-bad"), "{e}");
    }

    #[test]
    fn a_configured_point_acts_and_an_unset_one_does_not() {
        hit("failpoint-test-unset");
        configure("failpoint-test-sleep=sleep(50)").unwrap();
        let started = std::time::Instant::now();
        hit("failpoint-test-sleep");
        assert!(started.elapsed() >= std::time::Duration::from_millis(50));
        assert!(list().contains(&"failpoint-test-sleep=sleep(50)".to_string()));
        remove("failpoint-test-sleep");
        assert!(!list().iter().any(|p| p.starts_with("failpoint-test-sleep")));
    }
}
