//! `flotilla peer` and `flotilla unpeer`, as `liqoctl peer`/`unpeer`:
//! with an administrator's access to both clusters, set up (or remove)
//! everything a consumer needs to use a provider's resources.
//!
//! In the provider: the consumer's tenant namespace, an identity for it
//! (a ServiceAccount whose token is bound to a Secret there, so deleting
//! the Secret revokes it) with roles limited to its tenant namespace and,
//! once the provider makes them, its twin namespaces; a ForeignCluster
//! for the consumer. In the consumer: the provider's tenant namespace,
//! the kubeconfig of that identity, a ForeignCluster for the provider and
//! a ResourceSlice asking for resources. The controllers of both clusters
//! take it from there: the slice is granted, a VirtualNode and its Node
//! appear.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

use crate::api::{
    self, ForeignCluster, ForeignClusterSpec, ForeignClusterStatus, LiqoCondition, Module, Modules,
    REMOTE_CLUSTER_ID, ResourceSlice, ResourceSliceSpec, TENANT_NAMESPACE_LABEL, TenantNamespace,
    VirtualNode, tenant_namespace, virtual_node_name,
};
use crate::identity;
use crate::remote;

/// Who writes what `flotilla peer` applies.
const MANAGER: &str = "flotilla-peer";
/// Asks the consumer's controller for a VirtualNode once the slice is
/// granted (Liqo's annotation).
pub const CREATE_VIRTUAL_NODE: &str = "liqo.io/create-virtual-node";
/// How long the identity's token lives (Liqo's certificates: one year).
const TOKEN_SECONDS: i64 = 365 * 24 * 3600;

#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    #[error("cannot reach the {side} cluster: {message}")]
    Unreachable { side: &'static str, message: String },
    #[error(
        "the {side} cluster refused the credentials of {flag} ({message}); use an administrator's kubeconfig"
    )]
    Refused {
        side: &'static str,
        flag: &'static str,
        message: String,
    },
    #[error("both clusters have cluster ID {0}; a cluster cannot peer with itself")]
    SameCluster(String),
    #[error("{0:?} is not a valid cluster ID (lower-case letters, digits and '-', at most 40)")]
    InvalidId(String),
    #[error("the provider denied the ResourceSlice: {0}")]
    Denied(String),
    #[error("timed out after {seconds}s waiting for {what}")]
    Timeout { seconds: u64, what: String },
    #[error("{what}: {source}")]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("cannot connect the clusters' networks: {0}")]
    Network(String),
    #[error("cannot install the peering CRDs in the {side} cluster: {message}")]
    Crds { side: &'static str, message: String },
}

fn api_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> PeerError {
    let what = what.into();
    move |source| PeerError::Api { what, source }
}

/// One side of a peering: an administrator's client and how it reached
/// the cluster.
pub struct Side {
    pub client: Client,
    /// The administrator's credentials, for what the cluster runs itself
    /// (its gateways' access to it as a broker).
    pub credentials: flotilla_client::credentials::Credentials,
    /// The API server URL, as the kubeconfig names it.
    pub server: String,
    pub ca_pem: Option<Vec<u8>>,
    /// The kubeconfig's cluster name (a default cluster ID).
    pub name: String,
}

/// What to ask the provider for; unset: what it shares.
#[derive(Clone, Debug, Default)]
pub struct PeerOptions {
    pub resources: BTreeMap<String, Quantity>,
    pub create_virtual_node: bool,
    pub timeout: Duration,
}

/// The IDs of a peering.
#[derive(Clone, Debug)]
pub struct Peering {
    pub consumer: String,
    pub provider: String,
}

/// Reads (or gives) each side's cluster ID, checking both answer with
/// the credentials given.
pub async fn identify(consumer: &Side, provider: &Side) -> Result<Peering, PeerError> {
    let consumer_id = id_of(consumer, "consumer", "--kubeconfig").await?;
    let provider_id = id_of(provider, "provider", "--remote-kubeconfig").await?;
    if consumer_id == provider_id {
        return Err(PeerError::SameCluster(consumer_id));
    }
    Ok(Peering {
        consumer: consumer_id,
        provider: provider_id,
    })
}

