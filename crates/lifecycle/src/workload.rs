//! Clients of the workload clusters, made from their `<cluster>-kubeconfig`
//! Secrets as Cluster API's controllers make theirs: the only way the
//! controllers reach a provisioned cluster. Each cluster's Nodes are
//! watched once (as upstream's ClusterCache does) and every controller
//! reads them from there; a change wakes the controllers that asked.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::api::ListParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use parking_lot::{Mutex, RwLock};
use tokio::sync::broadcast;
use tracing::debug;

use crate::error::Error;

/// The kubeconfig Secret of a cluster.
pub fn kubeconfig_secret(cluster: &str) -> String {
    format!("{cluster}-kubeconfig")
}

/// The admin kubeconfig of a cluster, from its Secret; None while it is
/// not there.
pub async fn kubeconfig(
    hub: &Client,
    namespace: &str,
    cluster: &str,
) -> Result<Option<(String, String)>, Error> {
    let secrets: Api<Secret> = Api::namespaced(hub.clone(), namespace);
    let Some(secret) = secrets.get_opt(&kubeconfig_secret(cluster)).await? else {
        return Ok(None);
    };
    let version = secret.metadata.resource_version.clone().unwrap_or_default();
    let value = secret
        .data
        .as_ref()
        .and_then(|d| d.get("value"))
        .map(|v| String::from_utf8_lossy(&v.0).into_owned());
    Ok(value.map(|v| (v, version)))
}

/// A client of a cluster from a kubeconfig's text.
pub async fn client_from(kubeconfig: &str) -> Result<Client, Error> {
    let parsed = Kubeconfig::from_yaml(kubeconfig)
        .map_err(|e| Error::Provider(format!("the kubeconfig Secret is not a kubeconfig: {e}")))?;
    let mut config = kube::Config::from_custom_kubeconfig(parsed, &KubeConfigOptions::default())
        .await
        .map_err(|e| Error::Provider(format!("the kubeconfig Secret cannot be used: {e}")))?;
    config.connect_timeout = Some(Duration::from_secs(5));
    config.read_timeout = Some(Duration::from_secs(15));
    Ok(Client::try_from(config)?)
}

/// A Node of a workload cluster changed (or its Nodes were listed anew:
/// `node` None).
#[derive(Clone, Debug)]
pub struct NodeChange {
    pub namespace: String,
    pub cluster: String,
    pub node: Option<String>,
}

/// A workload cluster's Nodes as one watch keeps them; `synced` while the
/// watch holds a complete, current list (not after it failed, until it
/// lists again).
#[derive(Default)]
struct NodeCache {
    nodes: BTreeMap<String, Node>,
    synced: bool,
}

struct NodeWatch {
    version: String,
    cache: Arc<RwLock<NodeCache>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for NodeWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The workload clusters' clients, made once per kubeconfig version, and
/// their Nodes, watched once per cluster for every controller here.
pub struct Workloads {
    hub: Client,
    clients: Mutex<HashMap<String, (String, Client)>>,
    watches: Mutex<HashMap<String, NodeWatch>>,
    changes: broadcast::Sender<NodeChange>,
}

impl Workloads {
    pub fn new(hub: Client) -> Workloads {
        Workloads {
            hub,
            clients: Mutex::default(),
            watches: Mutex::default(),
            changes: broadcast::channel(256).0,
        }
    }

    /// The client of `namespace/cluster`; None while its kubeconfig
    /// Secret does not exist.
    pub async fn client(&self, namespace: &str, cluster: &str) -> Result<Option<Client>, Error> {
        Ok(self
            .versioned_client(namespace, cluster)
            .await?
            .map(|(_, c)| c))
    }

    async fn versioned_client(
        &self,
        namespace: &str,
        cluster: &str,
    ) -> Result<Option<(String, Client)>, Error> {
        let Some((text, version)) = kubeconfig(&self.hub, namespace, cluster).await? else {
            return Ok(None);
        };
        let key = format!("{namespace}/{cluster}");
        if let Some((v, c)) = self.clients.lock().get(&key)
            && *v == version
        {
            return Ok(Some((version, c.clone())));
        }
        let client = client_from(&text).await?;
        self.clients
            .lock()
            .insert(key, (version.clone(), client.clone()));
        Ok(Some((version, client)))
    }

