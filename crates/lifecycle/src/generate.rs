//! `flotilla cluster generate`: the manifests `clusterctl generate cluster
//! --infrastructure docker` writes, shaped as CAPD's templates (a Cluster,
//! its DockerCluster, a KubeadmControlPlane with its DockerMachineTemplate,
//! and a MachineDeployment with its DockerMachineTemplate and
//! KubeadmConfigTemplate), for the kinds this control plane reconciles.

use serde_json::{Value, json};

use crate::admission::valid_version;

/// What the generated cluster is.
#[derive(Clone, Debug)]
pub struct Options {
    pub name: String,
    pub namespace: String,
    pub kubernetes_version: String,
    pub control_plane_machines: u32,
    /// One MachineDeployment, `<name>-<pool>`, per pool.
    pub workers: Vec<Pool>,
    pub pod_cidr: String,
    pub service_cidr: String,
    /// Only `""` (the KCP and MachineDeployment shape) for now.
    pub flavor: String,
    /// The members' runtime (`sim` or `netns`), as the Cluster's
    /// `lifecycle.flotilla.io/runtime` annotation; None: the provider's
    /// default (sim).
    pub runtime: Option<String>,
}

/// A pool of worker machines: one MachineDeployment.
#[derive(Clone, Debug)]
pub struct Pool {
    pub name: String,
    pub replicas: u32,
    /// The rolling update's `maxSurge`/`maxUnavailable` (a count or a
    /// percentage); None: upstream's defaults.
    pub max_surge: Option<Value>,
    pub max_unavailable: Option<Value>,
}

