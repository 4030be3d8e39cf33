//! Injected faults: what a test of failover turns on and off while the
//! member keeps its state. Controllers read the current set and are woken
//! when it changes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use parking_lot::RwLock;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

/// How an unreachable member behaves toward clients.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Unreachable {
    /// Connections are refused: nothing listens on the API port.
    Refuse,
    /// Connections are accepted and never answered.
    Hang,
}

/// Every fault in force.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FaultSet {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unreachable: Option<Unreachable>,
    /// Nodes whose kubelet reports NotReady.
    #[serde(default)]
    pub not_ready_nodes: BTreeSet<String>,
    /// Pods failing their readiness probe: label selector per namespace.
    #[serde(default)]
    pub unready_pods: BTreeMap<String, Vec<String>>,
}

/// The shared, observable fault set.
#[derive(Clone)]
pub struct Faults {
    state: Arc<RwLock<FaultSet>>,
    changed: watch::Sender<u64>,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            state: Arc::default(),
            changed: watch::channel(0).0,
        }
    }
}

impl Faults {
    pub fn get(&self) -> FaultSet {
        self.state.read().clone()
    }

    /// Changes the set and wakes whoever watches it.
    pub fn update(&self, f: impl FnOnce(&mut FaultSet)) -> FaultSet {
        let next = {
            let mut s = self.state.write();
            f(&mut s);
            s.clone()
        };
        self.changed.send_modify(|v| *v += 1);
        next
    }

    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    pub fn node_not_ready(&self, node: &str) -> bool {
        self.state.read().not_ready_nodes.contains(node)
    }

    /// Whether a pod in `namespace` with `labels` is made to fail readiness.
    pub fn pod_unready(
        &self,
        namespace: &str,
        labels: &serde_json::Map<String, serde_json::Value>,
    ) -> bool {
        let s = self.state.read();
        s.unready_pods.get(namespace).is_some_and(|selectors| {
            selectors.iter().any(|sel| {
                flotilla_core::selector::LabelSelector::parse(sel)
                    .is_ok_and(|parsed| parsed.matches(Some(labels)))
            })
        })
    }
}
