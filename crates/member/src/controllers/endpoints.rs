//! The EndpointSlice and Endpoints controllers: for every Service with a
//! selector, the pods it selects that have an IP, with ready/serving
//! conditions following pod readiness, named target ports resolved per pod,
//! at most 100 endpoints per slice; slices are owned by the Service so they
//! go when it does.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Endpoints, Service, ServicePort};

use crate::pod::Pod;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::cluster::{Cluster, Informers, Result, TaskBox, boxed, is_status, run_controller};
use crate::informer::Change;
use crate::podutil;

const SERVICE_NAME: &str = "kubernetes.io/service-name";
const MANAGED_BY: &str = "endpointslice.kubernetes.io/managed-by";
const CONTROLLER: &str = "endpointslice-controller.k8s.io";
const MAX_PER_SLICE: usize = 100;

/// Which Services last listed each pod, so a pod that stops matching (its
/// labels changed, it was deleted) still updates them.
type Listed = Arc<Mutex<HashMap<String, HashSet<String>>>>;

/// The ports (name, target port, protocol) a group of pods resolves to.
type PortKey = Vec<(String, i32, String)>;
/// Endpoints subsets per port group: ready and not-ready addresses.
type Subsets = BTreeMap<PortKey, (Vec<Value>, Vec<Value>)>;

pub fn start(cluster: Arc<Cluster>, inf: &mut Informers) -> TaskBox {
    let own = inf.services.own_triggers(|_| true);
    let listed: Listed = Arc::default();
    let services = cluster.services.clone();
    let seen = listed.clone();
    let from_pods = inf.pods.triggers(move |change| {
        let pod = change.object();
        let ns = pod.namespace().unwrap_or_default();
        let pod_key = format!("{ns}/{}", pod.name_any());
        let mut names: HashSet<String> = seen.lock().get(&pod_key).cloned().unwrap_or_default();
        if let Change::Applied(p) = change {
            for svc in services.state() {
                if svc.namespace().as_deref() == Some(ns.as_str()) && selects(&svc, p) {
                    names.insert(svc.name_any());
                }
            }
        }
        names
            .into_iter()
            .map(|n| ObjectRef::new(&n).within(&ns))
            .collect()
    });
    run_controller(
        "endpointslice",
        cluster.services.clone(),
        vec![boxed(own), boxed(from_pods)],
        cluster,
        4,
        move |svc, cluster| reconcile(svc, cluster, listed.clone()),
    )
}

fn selector(svc: &Service) -> Option<&BTreeMap<String, String>> {
    let spec = svc.spec.as_ref()?;
    if spec.type_.as_deref() == Some("ExternalName") {
        return None;
    }
    spec.selector.as_ref().filter(|s| !s.is_empty())
}

fn selects(svc: &Service, pod: &Pod) -> bool {
    selector(svc).is_some_and(|sel| sel.iter().all(|(k, v)| pod.labels().get(k) == Some(v)))
}

/// The port a Service port reaches on `pod`, if the pod has it.
fn target_port(port: &ServicePort, pod: &Pod) -> Option<i32> {
    match &port.target_port {
        None => Some(port.port),
        Some(IntOrString::Int(n)) => Some(*n),
        Some(IntOrString::String(name)) => pod
            .spec
            .as_ref()?
            .containers
            .iter()
            .flat_map(|c| c.ports.iter().flatten())
            .find(|p| p.name.as_deref() == Some(name.as_str()))
            .map(|p| p.container_port),
    }
}