impl Pool {
    /// clusterctl's one pool, `md-0`.
    pub fn md0(replicas: u32) -> Pool {
        Pool {
            name: "md-0".into(),
            replicas,
            max_surge: None,
            max_unavailable: None,
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum GenerateError {
    #[error("--kubernetes-version {0:?} is not a semantic version (try v1.33.0)")]
    Version(String),
    #[error("{0:?} is not a valid cluster name: {1}")]
    Name(String, String),
    #[error(
        "--flavor {0:?}: flavors are not generated here; leave --flavor out, or apply the quick start's ClusterClass manifests (clusterclass-quick-start.yaml and its cluster) as they are"
    )]
    Flavor(String),
    #[error("--control-plane-machine-count must be at least 1")]
    NoControlPlane,
    #[error("--runtime {0:?} is not a runtime (use sim or netns)")]
    Runtime(String),
}

fn api(group: &str) -> String {
    format!("{group}/{}", crate::api::VERSION)
}

/// The manifests, in the order they apply.
pub fn manifests(o: &Options) -> Result<Vec<Value>, GenerateError> {
    if !valid_version(&o.kubernetes_version) {
        return Err(GenerateError::Version(o.kubernetes_version.clone()));
    }
    let problems = flotilla_core::validation::validate_dns1123_label(&o.name);
    if !problems.is_empty() {
        return Err(GenerateError::Name(o.name.clone(), problems.join("; ")));
    }
    if !o.flavor.is_empty() {
        return Err(GenerateError::Flavor(o.flavor.clone()));
    }
    if o.control_plane_machines == 0 {
        return Err(GenerateError::NoControlPlane);
    }
    if let Some(r) = &o.runtime
        && r != "sim"
        && r != "netns"
    {
        return Err(GenerateError::Runtime(r.clone()));
    }
    let version = if o.kubernetes_version.starts_with('v') {
        o.kubernetes_version.clone()
    } else {
        format!("v{}", o.kubernetes_version)
    };
    let (name, ns) = (o.name.as_str(), o.namespace.as_str());
    let cp = format!("{name}-control-plane");
    let mut cluster_meta = json!({"name": name, "namespace": ns});
    if let Some(runtime) = &o.runtime {
        cluster_meta["annotations"] = json!({crate::docker::machine::RUNTIME_ANNOTATION: runtime});
    }
    let machine_template = |n: &str| {
        json!({
            "apiVersion": api(crate::api::INFRASTRUCTURE_GROUP),
            "kind": "DockerMachineTemplate",
            "metadata": {"name": n, "namespace": ns},
            "spec": {"template": {"spec": {"extraMounts": [{"containerPath": "/var/run/docker.sock", "hostPath": "/var/run/docker.sock"}]}}},
        })
    };
    let eviction = json!([{"name": "eviction-hard", "value": "nodefs.available<0%,nodefs.inodesFree<0%,imagefs.available<0%"}]);
    let mut manifests = vec![
        json!({
            "apiVersion": api(crate::api::CLUSTER_GROUP),
            "kind": "Cluster",
            "metadata": cluster_meta,
            "spec": {
                "clusterNetwork": {
                    "pods": {"cidrBlocks": [o.pod_cidr]},
                    "services": {"cidrBlocks": [o.service_cidr]},
                    "serviceDomain": "cluster.local",
                },
                "controlPlaneRef": {"apiGroup": crate::api::CONTROLPLANE_GROUP, "kind": "KubeadmControlPlane", "name": cp},
                "infrastructureRef": {"apiGroup": crate::api::INFRASTRUCTURE_GROUP, "kind": "DockerCluster", "name": name},
            },
        }),
        json!({
            "apiVersion": api(crate::api::INFRASTRUCTURE_GROUP),
            "kind": "DockerCluster",
            "metadata": {"name": name, "namespace": ns},
        }),
        machine_template(&cp),
        json!({
            "apiVersion": api(crate::api::CONTROLPLANE_GROUP),
            "kind": "KubeadmControlPlane",
            "metadata": {"name": cp, "namespace": ns},
            "spec": {
                "replicas": o.control_plane_machines,
                "version": version,
                "machineTemplate": {"spec": {"infrastructureRef": {"apiGroup": crate::api::INFRASTRUCTURE_GROUP, "kind": "DockerMachineTemplate", "name": cp}}},
                "kubeadmConfigSpec": {
                    "clusterConfiguration": {"apiServer": {"certSANs": ["localhost", "127.0.0.1", "0.0.0.0", "host.docker.internal"]}},
                    "initConfiguration": {"nodeRegistration": {"kubeletExtraArgs": eviction}},
                    "joinConfiguration": {"nodeRegistration": {"kubeletExtraArgs": eviction}},
                },
            },
        }),
    ];
    for pool in &o.workers {
        let md = format!("{name}-{}", pool.name);
        let mut deployment = json!({
            "apiVersion": api(crate::api::CLUSTER_GROUP),
            "kind": "MachineDeployment",
            "metadata": {"name": md, "namespace": ns},
            "spec": {
                "clusterName": name,
                "replicas": pool.replicas,
                "selector": {"matchLabels": null},
                "template": {"spec": {
                    "clusterName": name,
                    "version": version,
                    "bootstrap": {"configRef": {"apiGroup": crate::api::BOOTSTRAP_GROUP, "kind": "KubeadmConfigTemplate", "name": md}},
                    "infrastructureRef": {"apiGroup": crate::api::INFRASTRUCTURE_GROUP, "kind": "DockerMachineTemplate", "name": md},
                }},
            },
        });
        if pool.max_surge.is_some() || pool.max_unavailable.is_some() {
            let mut rolling = json!({});
            if let Some(v) = &pool.max_surge {
                rolling["maxSurge"] = v.clone();
            }
            if let Some(v) = &pool.max_unavailable {
                rolling["maxUnavailable"] = v.clone();
            }
            deployment["spec"]["rollout"] =
                json!({"strategy": {"type": "RollingUpdate", "rollingUpdate": rolling}});
        }
        manifests.extend([
            machine_template(&md),
            json!({
                "apiVersion": api(crate::api::BOOTSTRAP_GROUP),
                "kind": "KubeadmConfigTemplate",
                "metadata": {"name": md, "namespace": ns},
                "spec": {"template": {"spec": {"joinConfiguration": {"nodeRegistration": {"kubeletExtraArgs": eviction}}}}},
            }),
            deployment,
        ]);
    }
    Ok(manifests)
}

/// The manifests as one YAML stream.
pub fn yaml(o: &Options) -> Result<String, GenerateError> {
    Ok(manifests(o)?
        .iter()
        .map(|m| serde_yaml::to_string(m).unwrap_or_default())
        .collect::<Vec<_>>()
        .join("---\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> Options {
        Options {
            name: "dev".into(),
            namespace: "default".into(),
            kubernetes_version: "v1.33.0".into(),
            control_plane_machines: 1,
            workers: vec![Pool::md0(3)],
            pod_cidr: "192.168.0.0/16".into(),
            service_cidr: "10.128.0.0/12".into(),
            flavor: String::new(),
            runtime: None,
        }
    }

    #[test]
    fn writes_a_cluster_its_control_plane_and_workers() {
        let kinds: Vec<String> = manifests(&options())
            .unwrap()
            .iter()
            .map(|m| m["kind"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(
            kinds,
            [
                "Cluster",
                "DockerCluster",
                "DockerMachineTemplate",
                "KubeadmControlPlane",
                "DockerMachineTemplate",
                "KubeadmConfigTemplate",
                "MachineDeployment"
            ]
        );
        assert!(yaml(&options()).unwrap().contains("replicas: 3"));
    }

    #[test]
    fn refuses_what_would_not_provision() {
        let bad = Options {
            kubernetes_version: "latest".into(),
            ..options()
        };
        assert_eq!(
            manifests(&bad),
            Err(GenerateError::Version("latest".into()))
        );
        let bad = Options {
            flavor: "development".into(),
            ..options()
        };
        assert!(matches!(manifests(&bad), Err(GenerateError::Flavor(_))));
    }
}