async fn id_of(side: &Side, which: &'static str, flag: &'static str) -> Result<String, PeerError> {
    let id = identity::ensure_cluster_id(&side.client, &identity::sanitize(&side.name))
        .await
        .map_err(|e| classify(e, which, flag))?;
    if !identity::valid(&id) {
        return Err(PeerError::InvalidId(id));
    }
    Ok(id)
}

/// A failed first request: unreachable, refused, or something else.
fn classify(e: kube::Error, side: &'static str, flag: &'static str) -> PeerError {
    match e {
        kube::Error::Api(s) if s.code == 401 || s.code == 403 => PeerError::Refused {
            side,
            flag,
            message: format!("{} {}", s.code, s.message),
        },
        kube::Error::Api(s) => PeerError::Api {
            what: format!("the {side} cluster"),
            source: kube::Error::Api(s),
        },
        other => PeerError::Unreachable {
            side,
            message: other.to_string(),
        },
    }
}

/// Establishes consumer → provider; `progress` hears each step.
pub async fn peer(
    consumer: &Side,
    provider: &Side,
    options: &PeerOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<Peering, PeerError> {
    let ids = identify(consumer, provider).await?;
    progress(&format!(
        "clusters: consumer {}, provider {}",
        ids.consumer, ids.provider
    ));
    for (side, which) in [(consumer, "consumer"), (provider, "provider")] {
        flotilla_client::crd::install(&side.client, api::crds())
            .await
            .map_err(|e| PeerError::Crds {
                side: which,
                message: e.to_string(),
            })?;
    }
    let token = provider_identity(&provider.client, &ids).await?;
    progress(&format!(
        "authentication: identity liqo-{} in the provider's {}",
        ids.consumer,
        tenant_namespace(&ids.consumer)
    ));
    consumer_side(consumer, provider, &ids, &token, options).await?;
    // The identity works before anything relies on it.
    let config = remote::kubeconfig(
        &ids.provider,
        &provider.server,
        provider.ca_pem.as_deref(),
        &token,
    );
    let as_consumer = remote::client(config)
        .await
        .map_err(|message| PeerError::Unreachable {
            side: "provider",
            message,
        })?;
    Api::<ResourceSlice>::namespaced(as_consumer, &tenant_namespace(&ids.consumer))
        .list(&ListParams::default())
        .await
        .map_err(|e| classify(e, "provider", "the peering identity"))?;
    progress("authentication: established");
    wait_granted(consumer, &ids, options.timeout, progress).await?;
    if options.create_virtual_node {
        wait_node_ready(consumer, &ids, options.timeout, progress).await?;
    }
    let outcome = crate::network::connect(
        &consumer.client,
        &provider.client,
        &provider.credentials,
        (&ids.consumer, &ids.provider),
        &token,
    )
    .await
    .map_err(|message| PeerError::Network(message.clone()))?;
    match outcome {
        crate::network::Outcome::Disabled(why) => {
            progress(&format!("networking: disabled ({why})"))
        }
        _ => wait_network(consumer, &ids, options.timeout, progress).await,
    }
    Ok(ids)
}

/// The consumer's identity in the provider; returns its token.
async fn provider_identity(provider: &Client, ids: &Peering) -> Result<String, PeerError> {
    let tenant = tenant_namespace(&ids.consumer);
    flotilla_client::namespace::ensure(
        provider,
        &tenant,
        &[
            (TENANT_NAMESPACE_LABEL, "true"),
            (REMOTE_CLUSTER_ID, &ids.consumer),
        ],
    )
    .await
    .map_err(api_err(format!(
        "creating namespace {tenant} in the provider"
    )))?;
    let sa_name = identity_name(&ids.consumer);
    let apply = PatchParams::apply(MANAGER).force();
    let labels = json!({REMOTE_CLUSTER_ID: ids.consumer});
    let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": sa_name, "namespace": tenant, "labels": labels}});
    Api::<ServiceAccount>::namespaced(provider.clone(), &tenant)
        .patch(&sa_name, &apply, &Patch::Apply(&sa))
        .await
        .map_err(api_err("creating the consumer's ServiceAccount"))?;
    // In its tenant namespace: its ResourceSlices and NamespaceMaps.
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": sa_name, "namespace": tenant, "labels": labels},
        "rules": [{"apiGroups": [api::AUTHENTICATION_GROUP, api::OFFLOADING_GROUP],
                   "resources": ["resourceslices", "resourceslices/status", "namespacemaps", "namespacemaps/status"],
                   "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}]});
    Api::<Role>::namespaced(provider.clone(), &tenant)
        .patch(&sa_name, &apply, &Patch::Apply(&role))
        .await
        .map_err(api_err("creating the consumer's Role"))?;
    let binding = binding(&sa_name, &tenant, "Role", &sa_name, &ids.consumer);
    Api::<RoleBinding>::namespaced(provider.clone(), &tenant)
        .patch(&sa_name, &apply, &Patch::Apply(&binding))
        .await
        .map_err(api_err("binding the consumer's Role"))?;
    // In its twin namespaces (bound there by the provider's namespace
    // controller): what offloading reads and writes.
    let cluster_role = offloading_cluster_role(&ids.consumer);
    Api::<ClusterRole>::all(provider.clone())
        .patch(&sa_name, &apply, &Patch::Apply(&cluster_role))
        .await
        .map_err(api_err("creating the consumer's ClusterRole"))?;
    // The token is bound to this Secret: deleting it revokes the identity.
    let secrets: Api<Secret> = Api::namespaced(provider.clone(), &tenant);
    let anchor = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": sa_name, "namespace": tenant, "labels": labels},
        "type": "Opaque"});
    let anchor = secrets
        .patch(&sa_name, &apply, &Patch::Apply(&anchor))
        .await
        .map_err(api_err("creating the identity's Secret"))?;
    let request = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"expirationSeconds": TOKEN_SECONDS,
                 "boundObjectRef": {"apiVersion": "v1", "kind": "Secret",
                                    "name": sa_name, "uid": anchor.uid()}}});
    let sas: Api<ServiceAccount> = Api::namespaced(provider.clone(), &tenant);
    let body = request;
    let answer: Value = sas
        .create_subresource("token", &sa_name, &PostParams::default(), &body)
        .await
        .map_err(api_err("requesting the identity's token"))?;
    let token = answer
        .pointer("/status/token")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let fc = foreign_cluster(
        &ids.consumer,
        "Consumer",
        "",
        TenantNamespace {
            local: tenant.clone(),
            remote: tenant_namespace(&ids.provider),
        },
        ("AuthTenantStatus", "Ready"),
    );
    apply_foreign_cluster(provider, &fc).await?;
    Ok(token)
}