async fn reconcile(svc: Arc<Service>, cluster: Arc<Cluster>, listed: Listed) -> Result<Action> {
    let ns = svc.namespace().unwrap_or_default();
    let name = svc.name_any();
    if svc.metadata.deletion_timestamp.is_some() || selector(&svc).is_none() {
        return Ok(Action::await_change());
    }
    let publish_not_ready = svc
        .spec
        .as_ref()
        .and_then(|s| s.publish_not_ready_addresses)
        .unwrap_or(false);
    let ports: Vec<ServicePort> = svc
        .spec
        .as_ref()
        .and_then(|s| s.ports.clone())
        .unwrap_or_default();
    let zone_of: HashMap<String, String> = cluster
        .nodes
        .state()
        .iter()
        .filter_map(|n| {
            Some((
                n.name_any(),
                n.labels().get("topology.kubernetes.io/zone")?.clone(),
            ))
        })
        .collect();

    let mut pods: Vec<Arc<Pod>> = cluster
        .pods_by_namespace
        .get(&ns)
        .into_iter()
        .filter(|p| selects(&svc, p))
        .filter(|p| !matches!(podutil::phase(p), "Succeeded" | "Failed"))
        .filter(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.pod_ip.as_deref())
                .is_some_and(|ip| !ip.is_empty())
        })
        .collect();
    pods.sort_by_key(|p| p.name_any());
    {
        let mut l = listed.lock();
        for set in l.values_mut() {
            set.remove(&name);
        }
        for p in &pods {
            l.entry(format!("{ns}/{}", p.name_any()))
                .or_default()
                .insert(name.clone());
        }
        l.retain(|_, s| !s.is_empty());
    }

    // Pods group by the ports they resolve to; each group gets its slices.
    let mut groups: BTreeMap<PortKey, Vec<Value>> = BTreeMap::new();
    let mut subsets: Subsets = BTreeMap::new();
    for p in &pods {
        let resolved: PortKey = ports
            .iter()
            .filter_map(|sp| {
                Some((
                    sp.name.clone().unwrap_or_default(),
                    target_port(sp, p)?,
                    sp.protocol.clone().unwrap_or_else(|| "TCP".into()),
                ))
            })
            .collect();
        if resolved.is_empty() && !ports.is_empty() {
            continue;
        }
        let ip = p
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.clone())
            .unwrap_or_default();
        let node = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        let ready = podutil::is_ready(p) || publish_not_ready;
        let terminating = p.metadata.deletion_timestamp.is_some();
        let mut endpoint = json!({
            "addresses": [ip],
            "conditions": {"ready": ready && !terminating, "serving": ready, "terminating": terminating},
            "nodeName": node,
            "targetRef": {"kind": "Pod", "namespace": ns, "name": p.name_any(), "uid": p.uid().unwrap_or_default()},
        });
        if let Some(zone) = zone_of.get(&node) {
            endpoint["zone"] = json!(zone);
        }
        let spec = p.spec.as_ref();
        if let (Some(h), Some(sub)) = (
            spec.and_then(|s| s.hostname.as_ref()),
            spec.and_then(|s| s.subdomain.as_ref()),
        ) && *sub == name
        {
            endpoint["hostname"] = json!(h);
        }
        groups.entry(resolved.clone()).or_default().push(endpoint);
        let address = json!({"ip": ip, "nodeName": node,
            "targetRef": {"kind": "Pod", "namespace": ns, "name": p.name_any(), "uid": p.uid().unwrap_or_default()}});
        let entry = subsets.entry(resolved).or_default();
        if ready && !terminating {
            entry.0.push(address)
        } else {
            entry.1.push(address)
        }
    }
    if groups.is_empty() {
        // No endpoints still means one slice saying so, without ports (as
        // upstream's placeholder slice).
        groups.insert(Vec::new(), Vec::new());
    }
    let mut desired: Vec<Value> = Vec::new();
    for (resolved, endpoints) in &groups {
        let ports: Vec<Value> = resolved
            .iter()
            .map(|(n, p, proto)| json!({"name": n, "port": p, "protocol": proto}))
            .collect();
        let chunks: Vec<&[Value]> = if endpoints.is_empty() {
            vec![&[]]
        } else {
            endpoints.chunks(MAX_PER_SLICE).collect()
        };
        for chunk in chunks {
            desired.push(json!({"endpoints": chunk, "ports": ports}));
        }
    }
    sync_slices(&cluster, &svc, desired).await?;
    sync_endpoints(&cluster, &svc, &subsets).await?;
    Ok(Action::await_change())
}

