//! What a Shoot is made of, without I/O: the Cluster API objects of its
//! control plane and worker pools (the same manifests `flotilla cluster
//! generate` writes), and the status Gardener reports of it (the last
//! operation, the health conditions, the label `kubectl get shoots`
//! shows), computed from what those objects report.

use serde_json::{Value, json};

use super::api::{POOL_LABEL, SHOOT_NAME_LABEL};
use crate::generate::{self, Pool};
use crate::objects;

/// Gardener's defaults for a Shoot's networks where neither it nor its
/// Seed names them.
pub const DEFAULT_PODS: &str = "100.96.0.0/11";
pub const DEFAULT_SERVICES: &str = "100.64.0.0/13";

pub fn hibernated_in_spec(shoot: &Value) -> bool {
    shoot["spec"]["hibernation"]["enabled"].as_bool() == Some(true)
}

/// The worker pools: `minimum` machines each (the autoscaler's floor;
/// none while hibernated), rolled with the pool's maxSurge and
/// maxUnavailable.
pub fn pools(shoot: &Value) -> Vec<Pool> {
    let hibernated = hibernated_in_spec(shoot);
    shoot["spec"]["provider"]["workers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|w| {
            let name = w["name"].as_str()?;
            let minimum = w["minimum"].as_u64().unwrap_or(1);
            let maximum = w["maximum"].as_u64().unwrap_or(minimum);
            Some(Pool {
                name: name.to_string(),
                replicas: if hibernated {
                    0
                } else {
                    u32::try_from(minimum.min(maximum)).unwrap_or(u32::MAX)
                },
                max_surge: Some(w.get("maxSurge").cloned().unwrap_or(json!(1))),
                max_unavailable: Some(w.get("maxUnavailable").cloned().unwrap_or(json!(0))),
            })
        })
        .collect()
}