/// The name of consumer `consumer`'s identity in a provider.
pub fn identity_name(consumer: &str) -> String {
    format!("liqo-{consumer}")
}

fn binding(name: &str, ns: &str, kind: &str, role: &str, consumer: &str) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": ns, "labels": {REMOTE_CLUSTER_ID: consumer}},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": identity_name(consumer),
                      "namespace": tenant_namespace(consumer)}]})
}

/// What a consumer may do in its twin namespaces of a provider.
fn offloading_cluster_role(consumer: &str) -> Value {
    let all = [
        "get", "list", "watch", "create", "update", "patch", "delete",
    ];
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
    "metadata": {"name": identity_name(consumer), "labels": {REMOTE_CLUSTER_ID: consumer}},
    "rules": [
        {"apiGroups": [api::OFFLOADING_GROUP], "resources": ["shadowpods", "shadowpods/status"], "verbs": all},
        {"apiGroups": [""], "resources": ["configmaps", "secrets", "services", "serviceaccounts", "events"], "verbs": all},
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": all},
        {"apiGroups": ["networking.k8s.io"], "resources": ["ingresses"], "verbs": all},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create", "get"]},
        {"apiGroups": ["submariner.io"], "resources": ["globalingressips"], "verbs": ["get", "list", "watch"]},
    ]})
}

/// Binds consumer `consumer`'s identity in twin namespace `ns`.
pub fn twin_binding(consumer: &str, ns: &str) -> Value {
    binding(
        &identity_name(consumer),
        ns,
        "ClusterRole",
        &identity_name(consumer),
        consumer,
    )
}

