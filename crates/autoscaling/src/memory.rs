//! What a controller remembers of its autoscalers between syncs, by
//! `namespace/name`, as upstream's controllers keep it in memory: when
//! each was last synced (its own status writes wake it, and it syncs at
//! most once a period unless its spec changed) and its [`History`].

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscalerSpec;

use crate::{Decision, Failure, History, PodSample, PodUsage, SYNC_PERIOD};

#[derive(Default)]
pub struct Memory {
    synced: Mutex<HashMap<String, (Instant, Option<i64>)>>,
    histories: Mutex<HashMap<String, History>>,
}

/// A poisoned lock still holds what was remembered.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Memory {
    /// Whether `key` at `generation` is due a sync: `None` if so (and it
    /// is recorded as synced now), else how long until it is.
    pub fn wait(&self, key: &str, generation: Option<i64>) -> Option<Duration> {
        let mut synced = lock(&self.synced);
        let now = Instant::now();
        if let Some((at, g)) = synced.get(key)
            && *g == generation
            && now.duration_since(*at) < SYNC_PERIOD
        {
            return Some(SYNC_PERIOD - now.duration_since(*at));
        }
        synced.insert(key.to_string(), (now, generation));
        None
    }

    /// How many autoscalers are remembered.
    pub fn len(&self) -> usize {
        lock(&self.synced).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets the autoscalers not in `live` (deleted ones).
    pub fn retain(&self, live: &HashSet<String>) {
        lock(&self.synced).retain(|k, _| live.contains(k));
        lock(&self.histories).retain(|k, _| live.contains(k));
    }

    /// [`crate::decide`] with `key`'s history (started at `current` for
    /// an autoscaler seen the first time).
    pub fn decide(
        &self,
        key: &str,
        spec: &HorizontalPodAutoscalerSpec,
        current: i32,
        observed: &Result<(Vec<PodSample>, PodUsage), Failure>,
        calibration: f64,
    ) -> Decision {
        let now = Instant::now();
        let mut histories = lock(&self.histories);
        let history = histories
            .entry(key.to_string())
            .or_insert_with(|| History::starting_at(current, now));
        let observed = observed
            .as_ref()
            .map(|(p, u)| (p.as_slice(), u))
            .map_err(Clone::clone);
        crate::decide(spec, current, observed, calibration, history, now)
    }

    /// Records that `key`'s target was scaled from `current` to `desired`
    /// (for the rate policies).
    pub fn scaled(&self, key: &str, current: i32, desired: i32) {
        let now = Instant::now();
        lock(&self.histories)
            .entry(key.to_string())
            .or_insert_with(|| History::starting_at(current, now))
            .scaled(now, desired.saturating_sub(current));
    }
}