async fn sync_slices(cluster: &Cluster, svc: &Service, desired: Vec<Value>) -> Result<()> {
    let ns = svc.namespace().unwrap_or_default();
    let name = svc.name_any();
    let api: Api<EndpointSlice> = Api::namespaced(cluster.clients.controller_manager.clone(), &ns);
    let selector = format!("{SERVICE_NAME}={name},{MANAGED_BY}={CONTROLLER}");
    let mut existing = api
        .list(&ListParams::default().labels(&selector))
        .await?
        .items;
    existing.sort_by_key(|s| s.name_any());
    let owner = podutil::controller_ref(svc);
    for (i, want) in desired.iter().enumerate() {
        let mut body = json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {
                "namespace": ns,
                "labels": {SERVICE_NAME: name, MANAGED_BY: CONTROLLER},
                "ownerReferences": [owner],
            },
            "addressType": "IPv4",
            "endpoints": want["endpoints"],
            "ports": want["ports"],
        });
        match existing.get(i) {
            Some(current) => {
                let now = serde_json::to_value(current).unwrap_or(Value::Null);
                let same = now.get("endpoints").unwrap_or(&json!([])) == &want["endpoints"]
                    && now.get("ports").unwrap_or(&json!([])) == &want["ports"];
                if !same {
                    let patch = json!({"endpoints": want["endpoints"], "ports": want["ports"]});
                    api.patch(
                        &current.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(&patch),
                    )
                    .await?;
                }
            }
            None => {
                body["metadata"]["generateName"] = json!(format!("{name}-"));
                let slice: EndpointSlice =
                    serde_json::from_value(body).map_err(kube::Error::SerdeError)?;
                api.create(&PostParams::default(), &slice).await?;
            }
        }
    }
    for extra in existing.iter().skip(desired.len()) {
        match api
            .delete(&extra.name_any(), &DeleteParams::default())
            .await
        {
            Ok(_) => {}
            Err(e) if is_status(&e, 404) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// The legacy Endpoints object, which `kubectl describe service` and older
/// clients still read.
async fn sync_endpoints(cluster: &Cluster, svc: &Service, subsets: &Subsets) -> Result<()> {
    let ns = svc.namespace().unwrap_or_default();
    let name = svc.name_any();
    let api: Api<Endpoints> = Api::namespaced(cluster.clients.controller_manager.clone(), &ns);
    let list: Vec<Value> = subsets
        .iter()
        .map(|(ports, (ready, not_ready))| {
            let mut s = json!({"ports": ports.iter().map(|(n, p, proto)| {
                let mut port = json!({"port": p, "protocol": proto});
                if !n.is_empty() { port["name"] = json!(n); }
                port
            }).collect::<Vec<_>>()});
            if !ready.is_empty() {
                s["addresses"] = json!(ready);
            }
            if !not_ready.is_empty() {
                s["notReadyAddresses"] = json!(not_ready);
            }
            s
        })
        .collect();
    let current = api.get_opt(&name).await?;
    let labels = svc.labels().clone();
    match current {
        Some(c) => {
            let now = serde_json::to_value(&c.subsets).unwrap_or(Value::Null);
            let want = if list.is_empty() {
                Value::Null
            } else {
                json!(list)
            };
            if now != want {
                let patch = json!({"subsets": want});
                api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await?;
            }
        }
        None => {
            let body = json!({"apiVersion": "v1", "kind": "Endpoints",
                "metadata": {"name": name, "namespace": ns, "labels": labels},
                "subsets": list});
            let ep: Endpoints = serde_json::from_value(body).map_err(kube::Error::SerdeError)?;
            match api.create(&PostParams::default(), &ep).await {
                Ok(_) => {}
                Err(e) if is_status(&e, 409) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(())
}
