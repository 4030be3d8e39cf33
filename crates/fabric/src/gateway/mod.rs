//! The gateway: one runs on each of a member's gateway nodes; the one
//! holding the Lease is active, the others wait (Submariner's HA).
//!
//! While the member has a broker Secret (written by `flotilla join`),
//! the active gateway
//! 1. publishes the cluster (`Cluster`) and itself (`Endpoint`: public
//!    IP on the underlay, subnets, WireGuard public key) to the broker,
//!    and removes the cluster's stale endpoints of an earlier gateway;
//! 2. follows every other cluster's endpoint there and keeps one
//!    WireGuard peer and the routes per remote cluster ([`plan`]);
//! 3. under Globalnet, runs [`crate::globalnet`];
//! 4. reports a `Gateway` object per gateway node, with each
//!    connection's status and RTT, and Prometheus metrics.
//!
//! A standby renews nothing and routes nothing; it takes over when the
//! Lease lapses (a killed gateway) and points the member's routes at
//! itself. Remote gateways learn its address from its new Endpoint and
//! from the handshake itself (WireGuard roaming).

pub mod mirror;
pub mod plan;
pub mod status;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ipnet::Ipv4Net;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use crate::api::{
    self, BACKEND, BROKER_NAMESPACE, Cluster, ClusterSpec, Endpoint, EndpointSpec, GATEWAY_LEASE,
    INTERFACE, KEY_SECRET, OPERATOR_NAMESPACE, PUBLIC_KEY, UDP_PORT,
};
use crate::broker::{self, BrokerAccess};
use crate::dataplane::{self, Placement, Routes};
use crate::globalnet::Globalnet;
use crate::lease::{Election, Role};
use crate::metrics::Metrics;
use crate::underlay;
use crate::wireguard::{Engine, EngineTasks, KeyPair};

/// The field manager of the gateway's writes.
pub const MANAGER: &str = "submariner-gateway";
/// Marks the cluster's own broker objects with the member's identity
/// (its kube-system namespace's uid), so two members claiming one
/// cluster ID are told apart.
pub const OWNER_ANNOTATION: &str = "flotilla.io/cluster-uid";

/// Where and how one gateway runs.
#[derive(Clone)]
pub struct GatewayConfig {
    /// The member, through its API only.
    pub member: Client,
    /// The node it runs on (its Gateway object's name).
    pub node: String,
    pub placement: Placement,
    /// The underlay's namespace.
    pub underlay: String,
    /// The member's pod and service CIDRs.
    pub cluster_cidrs: Vec<Ipv4Net>,
    pub service_cidrs: Vec<Ipv4Net>,
    /// How long a silent active gateway keeps the Lease.
    pub lease_duration: Duration,
    pub metrics: Arc<Metrics>,
}

/// Runs the gateway until `shutdown` resolves; then, if active, takes
/// its routes and broker objects back.
pub async fn run(
    config: GatewayConfig,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), String> {
    let mut gateway = Gateway::prepare(config).await?;
    let wake = gateway.wake.clone();
    tokio::pin!(shutdown);
    loop {
        gateway.step().await;
        // A pass a second, and at once when the broker Secret, the
        // broker's endpoints or a tunnel's liveness changes.
        tokio::select! {
            _ = &mut shutdown => break,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = wake.notified() => {}
        }
    }
    gateway.stop(true).await;
    Ok(())
}

struct Gateway {
    config: GatewayConfig,
    public: Ipv4Net,
    owner: String,
    election: Election,
    /// The access the member's Secret gives, once joined.
    access: Option<BrokerAccess>,
    active: Option<Active>,
    last_status: Instant,
    /// Roles, failure and connection statuses last written.
    last_summary: String,
    failure: String,
    started: Instant,
    /// Wakes the loop (see [`run`]).
    wake: Arc<tokio::sync::Notify>,
    /// Follows the member's broker Secret, to wake the loop on a join.
    secret_watch: JoinHandle<()>,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.secret_watch.abort();
    }
}

