//! The nodes a member runs, by name. A member starts with `--nodes N`
//! (`NAME-node-0` ..); an infrastructure provider adds and removes nodes
//! afterwards (a Cluster API Machine joining as its node), through the
//! admin endpoint, as a kubelet joins a real cluster. Each node holds a
//! slot: its index picks its pod CIDR block, InternalIP and zone, and a
//! removed node's slot is used again by the next. The roster is kept in
//! the member's data dir, so a restarted member runs the same nodes.

use std::collections::BTreeMap;
use std::path::PathBuf;

use parking_lot::RwLock;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::watch;

use crate::config::SimConfig;

/// What whoever adds a node says about it, beyond the member's defaults.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct NodeSpec {
    /// Labels on top of the member's node labels.
    pub labels: BTreeMap<String, String>,
    /// Taints registered with the node (as the kubelet's
    /// `--register-with-taints`), in the Node API's shape.
    pub taints: Vec<Value>,
    /// `spec.providerID`; the member's own form when absent.
    #[serde(rename = "providerID")]
    pub provider_id: Option<String>,
    /// `status.nodeInfo.kubeletVersion`; the server's when absent.
    pub kubelet_version: Option<String>,
}

/// One node of the roster.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub name: String,
    pub index: usize,
    #[serde(default)]
    pub spec: NodeSpec,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum RosterError {
    #[error("{0:?} is not a valid node name: {1}")]
    InvalidName(String, String),
    #[error("no room for another node: the pod CIDR or the node CIDR is full")]
    Full,
    #[error("this member's nodes are fixed at its start ({0})")]
    Fixed(&'static str),
    #[error("cannot record the nodes in {path}: {message}")]
    Persist { path: String, message: String },
}

/// The member's nodes; shared by the node controller, the kubelet and the
/// admin endpoint.
#[derive(Debug)]
pub struct Roster {
    entries: RwLock<BTreeMap<String, Entry>>,
    file: Option<PathBuf>,
    /// Why nodes cannot change, when they cannot (netns: the node network
    /// is built at start).
    fixed: Option<&'static str>,
    changes: watch::Sender<u64>,
}

impl Roster {
    /// The nodes recorded in `file` when there is one, else `config`'s
    /// `NAME-node-0` .. `NAME-node-{N-1}`.
    pub fn load(config: &SimConfig, file: Option<PathBuf>) -> Roster {
        let recorded: Option<Vec<Entry>> = file
            .as_ref()
            .and_then(|f| std::fs::read(f).ok())
            .and_then(|bytes| serde_json::from_slice(&bytes).ok());
        let entries = match recorded {
            Some(list) => list.into_iter().map(|e| (e.name.clone(), e)).collect(),
            None => (0..config.nodes)
                .map(|i| {
                    let name = config.node_name(i);
                    let entry = Entry {
                        name: name.clone(),
                        index: i,
                        spec: NodeSpec::default(),
                    };
                    (name, entry)
                })
                .collect(),
        };
        Roster {
            entries: RwLock::new(entries),
            file,
            fixed: None,
            changes: watch::channel(0).0,
        }
    }

    /// The same nodes for the member's whole life.
    pub fn fixed(mut self, why: &'static str) -> Roster {
        self.fixed = Some(why);
        self
    }

    pub fn entries(&self) -> Vec<Entry> {
        self.entries.read().values().cloned().collect()
    }

    pub fn len(&self) -> usize {
        self.entries.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.read().is_empty()
    }

    pub fn get(&self, name: &str) -> Option<Entry> {
        self.entries.read().get(name).cloned()
    }

    /// The slot of one of the member's nodes.
    pub fn index(&self, name: &str) -> Option<usize> {
        self.entries.read().get(name).map(|e| e.index)
    }

    /// Changes whenever a node is added, changed or removed.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Adds a node, or gives an existing one `spec`; true when it is new.
    pub fn put(&self, config: &SimConfig, name: &str, spec: NodeSpec) -> Result<bool, RosterError> {
        if let Some(why) = self.fixed {
            return Err(RosterError::Fixed(why));
        }
        let problems = flotilla_core::validation::validate_dns1123_subdomain(name);
        if !problems.is_empty() {
            return Err(RosterError::InvalidName(name.into(), problems.join("; ")));
        }
        let mut entries = self.entries.write();
        let created = match entries.get_mut(name) {
            Some(entry) if entry.spec == spec => return Ok(false),
            Some(entry) => {
                entry.spec = spec;
                false
            }
            None => {
                let taken: std::collections::BTreeSet<usize> =
                    entries.values().map(|e| e.index).collect();
                let index = (0..)
                    .find(|i| !taken.contains(i))
                    .filter(|i| config.node_pod_cidr(*i).is_some() && config.node_ip(*i).is_some())
                    .ok_or(RosterError::Full)?;
                let entry = Entry {
                    name: name.into(),
                    index,
                    spec,
                };
                entries.insert(name.into(), entry);
                true
            }
        };
        self.persist(&entries)?;
        drop(entries);
        self.changes.send_modify(|n| *n += 1);
        Ok(created)
    }

    /// Removes a node; false when it was not one.
    pub fn remove(&self, name: &str) -> Result<bool, RosterError> {
        if let Some(why) = self.fixed {
            return Err(RosterError::Fixed(why));
        }
        let mut entries = self.entries.write();
        if entries.remove(name).is_none() {
            return Ok(false);
        }
        self.persist(&entries)?;
        drop(entries);
        self.changes.send_modify(|n| *n += 1);
        Ok(true)
    }

    /// Writes the roster whole (to a temporary file renamed over the old).
    fn persist(&self, entries: &BTreeMap<String, Entry>) -> Result<(), RosterError> {
        let Some(file) = &self.file else {
            return Ok(());
        };
        let fail = |e: std::io::Error| RosterError::Persist {
            path: file.display().to_string(),
            message: e.to_string(),
        };
        let list: Vec<&Entry> = entries.values().collect();
        let bytes = serde_json::to_vec_pretty(&list).unwrap_or_default();
        let tmp = file.with_extension("json.tmp");
        std::fs::write(&tmp, bytes).map_err(fail)?;
        std::fs::rename(&tmp, file).map_err(fail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> SimConfig {
        SimConfig {
            cluster_name: "m".into(),
            nodes: 2,
            ..SimConfig::default()
        }
    }

    #[test]
    fn starts_with_the_configured_nodes_and_reuses_freed_slots() {
        let c = config();
        let roster = Roster::load(&c, None);
        assert_eq!(roster.index("m-node-1"), Some(1));
        assert!(roster.remove("m-node-0").unwrap());
        assert!(roster.put(&c, "worker-a", NodeSpec::default()).unwrap());
        assert_eq!(roster.index("worker-a"), Some(0));
        assert!(roster.put(&c, "worker-b", NodeSpec::default()).unwrap());
        assert_eq!(roster.index("worker-b"), Some(2));
        assert!(!roster.put(&c, "worker-b", NodeSpec::default()).unwrap());
        assert!(matches!(
            roster.put(&c, "Bad_Name", NodeSpec::default()),
            Err(RosterError::InvalidName(..))
        ));
    }

    #[test]
    fn a_recorded_roster_outlives_the_process() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("nodes.json");
        let c = config();
        let roster = Roster::load(&c, Some(file.clone()));
        roster.put(&c, "cp-0", NodeSpec::default()).unwrap();
        roster.remove("m-node-0").unwrap();
        let again = Roster::load(&c, Some(file));
        assert_eq!(again.index("cp-0"), Some(2));
        assert_eq!(again.index("m-node-0"), None);
        assert_eq!(again.len(), 2);
    }

    #[test]
    fn a_fixed_roster_refuses_changes() {
        let c = config();
        let roster = Roster::load(&c, None).fixed("netns");
        assert_eq!(
            roster.put(&c, "x", NodeSpec::default()),
            Err(RosterError::Fixed("netns"))
        );
    }
}