fn foreign_cluster(
    id: &str,
    role: &str,
    api_server_url: &str,
    tenant: TenantNamespace,
    (auth_type, auth_status): (&str, &str),
) -> ForeignCluster {
    let mut fc = ForeignCluster::new(
        id,
        ForeignClusterSpec {
            cluster_id: id.into(),
        },
    );
    fc.metadata.labels = Some([(REMOTE_CLUSTER_ID.to_string(), id.to_string())].into());
    fc.status = Some(ForeignClusterStatus {
        role: role.into(),
        modules: Modules {
            authentication: Module {
                enabled: true,
                conditions: vec![LiqoCondition::new(auth_type, auth_status, "", "")],
            },
            ..Default::default()
        },
        api_server_url: api_server_url.into(),
        tenant_namespace: tenant,
        conditions: Vec::new(),
    });
    fc
}

/// Creates or updates a ForeignCluster with its status; a cluster that
/// is both consumer and provider of the same peer says so.
async fn apply_foreign_cluster(client: &Client, fc: &ForeignCluster) -> Result<(), PeerError> {
    let api: Api<ForeignCluster> = Api::all(client.clone());
    let name = fc.name_any();
    let mut body = serde_json::to_value(fc).unwrap_or_default();
    let status = body
        .as_object_mut()
        .and_then(|o| o.remove("status"))
        .unwrap_or_default();
    api.patch(
        &name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(&body),
    )
    .await
    .map_err(api_err(format!("writing ForeignCluster {name}")))?;
    let current = api
        .get_status(&name)
        .await
        .map_err(api_err(format!("reading ForeignCluster {name}")))?;
    let mut status: ForeignClusterStatus = serde_json::from_value(status).unwrap_or_default();
    if let Some(old) = current.status {
        status.role = merge_role(&old.role, &status.role);
        if status.api_server_url.is_empty() {
            status.api_server_url = old.api_server_url;
        }
        if status.tenant_namespace.local.is_empty() {
            status.tenant_namespace = old.tenant_namespace;
        }
        status.modules.networking = old.modules.networking;
        status.modules.offloading = old.modules.offloading;
    }
    api.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": status})),
    )
    .await
    .map_err(api_err(format!("writing ForeignCluster {name}'s status")))?;
    Ok(())
}

/// A role joined with another: Consumer and Provider make both.
pub fn merge_role(old: &str, new: &str) -> String {
    match (old, new) {
        (a, b) if a == b => b.to_string(),
        ("Consumer", "Provider") | ("Provider", "Consumer") | ("ConsumerAndProvider", _) => {
            "ConsumerAndProvider".into()
        }
        (_, b) => b.to_string(),
    }
}

/// The role left when one side of it goes.
fn without_role(current: &str, gone: &str) -> Option<&'static str> {
    match (current, gone) {
        ("ConsumerAndProvider", "Consumer") => Some("Provider"),
        ("ConsumerAndProvider", "Provider") => Some("Consumer"),
        _ => None,
    }
}