/// What only the active gateway has.
struct Active {
    access: BrokerAccess,
    hub: Client,
    engine: Arc<Engine>,
    _engine_tasks: EngineTasks,
    routes: Routes,
    endpoints: Store<Endpoint>,
    /// Whether the broker's Endpoints have been listed at least once.
    synced: Arc<std::sync::atomic::AtomicBool>,
    /// The member's copies of them, as last written.
    mirrored: mirror::Mirrored,
    watch: JoinHandle<()>,
    endpoint: EndpointSpec,
    published: bool,
    plan: plan::Plan,
    /// When each remote cluster's peer was set up (for "connecting").
    since: std::collections::HashMap<String, (String, Instant)>,
    globalnet: Option<Globalnet>,
    /// The nftables table last applied.
    table: String,
    last_export_check: Instant,
}

/// How often the active gateway checks that exports answer.
const EXPORT_CHECK: Duration = Duration::from_secs(10);

impl Drop for Active {
    fn drop(&mut self) {
        self.watch.abort();
    }
}

impl Gateway {
    async fn prepare(config: GatewayConfig) -> Result<Gateway, String> {
        let public = underlay::attach(
            &config.underlay,
            &config.placement.node_netns,
            &config.placement.node_netns,
        )
        .await
        .map_err(|e| format!("cannot join the underlay {:?}: {e}", config.underlay))?;
        info!(node = %config.node, public = %public.addr(), "on the underlay");
        let member = config.member.clone();
        ensure_operator_namespace(&member)
            .await
            .map_err(|e| format!("cannot make the {OPERATOR_NAMESPACE} namespace: {e}"))?;
        install_crds_unless_served(&member)
            .await
            .map_err(|e| e.to_string())?;
        let owner = Api::<Namespace>::all(member.clone())
            .get("kube-system")
            .await
            .map_err(|e| format!("cannot read the member's kube-system namespace: {e}"))?
            .uid()
            .unwrap_or_default();
        // The pid makes a restarted gateway a new candidate: it waits for
        // the Lease like the standby rather than taking it back at once.
        let identity = format!("{}-submariner-gateway-{}", config.node, std::process::id());
        let election = Election::new(
            member,
            OPERATOR_NAMESPACE,
            GATEWAY_LEASE,
            &identity,
            config.lease_duration,
        );
        let wake = Arc::new(tokio::sync::Notify::new());
        let secret_watch = {
            let api: Api<Secret> = Api::namespaced(config.member.clone(), OPERATOR_NAMESPACE);
            let wake = wake.clone();
            let selector = format!("metadata.name={}", crate::api::BROKER_SECRET);
            tokio::spawn(async move {
                use futures::StreamExt;
                watcher(api, watcher::Config::default().fields(&selector))
                    .default_backoff()
                    .for_each(|_| {
                        wake.notify_one();
                        async {}
                    })
                    .await;
            })
        };
        Ok(Gateway {
            wake,
            secret_watch,
            config,
            public,
            owner,
            election,
            access: None,
            active: None,
            last_status: Instant::now() - Duration::from_secs(60),
            last_summary: String::new(),
            failure: String::new(),
            started: Instant::now(),
        })
    }

    fn public_ip(&self) -> Ipv4Addr {
        self.public.addr()
    }

    /// One pass: broker access, election, the active gateway's work,
    /// the Gateway object.
    async fn step(&mut self) {
        let access = match broker::read(&self.config.member).await {
            Ok(a) => a,
            Err(e) => {
                // The member's API did not answer: change nothing.
                warn!(error = %e, "cannot read the broker Secret");
                return;
            }
        };
        if access != self.access {
            if self.active.is_some() {
                info!("broker access changed; the tunnels are rebuilt");
                self.stop(access.is_none()).await;
            }
            self.access = access;
        }
        let Some(access) = self.access.clone() else {
            self.failure = "not joined: no broker Secret (run `flotilla join`)".into();
            self.report(false).await;
            return;
        };
        // A gateway that just (re)started leaves a lapsed Lease to the
        // standbys that were already waiting for it: it may take one over
        // only after twice the Lease's duration (a free Lease, or none, it
        // takes at once).
        let takeover = self.started.elapsed() >= 2 * self.config.lease_duration;
        let role = match self.election.try_acquire(takeover).await {
            Ok(r) => r,
            Err(error) => {
                warn!(%error, "cannot renew the gateway Lease");
                // A gateway that cannot renew must assume it lost.
                Role::Follower
            }
        };
        match (role, self.active.is_some()) {
            (Role::Leader, false) => match self.activate(access).await {
                Ok(active) => {
                    info!(node = %self.config.node, "active");
                    self.active = Some(active);
                    self.failure.clear();
                }
                Err(e) => {
                    warn!(error = %e, "cannot become the active gateway");
                    self.failure = e;
                    self.election.release().await;
                }
            },
            (Role::Follower, true) => {
                info!(node = %self.config.node, "lost the Lease; standing by");
                self.stop(false).await;
            }
            _ => {}
        }
        if self.active.is_some() {
            if let Err(e) = self.reconcile().await {
                self.failure = e;
            } else {
                self.failure.clear();
            }
        } else if role == Role::Follower {
            self.failure.clear();
        }
        self.report(self.active.is_some()).await;
    }