    /// Node changes in every workload cluster watched.
    pub fn subscribe(&self) -> broadcast::Receiver<NodeChange> {
        self.changes.subscribe()
    }

    /// The Nodes of `namespace/cluster`, from its watch (started on first
    /// use), or from a list while the watch is not in step; None while
    /// its kubeconfig Secret does not exist or its API does not answer.
    pub async fn nodes(&self, namespace: &str, cluster: &str) -> Result<Option<Vec<Node>>, Error> {
        let Some((version, client)) = self.versioned_client(namespace, cluster).await? else {
            return Ok(None);
        };
        let cache = self.watch(namespace, cluster, &version, &client);
        {
            let cache = cache.read();
            if cache.synced {
                return Ok(Some(cache.nodes.values().cloned().collect()));
            }
        }
        let nodes: Api<Node> = Api::all(client);
        match nodes.list(&ListParams::default()).await {
            Ok(list) => Ok(Some(list.items)),
            // Not answering (starting, or its member is gone).
            Err(_) => Ok(None),
        }
    }

    /// The cache of a cluster's Nodes, its watch started for `version` of
    /// its kubeconfig.
    fn watch(
        &self,
        namespace: &str,
        cluster: &str,
        version: &str,
        client: &Client,
    ) -> Arc<RwLock<NodeCache>> {
        let key = format!("{namespace}/{cluster}");
        let mut watches = self.watches.lock();
        if let Some(w) = watches.get(&key)
            && w.version == version
            && !w.task.is_finished()
        {
            return w.cache.clone();
        }
        let cache: Arc<RwLock<NodeCache>> = Arc::default();
        let task = tokio::spawn(keep_nodes(
            Api::all(client.clone()),
            cache.clone(),
            self.changes.clone(),
            (namespace.to_string(), cluster.to_string()),
        ));
        watches.insert(
            key,
            NodeWatch {
                version: version.to_string(),
                cache: cache.clone(),
                task,
            },
        );
        cache
    }

    /// Forgets a cluster's client and stops watching its Nodes (it is
    /// being deleted).
    pub fn forget(&self, namespace: &str, cluster: &str) {
        let key = format!("{namespace}/{cluster}");
        self.clients.lock().remove(&key);
        self.watches.lock().remove(&key);
    }
}

/// How long a watch fails before it gives up (its cluster is gone, or
/// going); the next look at the cluster's Nodes starts another.
const GIVE_UP_AFTER: Duration = Duration::from_secs(120);

/// Keeps `cache` as the watch of `nodes` says, telling `changes`.
async fn keep_nodes(
    nodes: Api<Node>,
    cache: Arc<RwLock<NodeCache>>,
    changes: broadcast::Sender<NodeChange>,
    (namespace, cluster): (String, String),
) {
    let tell = |node: Option<String>| {
        // Nobody listening is fine.
        let _ = changes.send(NodeChange {
            namespace: namespace.clone(),
            cluster: cluster.clone(),
            node,
        });
    };
    let mut listing = BTreeMap::new();
    let mut failing_since: Option<std::time::Instant> = None;
    let events = watcher(nodes, watcher::Config::default()).default_backoff();
    let mut events = std::pin::pin!(events);
    while let Some(event) = events.next().await {
        let name = |n: &Node| n.metadata.name.clone().unwrap_or_default();
        if event.is_ok() {
            failing_since = None;
        }
        match event {
            Ok(watcher::Event::Init) => listing.clear(),
            Ok(watcher::Event::InitApply(n)) => {
                listing.insert(name(&n), n);
            }
            Ok(watcher::Event::InitDone) => {
                let mut c = cache.write();
                c.nodes = std::mem::take(&mut listing);
                c.synced = true;
                drop(c);
                tell(None);
            }
            Ok(watcher::Event::Apply(n)) => {
                let node = name(&n);
                cache.write().nodes.insert(node.clone(), n);
                tell(Some(node));
            }
            Ok(watcher::Event::Delete(n)) => {
                let node = name(&n);
                cache.write().nodes.remove(&node);
                tell(Some(node));
            }
            Err(error) => {
                debug!(%error, %namespace, %cluster, "the workload cluster's node watch failed; listing again");
                cache.write().synced = false;
                let since = *failing_since.get_or_insert_with(std::time::Instant::now);
                if since.elapsed() > GIVE_UP_AFTER {
                    return;
                }
            }
        }
    }
}