async fn consumer_side(
    consumer: &Side,
    provider: &Side,
    ids: &Peering,
    token: &str,
    options: &PeerOptions,
) -> Result<(), PeerError> {
    let tenant = tenant_namespace(&ids.provider);
    flotilla_client::namespace::ensure(
        &consumer.client,
        &tenant,
        &[
            (TENANT_NAMESPACE_LABEL, "true"),
            (REMOTE_CLUSTER_ID, &ids.provider),
        ],
    )
    .await
    .map_err(api_err(format!(
        "creating namespace {tenant} in the consumer"
    )))?;
    let config = remote::kubeconfig(
        &ids.provider,
        &provider.server,
        provider.ca_pem.as_deref(),
        token,
    );
    let yaml = serde_yaml::to_string(&config).unwrap_or_default();
    let secret_name = remote::kubeconfig_secret_name(&ids.provider);
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(secret_name.clone()),
            namespace: Some(tenant.clone()),
            labels: Some([(REMOTE_CLUSTER_ID.to_string(), ids.provider.clone())].into()),
            ..Default::default()
        },
        data: Some(
            [(
                remote::KUBECONFIG_KEY.to_string(),
                ByteString(yaml.into_bytes()),
            )]
            .into(),
        ),
        type_: Some("Opaque".into()),
        ..Default::default()
    };
    Api::<Secret>::namespaced(consumer.client.clone(), &tenant)
        .patch(
            &secret_name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&secret),
        )
        .await
        .map_err(api_err("storing the provider's kubeconfig in the consumer"))?;
    let fc = foreign_cluster(
        &ids.provider,
        "Provider",
        &provider.server,
        TenantNamespace {
            local: tenant.clone(),
            remote: tenant_namespace(&ids.consumer),
        },
        ("AuthIdentityControlPlaneStatus", "Ready"),
    );
    apply_foreign_cluster(&consumer.client, &fc).await?;
    let mut slice = ResourceSlice::new(
        &ids.provider,
        ResourceSliceSpec {
            consumer_cluster_id: Some(ids.consumer.clone()),
            provider_cluster_id: Some(ids.provider.clone()),
            resources: options.resources.clone(),
            class: Some("default".into()),
        },
    );
    slice.metadata.namespace = Some(tenant.clone());
    slice.metadata.labels = Some([(REMOTE_CLUSTER_ID.to_string(), ids.provider.clone())].into());
    slice.metadata.annotations = Some(
        [(
            CREATE_VIRTUAL_NODE.to_string(),
            options.create_virtual_node.to_string(),
        )]
        .into(),
    );
    let mut body = serde_json::to_value(&slice).unwrap_or_default();
    if let Some(o) = body.as_object_mut() {
        o.remove("status");
    }
    let slices: Api<ResourceSlice> = Api::namespaced(consumer.client.clone(), &tenant);
    let before = slices
        .get_opt(&ids.provider)
        .await
        .map_err(api_err("reading the ResourceSlice"))?;
    slices
        .patch(
            &ids.provider,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await
        .map_err(api_err("writing the ResourceSlice"))?;
    // A changed request waits for a new answer, not the old one.
    if before.is_some_and(|b| b.spec != slice.spec && b.status.is_some()) {
        slices
            .patch_status(
                &ids.provider,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": null})),
            )
            .await
            .map_err(api_err("resetting the ResourceSlice's status"))?;
    }
    Ok(())
}