    async fn activate(&mut self, access: BrokerAccess) -> Result<Active, String> {
        let member = self.config.member.clone();
        let keys = cluster_keys(&member).await?;
        let hub = access.client().await?;
        let (tun, udp) = dataplane::open(
            &self.config.placement.node_netns,
            SocketAddr::from((self.public_ip(), UDP_PORT)),
        )
        .await
        .map_err(|e| e.to_string())?;
        let mut endpoint = EndpointSpec {
            cluster_id: access.cluster_id.clone(),
            cable_name: EndpointSpec::cable_name(&access.cluster_id, &self.public_ip().to_string()),
            health_check_ip: self.public_ip().to_string(),
            hostname: self.config.node.clone(),
            subnets: Vec::new(),
            private_ip: self.public_ip().to_string(),
            public_ip: self.public_ip().to_string(),
            nat_enabled: false,
            backend: BACKEND.into(),
            backend_config: [
                (PUBLIC_KEY.to_string(), keys.public_base64()),
                ("udp-port".to_string(), UDP_PORT.to_string()),
                ("interface-name".to_string(), INTERFACE.to_string()),
            ]
            .into(),
        };
        endpoint.subnets = self
            .local(&access)
            .subnets()
            .iter()
            .map(|n| n.to_string())
            .collect();
        let (engine, tasks) = Engine::start(keys, self.public_ip(), tun, udp, self.wake.clone());
        let (endpoints, writer) = reflector::store();
        let api: Api<Endpoint> = Api::namespaced(hub.clone(), &access.namespace);
        let synced = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = synced.clone();
        let wake = self.wake.clone();
        let watch = tokio::spawn(async move {
            use futures::StreamExt;
            watcher(api, watcher::Config::default())
                .default_backoff()
                .reflect(writer)
                .for_each(|event| {
                    if let Ok(watcher::Event::InitDone) = event {
                        flag.store(true, std::sync::atomic::Ordering::Relaxed);
                    }
                    wake.notify_one();
                    async {}
                })
                .await;
        });
        let globalnet = access
            .global_cidr
            .map(|cidr| Globalnet::new(member.clone(), cidr));
        Ok(Active {
            hub,
            access,
            engine,
            _engine_tasks: tasks,
            routes: Routes::default(),
            endpoints,
            synced,
            mirrored: Default::default(),
            watch,
            endpoint,
            published: false,
            plan: plan::Plan::default(),
            since: Default::default(),
            globalnet,
            table: String::new(),
            last_export_check: Instant::now() - EXPORT_CHECK,
        })
    }

    fn local(&self, access: &BrokerAccess) -> plan::Local {
        let mut cidrs = self.config.cluster_cidrs.clone();
        cidrs.extend(self.config.service_cidrs.iter().copied());
        plan::Local {
            cluster_id: access.cluster_id.clone(),
            cidrs,
            global_cidr: access.global_cidr,
        }
    }