/// The Cluster API objects of `shoot`, labelled with it and owned by it.
pub fn manifests(shoot: &Value) -> Result<Vec<Value>, String> {
    let name = objects::name(shoot);
    let networking = &shoot["spec"]["networking"];
    let options = generate::Options {
        name: name.to_string(),
        namespace: objects::namespace(shoot).to_string(),
        kubernetes_version: shoot["spec"]["kubernetes"]["version"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        control_plane_machines: 1,
        workers: pools(shoot),
        pod_cidr: networking["pods"]
            .as_str()
            .unwrap_or(DEFAULT_PODS)
            .to_string(),
        service_cidr: networking["services"]
            .as_str()
            .unwrap_or(DEFAULT_SERVICES)
            .to_string(),
        flavor: String::new(),
        // Flotilla's choice of runtime passes from the Shoot to its Cluster.
        runtime: objects::annotation(shoot, crate::docker::machine::RUNTIME_ANNOTATION)
            .map(String::from),
    };
    let mut manifests = generate::manifests(&options).map_err(|e| e.to_string())?;
    // The Shoot's own labels select its member in the fleet.
    let shoot_labels: serde_json::Map<String, Value> = shoot["metadata"]["labels"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| !k.contains("gardener.cloud/"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let prefix = format!("{name}-");
    for m in &mut manifests {
        let kind = m["kind"].as_str().unwrap_or_default().to_string();
        let object_name = objects::name(m).to_string();
        let mut labels = json!({SHOOT_NAME_LABEL: name});
        if kind == "Cluster" {
            for (k, v) in &shoot_labels {
                labels[k] = v.clone();
            }
        }
        let pool = object_name.strip_prefix(&prefix).filter(|p| {
            *p != "control-plane"
                && matches!(
                    kind.as_str(),
                    "MachineDeployment" | "KubeadmConfigTemplate" | "DockerMachineTemplate"
                )
        });
        if let Some(pool) = pool {
            labels[POOL_LABEL] = json!(pool);
        }
        m["metadata"]["labels"] = labels;
        m["metadata"]["ownerReferences"] = json!([objects::owner_ref(shoot, true)]);
    }
    Ok(manifests)
}

/// What the Cluster API objects of a Shoot report, read by the controller.
#[derive(Default)]
pub struct Observed {
    pub cluster: Option<Value>,
    pub control_plane: Option<Value>,
    pub deployments: Vec<Value>,
    /// Whether the shoot's API server answered.
    pub api_available: bool,
    /// The shoot's nodes: (ready, all), when its API answered.
    pub nodes: Option<(usize, usize)>,
    /// Why the objects could not be made, if they could not.
    pub error: Option<String>,
}

impl Observed {
    fn workers_wanted(&self) -> i64 {
        self.deployments
            .iter()
            .map(|d| d["spec"]["replicas"].as_i64().unwrap_or(0))
            .sum()
    }

    fn workers_ready(&self) -> i64 {
        self.deployments
            .iter()
            .map(|d| d["status"]["readyReplicas"].as_i64().unwrap_or(0))
            .sum()
    }

    fn workers_present(&self) -> i64 {
        self.deployments
            .iter()
            .map(|d| d["status"]["replicas"].as_i64().unwrap_or(0))
            .sum()
    }

    /// Every pool has its machines, all ready, and no more.
    fn workers_settled(&self) -> bool {
        self.deployments.iter().all(|d| {
            let want = d["spec"]["replicas"].as_i64().unwrap_or(0);
            d["status"]["replicas"].as_i64().unwrap_or(0) == want
                && d["status"]["readyReplicas"].as_i64().unwrap_or(0) == want
                && d["status"]["upToDateReplicas"]
                    .as_i64()
                    .or_else(|| d["status"]["updatedReplicas"].as_i64())
                    .unwrap_or(want)
                    == want
        }) && self.nodes.is_none_or(|(ready, all)| ready == all)
    }
}

/// The shoot's API server address, as its kubeconfig names it.
pub fn endpoint(cluster: &Value) -> Option<String> {
    let e = &cluster["spec"]["controlPlaneEndpoint"];
    let host = e["host"].as_str().filter(|h| !h.is_empty())?;
    let port = e["port"].as_i64()?;
    Some(format!("https://{host}:{port}"))
}

/// A Gardener condition (`lastTransitionTime` while the status holds,
/// `lastUpdateTime` while nothing changes), from the previous list.
fn condition(previous: &Value, type_: &str, status: &str, reason: &str, message: &str) -> Value {
    let now = objects::now();
    let old = previous["conditions"]
        .as_array()
        .and_then(|l| l.iter().find(|c| c["type"] == type_));
    let same_status = old.is_some_and(|c| c["status"] == status);
    let same = same_status && old.is_some_and(|c| c["reason"] == reason && c["message"] == message);
    let keep = |field: &str, unchanged: bool| {
        old.filter(|_| unchanged)
            .map(|c| c[field].clone())
            .filter(|t| !t.is_null())
            .unwrap_or_else(|| json!(now))
    };
    json!({
        "type": type_,
        "status": status,
        "lastTransitionTime": keep("lastTransitionTime", same_status),
        "lastUpdateTime": keep("lastUpdateTime", same),
        "reason": reason,
        "message": message,
    })
}

/// Gardener's health conditions of the shoot.
fn conditions(previous: &Value, o: &Observed, hibernated: bool) -> Vec<Value> {
    let cp_available = o
        .control_plane
        .as_ref()
        .is_some_and(|kcp| objects::condition_true(kcp, "Available"));
    let api = if o.api_available {
        (
            "True",
            "HealthzRequestSucceeded",
            "API server /healthz endpoint responded with success status code.".to_string(),
        )
    } else if o.cluster.is_none() {
        (
            "Unknown",
            "ConditionPending",
            "The API server is not made yet.".to_string(),
        )
    } else {
        (
            "False",
            "HealthzRequestFailed",
            "API server /healthz endpoint did not answer.".to_string(),
        )
    };
    let control_plane = if cp_available {
        (
            "True",
            "ControlPlaneRunning",
            "All control plane components are healthy.".to_string(),
        )
    } else {
        (
            "False",
            "ControlPlaneNotAvailable",
            "The control plane has no available replica yet.".to_string(),
        )
    };
    let (wanted, present, ready) = (o.workers_wanted(), o.workers_present(), o.workers_ready());
    let nodes = match o.nodes {
        _ if hibernated && present == 0 => (
            "True",
            "EveryNodeReady",
            "The shoot is hibernated: it has no nodes.".to_string(),
        ),
        Some((r, all)) if r < all => (
            "False",
            "NodesUnhealthy",
            format!("{} of {all} nodes are not ready.", all - r),
        ),
        _ if present < wanted => (
            "False",
            "MissingNodes",
            format!("Too less worker nodes registered with the cluster ({present}/{wanted})."),
        ),
        _ if ready < wanted => (
            "False",
            "NodesUnhealthy",
            format!(
                "{} of {wanted} worker machines are not ready.",
                wanted - ready
            ),
        ),
        None => (
            "Unknown",
            "ConditionPending",
            "The nodes are not known yet.".to_string(),
        ),
        Some(_) => ("True", "EveryNodeReady", "All nodes are ready.".to_string()),
    };
    let system = if o.api_available {
        (
            "True",
            "SystemComponentsRunning",
            "All system components are healthy.".to_string(),
        )
    } else {
        (
            "Unknown",
            "ConditionPending",
            "Waiting for the API server.".to_string(),
        )
    };
    [
        ("APIServerAvailable", api),
        ("ControlPlaneHealthy", control_plane),
        (
            "ObservabilityComponentsHealthy",
            (
                "True",
                "ObservabilityComponentsRunning",
                "No observability components are deployed.".to_string(),
            ),
        ),
        ("EveryNodeReady", nodes),
        ("SystemComponentsHealthy", system),
    ]
    .into_iter()
    .map(|(t, (s, r, m))| condition(previous, t, s, r, &m))
    .collect()
}

/// The operation's progress, state and description.
fn progress(shoot: &Value, o: &Observed, hibernated: bool) -> (i64, &'static str, String) {
    if let Some(error) = &o.error {
        return (0, "Error", error.clone());
    }
    if shoot["spec"]["seedName"].as_str().is_none() {
        return (
            0,
            "Pending",
            "Waiting for the Shoot to be scheduled to a Seed.".into(),
        );
    }
    let Some(cluster) = &o.cluster else {
        return (
            10,
            "Processing",
            "Creating the shoot's control plane and workers.".into(),
        );
    };
    if cluster["status"]["phase"] == "Failed" {
        return (
            20,
            "Error",
            format!(
                "The cluster failed: {}",
                cluster["status"]["failureMessage"]
                    .as_str()
                    .unwrap_or("see the Cluster's conditions")
            ),
        );
    }
    if !objects::condition_true(cluster, "InfrastructureReady") {
        return (
            20,
            "Processing",
            "Waiting for the infrastructure (the control plane endpoint).".into(),
        );
    }
    if !objects::condition_true(cluster, "ControlPlaneInitialized") {
        return (
            40,
            "Processing",
            "Waiting for the control plane to be initialized.".into(),
        );
    }
    if !o.api_available {
        return (
            60,
            "Processing",
            "Waiting for the shoot's API server to answer.".into(),
        );
    }
    if !o.workers_settled() {
        let verb = if hibernated {
            "Scaling the workers to zero"
        } else {
            "Waiting for the worker nodes"
        };
        return (
            80,
            "Processing",
            format!(
                "{verb} ({} of {} ready).",
                o.workers_ready(),
                o.workers_wanted()
            ),
        );
    }
    let done = if hibernated {
        "Shoot cluster has been hibernated."
    } else {
        "Shoot cluster has been successfully reconciled."
    };
    (100, "Succeeded", done.into())
}

/// Whether the Shoot's last operation succeeded at its current
/// generation: nothing it asked for is pending.
pub fn settled(shoot: &Value) -> bool {
    let status = &shoot["status"];
    status["lastOperation"]["state"] == "Succeeded"
        && status["observedGeneration"].as_i64() == shoot["metadata"]["generation"].as_i64()
}

/// The Shoot's status, from its previous one and what its objects
/// report. Times are kept where nothing changed, so a status that says
/// the same is equal to the previous one.
pub fn status(shoot: &Value, o: &Observed, technical_id: &str) -> Value {
    let previous = &shoot["status"];
    let generation = shoot["metadata"]["generation"].as_i64().unwrap_or(1);
    let hibernated_spec = hibernated_in_spec(shoot);
    let (progress, state, description) = progress(shoot, o, hibernated_spec);
    let last = &previous["lastOperation"];
    let settled_before = settled(shoot);
    let type_ = if !last.is_object() || (last["type"] == "Create" && last["state"] != "Succeeded") {
        "Create"
    } else if settled_before {
        last["type"].as_str().unwrap_or("Reconcile")
    } else {
        "Reconcile"
    };
    let mut operation = json!({
        "type": type_, "state": state, "progress": progress, "description": description,
    });
    operation["lastUpdateTime"] = match last.get("lastUpdateTime") {
        Some(t)
            if last["type"] == type_
                && last["state"] == state
                && last["progress"] == progress
                && last["description"] == operation["description"] =>
        {
            t.clone()
        }
        _ => json!(objects::now()),
    };
    let hibernated = hibernated_spec && o.workers_present() == 0;
    let mut status = json!({
        "conditions": conditions(previous, o, hibernated),
        "lastOperation": operation,
        "hibernated": hibernated,
        "observedGeneration": generation,
        "technicalID": technical_id,
        "uid": shoot["metadata"]["uid"],
        "gardener": {"id": "flotilla", "name": "flotilla-lifecycle", "version": env!("CARGO_PKG_VERSION")},
    });
    // The hibernation schedules' record (the controller writes it).
    if let Some(t) = previous.get("lastHibernationTriggerTime") {
        status["lastHibernationTriggerTime"] = t.clone();
    }
    if state == "Error" {
        status["lastErrors"] =
            json!([{"description": description, "lastUpdateTime": operation["lastUpdateTime"]}]);
    }
    if let Some(seed) = shoot["spec"]["seedName"].as_str() {
        status["seedName"] = json!(seed);
    }
    if let Some(url) = o.cluster.as_ref().and_then(endpoint) {
        status["advertisedAddresses"] = json!([{"name": "external", "url": url}]);
    }
    status
}

/// The deletion's status: the Delete operation at `progress`.
pub fn deleting_status(shoot: &Value, progress: i64, description: &str) -> Value {
    let mut status = shoot["status"].clone();
    if !status.is_object() {
        status = json!({});
    }
    let last = &shoot["status"]["lastOperation"];
    let unchanged = last["type"] == "Delete" && last["progress"] == progress;
    status["lastOperation"] = json!({
        "type": "Delete", "state": "Processing", "progress": progress, "description": description,
        "lastUpdateTime": if unchanged { last["lastUpdateTime"].clone() } else { json!(objects::now()) },
    });
    status
}

/// `healthy`, `progressing`, `unhealthy` or `unknown`, as Gardener's care
/// controller labels a Shoot.
pub fn health_label(status: &Value) -> &'static str {
    let state = status["lastOperation"]["state"]
        .as_str()
        .unwrap_or_default();
    let all_true = status["conditions"]
        .as_array()
        .is_some_and(|l| l.iter().all(|c| c["status"] == "True"));
    let any_false = status["conditions"]
        .as_array()
        .is_some_and(|l| l.iter().any(|c| c["status"] == "False"));
    match state {
        "Succeeded" if all_true => "healthy",
        "Succeeded" if any_false => "unhealthy",
        "Error" | "Failed" => "unhealthy",
        "Processing" | "Pending" => "progressing",
        _ => "unknown",
    }
}

/// `shoot--<project>--<name>`, Gardener's technical ID.
pub fn technical_id(project: &str, name: &str) -> String {
    format!("shoot--{project}--{name}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shoot() -> Value {
        json!({
            "metadata": {"name": "local", "namespace": "garden-local", "uid": "u1", "generation": 2,
                         "labels": {"team": "a", "shoot.gardener.cloud/status": "healthy"}},
            "spec": {
                "kubernetes": {"version": "1.32.0"},
                "networking": {"pods": "10.3.0.0/16", "services": "10.4.0.0/16"},
                "seedName": "local",
                "provider": {"type": "local", "workers": [
                    {"name": "a", "minimum": 2, "maximum": 3, "maxSurge": 1, "maxUnavailable": 0},
                    {"name": "b", "minimum": 5, "maximum": 1},
                ]},
            },
        })
    }

    #[test]
    fn workers_become_one_deployment_per_pool_and_none_while_hibernated() {
        let manifests = manifests(&shoot()).unwrap();
        let deployments: Vec<&Value> = manifests
            .iter()
            .filter(|m| m["kind"] == "MachineDeployment")
            .collect();
        assert_eq!(deployments.len(), 2);
        assert_eq!(deployments[0]["metadata"]["name"], "local-a");
        assert_eq!(deployments[0]["spec"]["replicas"], 2);
        assert_eq!(deployments[0]["metadata"]["labels"][POOL_LABEL], "a");
        assert_eq!(
            deployments[0]["spec"]["template"]["spec"]["version"],
            "v1.32.0"
        );
        // minimum above maximum: the maximum holds.
        assert_eq!(deployments[1]["spec"]["replicas"], 1);
        let cluster = &manifests[0];
        assert_eq!(cluster["metadata"]["labels"]["team"], "a");
        assert!(
            cluster["metadata"]["labels"]
                .get("shoot.gardener.cloud/status")
                .is_none()
        );
        assert_eq!(
            cluster["spec"]["clusterNetwork"]["pods"]["cidrBlocks"][0],
            "10.3.0.0/16"
        );
        assert_eq!(
            cluster["metadata"]["ownerReferences"][0]["controller"],
            true
        );

        let mut hibernated = shoot();
        hibernated["spec"]["hibernation"] = json!({"enabled": true});
        assert!(pools(&hibernated).iter().all(|p| p.replicas == 0));
    }

    fn ready_cluster() -> Value {
        json!({"spec": {"controlPlaneEndpoint": {"host": "127.0.0.1", "port": 6443}},
               "status": {"phase": "Provisioned", "conditions": [
                   {"type": "InfrastructureReady", "status": "True"},
                   {"type": "ControlPlaneInitialized", "status": "True"}]}})
    }

    #[test]
    fn a_shoot_succeeds_when_its_nodes_are_ready_and_says_so_once() {
        let observed = Observed {
            cluster: Some(ready_cluster()),
            control_plane: Some(
                json!({"status": {"conditions": [{"type": "Available", "status": "True"}]}}),
            ),
            deployments: vec![
                json!({"spec": {"replicas": 2}, "status": {"replicas": 2, "readyReplicas": 2, "upToDateReplicas": 2}}),
            ],
            api_available: true,
            nodes: Some((3, 3)),
            error: None,
        };
        let mut s = shoot();
        let status = status(&s, &observed, "shoot--local--local");
        assert_eq!(status["lastOperation"]["type"], "Create");
        assert_eq!(status["lastOperation"]["state"], "Succeeded");
        assert_eq!(status["lastOperation"]["progress"], 100);
        assert_eq!(
            status["advertisedAddresses"][0]["url"],
            "https://127.0.0.1:6443"
        );
        assert_eq!(health_label(&status), "healthy");
        // Nothing changed: the same status, times and all.
        s["status"] = status.clone();
        assert_eq!(super::status(&s, &observed, "shoot--local--local"), status);
        // A new generation is a Reconcile.
        s["metadata"]["generation"] = json!(3);
        let waiting = Observed {
            nodes: Some((2, 3)),
            ..observed
        };
        let next = super::status(&s, &waiting, "shoot--local--local");
        assert_eq!(next["lastOperation"]["type"], "Reconcile");
        assert_eq!(next["lastOperation"]["state"], "Processing");
        let nodes = next["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "EveryNodeReady")
            .unwrap();
        assert_eq!(nodes["status"], "False");
    }

    #[test]
    fn an_unscheduled_shoot_is_pending() {
        let mut s = shoot();
        s["spec"]["seedName"] = Value::Null;
        let status = status(&s, &Observed::default(), "x");
        assert_eq!(status["lastOperation"]["state"], "Pending");
        assert_eq!(health_label(&status), "progressing");
    }
}