async fn wait_granted(
    consumer: &Side,
    ids: &Peering,
    timeout: Duration,
    progress: &mut dyn FnMut(&str),
) -> Result<(), PeerError> {
    let api: Api<ResourceSlice> =
        Api::namespaced(consumer.client.clone(), &tenant_namespace(&ids.provider));
    let start = Instant::now();
    loop {
        let slice = api.get_opt(&ids.provider).await.ok().flatten();
        let status = slice.and_then(|s| s.status).unwrap_or_default();
        if let Some(c) = status.conditions.iter().find(|c| c.type_ == "Resources") {
            match c.status.as_str() {
                "Accepted" => {
                    progress(&format!(
                        "resources: granted {}",
                        describe(&status.resources)
                    ));
                    return Ok(());
                }
                "Denied" => return Err(PeerError::Denied(c.message.clone())),
                _ => {}
            }
        }
        if start.elapsed() > timeout {
            return Err(PeerError::Timeout {
                seconds: timeout.as_secs(),
                what: format!(
                    "the provider to answer ResourceSlice {}/{} (is the provider's peering controller running?)",
                    tenant_namespace(&ids.provider),
                    ids.provider
                ),
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `cpu 4, memory 8Gi, pods 110`.
pub fn describe(resources: &BTreeMap<String, Quantity>) -> String {
    if resources.is_empty() {
        return "nothing".into();
    }
    resources
        .iter()
        .map(|(k, Quantity(v))| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

async fn wait_node_ready(
    consumer: &Side,
    ids: &Peering,
    timeout: Duration,
    progress: &mut dyn FnMut(&str),
) -> Result<(), PeerError> {
    let nodes: Api<Node> = Api::all(consumer.client.clone());
    let name = virtual_node_name(&ids.provider);
    let start = Instant::now();
    loop {
        let ready = nodes.get_opt(&name).await.ok().flatten().is_some_and(|n| {
            n.status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        });
        if ready {
            progress(&format!("offloading: virtual node {name} Ready"));
            return Ok(());
        }
        if start.elapsed() > timeout {
            return Err(PeerError::Timeout {
                seconds: timeout.as_secs(),
                what: format!("virtual node {name} to be Ready"),
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits for the tunnel between the peers, as the consumer's gateway
/// reports it; what it says is shown, a failure does not undo the
/// peering (offloading works without it).
async fn wait_network(
    consumer: &Side,
    ids: &Peering,
    timeout: Duration,
    progress: &mut dyn FnMut(&str),
) {
    let start = Instant::now();
    loop {
        let condition = crate::network::condition(&consumer.client, &ids.provider).await;
        match condition {
            Some(c) if c.status == "Established" => {
                progress("networking: connected (WireGuard tunnel between the gateways)");
                return;
            }
            Some(c) if c.status == "Error" => {
                progress(&format!("networking: error: {}", c.message));
                return;
            }
            _ => {}
        }
        if start.elapsed() > timeout {
            progress("networking: not connected yet (see `flotilla network show connections`)");
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Removes consumer → provider: drains the virtual node (its pods are
/// deleted in the consumer, so their remote copies go), then every object
/// of the peering on both sides. The provider may be unreachable: what is
/// left there is reported.
pub async fn unpeer(
    consumer: &Side,
    provider: &Side,
    timeout: Duration,
    progress: &mut dyn FnMut(&str),
) -> Result<Peering, PeerError> {
    let ids = identify(consumer, provider).await?;
    let c = &consumer.client;
    let node = virtual_node_name(&ids.provider);
    let nodes: Api<Node> = Api::all(c.clone());
    if nodes.get_opt(&node).await.ok().flatten().is_some() {
        let _ = nodes
            .patch(
                &node,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"unschedulable": true}})),
            )
            .await;
        let pods: Api<Pod> = Api::all(c.clone());
        let on_node = ListParams::default().fields(&format!("spec.nodeName={node}"));
        let start = Instant::now();
        loop {
            let list = pods
                .list(&on_node)
                .await
                .map_err(api_err("listing the virtual node's pods"))?;
            if list.items.is_empty() {
                break;
            }
            for p in &list.items {
                if p.metadata.deletion_timestamp.is_none() {
                    let api: Api<Pod> =
                        Api::namespaced(c.clone(), &p.namespace().unwrap_or_default());
                    let _ = api.delete(&p.name_any(), &DeleteParams::default()).await;
                }
            }
            if start.elapsed() > timeout {
                return Err(PeerError::Timeout {
                    seconds: timeout.as_secs(),
                    what: format!("{} pods to leave virtual node {node}", list.items.len()),
                });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        progress(&format!("offloading: virtual node {node} drained"));
    }
    let tenant = tenant_namespace(&ids.provider);
    // The slice first: with it gone, nothing makes the VirtualNode again.
    let _ = Api::<ResourceSlice>::namespaced(c.clone(), &tenant)
        .delete(&ids.provider, &DeleteParams::default())
        .await;
    let _ = Api::<VirtualNode>::namespaced(c.clone(), &tenant)
        .delete(&ids.provider, &DeleteParams::default())
        .await;
    let _ = nodes.delete(&node, &DeleteParams::default()).await;
    crate::network::disconnect(
        c,
        &provider.client,
        &provider.credentials.server,
        (&ids.consumer, &ids.provider),
    )
    .await;
    // The provider's side: twin namespaces, the tenant (identity, slices),
    // the ClusterRole, the ForeignCluster. A tenant namespace also serves
    // the other direction of a bidirectional peering: then only this
    // direction's objects go.
    let p = &provider.client;
    let namespaces: Api<Namespace> = Api::all(p.clone());
    let theirs = ListParams::default().labels(&format!("{REMOTE_CLUSTER_ID}={}", ids.consumer));
    let twins = namespaces
        .list(&theirs)
        .await
        .map_err(|e| classify(e, "provider", "--remote-kubeconfig"))?;
    for ns in twins.items {
        if !ns.labels().contains_key(TENANT_NAMESPACE_LABEL) {
            let _ = namespaces
                .delete(&ns.name_any(), &DeleteParams::default())
                .await;
        }
    }
    let _ = Api::<ClusterRole>::all(p.clone())
        .delete(&identity_name(&ids.consumer), &DeleteParams::default())
        .await;
    let provider_tenant = tenant_namespace(&ids.consumer);
    let both_ways = has_role(p, &ids.consumer, "Provider").await;
    if both_ways {
        remove_consumer_objects(p, &provider_tenant, &ids.consumer).await;
    } else {
        let _ = namespaces
            .delete(&provider_tenant, &DeleteParams::default())
            .await;
    }
    remove_role(p, &ids.consumer, "Consumer").await?;
    // The consumer's side.
    let consumer_both_ways = has_role(c, &ids.provider, "Consumer").await;
    if consumer_both_ways {
        let _ = Api::<Secret>::namespaced(c.clone(), &tenant)
            .delete(
                &remote::kubeconfig_secret_name(&ids.provider),
                &DeleteParams::default(),
            )
            .await;
    } else {
        let _ = Api::<Namespace>::all(c.clone())
            .delete(&tenant, &DeleteParams::default())
            .await;
    }
    remove_role(c, &ids.provider, "Provider").await?;
    // The tenant namespaces deleted are gone before unpeer says done.
    let start = Instant::now();
    let mut deleted = Vec::new();
    if !both_ways {
        deleted.push((p, provider_tenant));
    }
    if !consumer_both_ways {
        deleted.push((c, tenant.clone()));
    }
    for (client, ns) in deleted {
        let api: Api<Namespace> = Api::all(client.clone());
        while api.get_opt(&ns).await.ok().flatten().is_some() {
            if start.elapsed() > timeout {
                return Err(PeerError::Timeout {
                    seconds: timeout.as_secs(),
                    what: format!("namespace {ns} to be deleted"),
                });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    progress("authentication: identity and tenant namespaces removed");
    Ok(ids)
}

/// Whether this cluster's ForeignCluster `id` has `role` (alone or with
/// the other).
async fn has_role(client: &Client, id: &str, role: &str) -> bool {
    Api::<ForeignCluster>::all(client.clone())
        .get_opt(id)
        .await
        .ok()
        .flatten()
        .and_then(|fc| fc.status)
        .is_some_and(|s| s.role.contains(role))
}

/// A consumer's objects in its tenant namespace of a provider: its
/// identity, its slices and its namespace map.
async fn remove_consumer_objects(provider: &Client, ns: &str, consumer: &str) {
    let name = identity_name(consumer);
    let params = DeleteParams::default();
    let _ = Api::<ServiceAccount>::namespaced(provider.clone(), ns)
        .delete(&name, &params)
        .await;
    let _ = Api::<Role>::namespaced(provider.clone(), ns)
        .delete(&name, &params)
        .await;
    let _ = Api::<RoleBinding>::namespaced(provider.clone(), ns)
        .delete(&name, &params)
        .await;
    let _ = Api::<Secret>::namespaced(provider.clone(), ns)
        .delete(&name, &params)
        .await;
    let slices: Api<ResourceSlice> = Api::namespaced(provider.clone(), ns);
    if let Ok(list) = slices.list(&ListParams::default()).await {
        for s in list.items {
            if s.spec.consumer_cluster_id.as_deref() == Some(consumer) {
                let _ = slices.delete(&s.name_any(), &params).await;
            }
        }
    }
    let _ = Api::<crate::api::NamespaceMap>::namespaced(provider.clone(), ns)
        .delete(consumer, &params)
        .await;
}

/// Deletes ForeignCluster `id`, or keeps it with the other role.
async fn remove_role(client: &Client, id: &str, role: &str) -> Result<(), PeerError> {
    let api: Api<ForeignCluster> = Api::all(client.clone());
    let Some(fc) = api.get_opt(id).await.ok().flatten() else {
        return Ok(());
    };
    let current = fc.status.map(|s| s.role).unwrap_or_default();
    match without_role(&current, role) {
        Some(left) => {
            api.patch_status(
                id,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"role": left}})),
            )
            .await
            .map_err(api_err(format!("updating ForeignCluster {id}")))?;
        }
        None => {
            let _ = api.delete(id, &DeleteParams::default()).await;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_combine_and_split() {
        assert_eq!(merge_role("Consumer", "Provider"), "ConsumerAndProvider");
        assert_eq!(merge_role("", "Provider"), "Provider");
        assert_eq!(
            merge_role("ConsumerAndProvider", "Consumer"),
            "ConsumerAndProvider"
        );
        assert_eq!(
            without_role("ConsumerAndProvider", "Consumer"),
            Some("Provider")
        );
        assert_eq!(without_role("Consumer", "Consumer"), None);
    }
}