    /// The active gateway's pass.
    async fn reconcile(&mut self) -> Result<(), String> {
        let local = match &self.active {
            Some(a) => self.local(&a.access),
            None => return Ok(()),
        };
        let owner = self.owner.clone();
        let placement = self.config.placement.clone();
        let Some(active) = self.active.as_mut() else {
            return Ok(());
        };
        // Published once, and again whenever the broker's copy differs
        // (lost with the broker's data, or edited by hand).
        let on_broker = active
            .endpoints
            .get(
                &kube::runtime::reflector::ObjectRef::new(&active.endpoint.object_name())
                    .within(&active.access.namespace),
            )
            .map(|e| e.spec.clone());
        let mut broker_failure = None;
        if !active.published || (on_broker.is_some_and(|e| e != active.endpoint)) {
            match publish(active, &local, &owner, &self.config).await {
                Ok(()) => active.published = true,
                // Another cluster owns the ID: this one must not connect.
                Err(PublishError::Refused(e)) => return Err(e),
                // The broker is down: connect from what is known.
                Err(PublishError::Broker(e)) => broker_failure = Some(e),
            }
        }
        let endpoints: Vec<Endpoint> = if active.synced.load(std::sync::atomic::Ordering::Relaxed) {
            let broker: Vec<Endpoint> = active
                .endpoints
                .state()
                .iter()
                .map(|e| (**e).clone())
                .collect();
            match mirror::sync(&self.config.member, &broker, &active.mirrored).await {
                Ok(m) => active.mirrored = m,
                Err(error) => warn!(%error, "cannot copy the broker's endpoints into the member"),
            }
            broker
        } else {
            // Not listed from the broker yet (it may be down): the
            // member's copies of its last state.
            mirror::read(&self.config.member).await.unwrap_or_default()
        };
        let endpoints: Vec<(EndpointSpec, Option<jiff::Timestamp>)> = endpoints
            .iter()
            .map(|e| {
                (
                    e.spec.clone(),
                    e.metadata.creation_timestamp.as_ref().map(|t| t.0),
                )
            })
            .collect();
        let next = plan::plan(&local, &endpoints);
        active.engine.set_peers(&next.peers());
        for p in next.peers() {
            let key = format!("{}:{:?}", p.endpoint, p.public_key);
            let entry = active
                .since
                .entry(p.cluster.clone())
                .or_insert((key.clone(), Instant::now()));
            if entry.0 != key {
                *entry = (key, Instant::now());
            }
        }
        if next.routes != active.plan.routes || active.plan.remotes.is_empty() {
            active
                .routes
                .apply(&placement, &next.routes)
                .await
                .map_err(|e| format!("cannot route to the remote clusters: {e}"))?;
        }
        active.plan = next;
        let egress = match active.globalnet.as_mut() {
            Some(g) => Some(g.reconcile().await?),
            None => None,
        };
        let table = dataplane::render_table(&self.config.cluster_cidrs, egress);
        if table != active.table {
            dataplane::apply_table(&placement.node_netns, &table)
                .await
                .map_err(|e| format!("cannot program the gateway's nftables table: {e}"))?;
            active.table = table;
        }
        if active.last_export_check.elapsed() >= EXPORT_CHECK {
            active.last_export_check = Instant::now();
            if let Err(error) =
                crate::exports::check(&self.config.member, &placement.node_netns).await
            {
                warn!(%error, "cannot check the exported Services");
            }
        }
        // Said on the Gateway, after the tunnels were kept up regardless.
        match broker_failure {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Writes the Gateway object and the metrics.
    async fn report(&mut self, active: bool) {
        let connections = match &self.active {
            Some(a) => status::connections(&a.plan, &a.engine.stats(), &a.since),
            None => Vec::new(),
        };
        let local_endpoint = self
            .active
            .as_ref()
            .map(|a| a.endpoint.clone())
            .unwrap_or_else(|| EndpointSpec {
                hostname: self.config.node.clone(),
                public_ip: self.public_ip().to_string(),
                private_ip: self.public_ip().to_string(),
                backend: BACKEND.into(),
                cluster_id: self
                    .access
                    .as_ref()
                    .map(|a| a.cluster_id.clone())
                    .unwrap_or_default(),
                ..Default::default()
            });
        self.config.metrics.record(
            &local_endpoint,
            active,
            &connections,
            self.active
                .as_ref()
                .map(|a| a.engine.stats())
                .unwrap_or_default(),
        );
        // Written every 5 s (Submariner's interval, for the RTTs and
        // counters), and at once when a status, the role or a failure
        // changes.
        let summary = format!(
            "{active} {} {}",
            self.failure,
            connections
                .iter()
                .map(|c| format!("{}={}", c.endpoint.cluster_id, c.status))
                .collect::<Vec<_>>()
                .join(",")
        );
        if summary == self.last_summary && self.last_status.elapsed() < Duration::from_secs(5) {
            return;
        }
        self.last_status = Instant::now();
        self.last_summary = summary;
        let gateway = status::gateway(
            &self.config.node,
            active,
            local_endpoint,
            &self.failure,
            connections,
        );
        if let Err(error) = status::write(&self.config.member, &gateway).await {
            warn!(%error, "cannot write the Gateway status");
        }
    }

    /// Stops being active: routes, tunnel and (when leaving the fleet or
    /// shutting down) the broker objects go.
    async fn stop(&mut self, withdraw: bool) {
        let Some(mut active) = self.active.take() else {
            if withdraw {
                self.election.release().await;
            }
            return;
        };
        active.routes.clear(&self.config.placement).await;
        dataplane::close(&self.config.placement.node_netns).await;
        if withdraw {
            let api: Api<Endpoint> = Api::namespaced(active.hub.clone(), &active.access.namespace);
            let _ = api
                .delete(&active.endpoint.object_name(), &DeleteParams::default())
                .await;
            if let Some(g) = active.globalnet.as_mut() {
                g.clear().await;
            }
        }
        self.election.release().await;
        self.last_status = Instant::now() - Duration::from_secs(60);
    }
}

/// The member's Submariner CRDs, installed unless all are served already
/// (a member bootstraps them before its gateways start: they may read
/// CRDs, not write them).
async fn install_crds_unless_served(member: &Client) -> Result<(), String> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crds: Api<CustomResourceDefinition> = Api::all(member.clone());
    let manifests = api::member_crds();
    let mut served = true;
    for m in &manifests {
        let name = m
            .pointer("/metadata/name")
            .and_then(|v| v.as_str())
            .unwrap_or_default();
        if crds
            .get_opt(name)
            .await
            .map_err(|e| e.to_string())?
            .is_none()
        {
            served = false;
        }
    }
    if served {
        return Ok(());
    }
    flotilla_client::crd::install(member, manifests)
        .await
        .map_err(|e| e.to_string())
}

pub async fn ensure_operator_namespace(member: &Client) -> Result<(), kube::Error> {
    let api: Api<Namespace> = Api::all(member.clone());
    // Read first: a gateway may read namespaces, not create them.
    if api.get_opt(OPERATOR_NAMESPACE).await?.is_some() {
        return Ok(());
    }
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(OPERATOR_NAMESPACE.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    match api.create(&PostParams::default(), &ns).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

/// The cluster's key pair: made once by whichever gateway starts first
/// and kept in a Secret of the member; the private key never leaves it.
async fn cluster_keys(member: &Client) -> Result<KeyPair, String> {
    let api: Api<Secret> = Api::namespaced(member.clone(), OPERATOR_NAMESPACE);
    for _ in 0..3 {
        if let Some(s) = api.get_opt(KEY_SECRET).await.map_err(|e| e.to_string())? {
            let key = s
                .data
                .as_ref()
                .and_then(|d| d.get("privateKey"))
                .and_then(|b| String::from_utf8(b.0.clone()).ok())
                .and_then(|t| KeyPair::from_base64(&t));
            return key.ok_or_else(|| {
                format!("the Secret {OPERATOR_NAMESPACE}/{KEY_SECRET} holds no valid privateKey; delete it to make a new key")
            });
        }
        let keys = KeyPair::generate();
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(KEY_SECRET.into()),
                ..Default::default()
            },
            data: Some(
                [
                    (
                        "privateKey".to_string(),
                        ByteString(keys.private_base64().into_bytes()),
                    ),
                    (
                        "publicKey".to_string(),
                        ByteString(keys.public_base64().into_bytes()),
                    ),
                ]
                .into(),
            ),
            ..Default::default()
        };
        match api.create(&PostParams::default(), &secret).await {
            Ok(_) => {
                // Tests of recovery stop here: the new key stored, no
                // Endpoint published with it yet.
                flotilla_failpoint::hit("gateway-after-key-made");
                return Ok(keys);
            }
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            Err(e) => return Err(e.to_string()),
        }
    }
    Err("cannot settle the cluster's key".into())
}

/// Why publishing failed.
enum PublishError {
    /// The broker refused this cluster (its ID is another's).
    Refused(String),
    /// The broker could not be reached or failed.
    Broker(String),
}

impl From<String> for PublishError {
    fn from(e: String) -> Self {
        PublishError::Broker(e)
    }
}

/// Publishes the Cluster and this Endpoint on the broker, and removes
/// the cluster's endpoints of earlier gateways.
async fn publish(
    active: &mut Active,
    local: &plan::Local,
    owner: &str,
    config: &GatewayConfig,
) -> Result<(), PublishError> {
    let ns = &active.access.namespace;
    let clusters: Api<Cluster> = Api::namespaced(active.hub.clone(), ns);
    let id = &active.access.cluster_id;
    if let Some(have) = clusters.get_opt(id).await.map_err(|e| broker_error(&e))? {
        let theirs = have
            .annotations()
            .get(OWNER_ANNOTATION)
            .cloned()
            .unwrap_or_default();
        if !theirs.is_empty() && theirs != owner {
            return Err(PublishError::Refused(format!(
                "cluster ID {id:?} is already used by another cluster on the broker (its kube-system uid is {theirs}); \
                 join this one under another name, or delete {ns}/{id} on the broker if that cluster is gone"
            )));
        }
    }
    let meta = |name: &str| ObjectMeta {
        name: Some(name.into()),
        namespace: Some(ns.clone()),
        annotations: Some([(OWNER_ANNOTATION.to_string(), owner.to_string())].into()),
        ..Default::default()
    };
    let cluster = Cluster {
        metadata: meta(id),
        spec: ClusterSpec {
            cluster_id: id.clone(),
            color_codes: vec!["blue".into()],
            service_cidr: config.service_cidrs.iter().map(|n| n.to_string()).collect(),
            cluster_cidr: config.cluster_cidrs.iter().map(|n| n.to_string()).collect(),
            global_cidr: local.global_cidr.iter().map(|n| n.to_string()).collect(),
        },
    };
    let params = PatchParams::apply(MANAGER).force();
    clusters
        .patch(id, &params, &Patch::Apply(with_kind(&cluster, "Cluster")))
        .await
        .map_err(|e| broker_error(&e))?;
    let endpoints: Api<Endpoint> = Api::namespaced(active.hub.clone(), ns);
    let name = active.endpoint.object_name();
    let endpoint = Endpoint {
        metadata: meta(&name),
        spec: active.endpoint.clone(),
    };
    endpoints
        .patch(
            &name,
            &params,
            &Patch::Apply(with_kind(&endpoint, "Endpoint")),
        )
        .await
        .map_err(|e| broker_error(&e))?;
    for stale in endpoints
        .list(&ListParams::default())
        .await
        .map_err(|e| broker_error(&e))?
    {
        let ours = stale
            .annotations()
            .get(OWNER_ANNOTATION)
            .map(String::as_str)
            == Some(owner);
        if stale.spec.cluster_id == *id && ours && stale.name_any() != name {
            info!(endpoint = %stale.name_any(), "removing the endpoint of an earlier gateway");
            let _ = endpoints
                .delete(&stale.name_any(), &DeleteParams::default())
                .await;
        }
    }
    info!(cluster = %id, endpoint = %name, "published on the broker");
    Ok(())
}

fn with_kind<T: serde::Serialize>(object: &T, kind: &str) -> serde_json::Value {
    let mut v = serde_json::to_value(object).unwrap_or_default();
    v["apiVersion"] = json!(format!("{}/{}", api::GROUP, api::VERSION));
    v["kind"] = json!(kind);
    v
}

fn broker_error(e: &kube::Error) -> String {
    format!("cannot reach the broker: {e}")
}

/// Removes a cluster's objects from the broker (`flotilla unjoin`), so
/// every other gateway drops its tunnel and routes even when the
/// cluster itself is unreachable.
pub async fn withdraw(hub: &Client, cluster_id: &str) -> Result<(), kube::Error> {
    withdraw_in(hub, BROKER_NAMESPACE, cluster_id).await
}

pub async fn withdraw_in(
    hub: &Client,
    namespace: &str,
    cluster_id: &str,
) -> Result<(), kube::Error> {
    let endpoints: Api<Endpoint> = Api::namespaced(hub.clone(), namespace);
    for e in endpoints.list(&ListParams::default()).await? {
        if e.spec.cluster_id == cluster_id {
            let _ = endpoints
                .delete(&e.name_any(), &DeleteParams::default())
                .await;
        }
    }
    let clusters: Api<Cluster> = Api::namespaced(hub.clone(), namespace);
    match clusters.delete(cluster_id, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}
