//! Cluster API's kinds as upstream serves them: `cluster.x-k8s.io`, the
//! kubeadm bootstrap and control plane, and CAPD's infrastructure kinds.
//! v1beta2 is stored; v1beta1 is served too (deprecated, as upstream), so
//! clients of either version (Karmada's cluster discovery watches v1beta1)
//! find the kinds. Names, short names and printer columns are upstream's
//! (cluster-api v1.13); the schemas keep what is written.

use kube::api::ApiResource;
use serde_json::{Value, json};

pub const CLUSTER_GROUP: &str = "cluster.x-k8s.io";
pub const CONTROLPLANE_GROUP: &str = "controlplane.cluster.x-k8s.io";
pub const BOOTSTRAP_GROUP: &str = "bootstrap.cluster.x-k8s.io";
pub const INFRASTRUCTURE_GROUP: &str = "infrastructure.cluster.x-k8s.io";
/// The version stored and written by the controllers.
pub const VERSION: &str = "v1beta2";

/// Labels and annotations of the contract.
pub const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";
pub const CONTROL_PLANE_LABEL: &str = "cluster.x-k8s.io/control-plane";
pub const CONTROL_PLANE_NAME_LABEL: &str = "cluster.x-k8s.io/control-plane-name";
pub const DEPLOYMENT_NAME_LABEL: &str = "cluster.x-k8s.io/deployment-name";
pub const SET_NAME_LABEL: &str = "cluster.x-k8s.io/set-name";
pub const TEMPLATE_HASH_LABEL: &str = "machine-template-hash";
pub const CLONED_FROM_NAME: &str = "cluster.x-k8s.io/cloned-from-name";
pub const CLONED_FROM_KIND: &str = "cluster.x-k8s.io/cloned-from-groupkind";
/// The type of the Secrets of the contract (kubeconfig, CA, bootstrap data).
pub const SECRET_TYPE: &str = "cluster.x-k8s.io/secret";

/// Finalizers, upstream's names.
pub const CLUSTER_FINALIZER: &str = "cluster.cluster.x-k8s.io";
pub const MACHINE_FINALIZER: &str = "machine.cluster.x-k8s.io";
pub const MACHINESET_FINALIZER: &str = "cluster.x-k8s.io/machineset";
pub const MACHINEDEPLOYMENT_FINALIZER: &str = "cluster.x-k8s.io/machinedeployment";
pub const KCP_FINALIZER: &str = "kubeadm.controlplane.cluster.x-k8s.io";
pub const DOCKERCLUSTER_FINALIZER: &str = "dockercluster.infrastructure.cluster.x-k8s.io";
pub const DOCKERMACHINE_FINALIZER: &str = "dockermachine.infrastructure.cluster.x-k8s.io";

/// Flotilla's own knobs on Cluster API objects.
pub mod annotations {
    /// `"false"` on a Cluster: it is not joined to the fleet.
    pub const JOIN: &str = "lifecycle.flotilla.io/join";
    /// On a Karmada Cluster: the `namespace/name` of the Cluster API
    /// Cluster that joined it (so only that one unjoins it).
    pub const JOINED_FROM: &str = "lifecycle.flotilla.io/cluster-api-cluster";
}

/// One kind of the API.
pub struct Kind {
    pub group: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
    pub short_names: &'static [&'static str],
    /// Printer columns of v1beta1 and v1beta2.
    pub v1beta1: Vec<Value>,
    pub v1beta2: Vec<Value>,
    pub status: bool,
    /// `scale` with `.spec.replicas`, `.status.replicas`, `.status.selector`.
    pub scale: bool,
    /// A provider's kind: carries the contract labels Cluster API looks
    /// the served version up by.
    pub provider: bool,
}

impl Kind {
    pub fn resource(&self) -> ApiResource {
        resource(self.group, self.kind, self.plural)
    }

    pub fn crd(&self) -> Value {
        let version = |name: &str, columns: &[Value], storage: bool| {
            let mut subresources = json!({});
            if self.status {
                subresources["status"] = json!({});
            }
            if self.scale {
                subresources["scale"] = json!({
                    "specReplicasPath": ".spec.replicas",
                    "statusReplicasPath": ".status.replicas",
                    "labelSelectorPath": ".status.selector",
                });
            }
            json!({
                "name": name,
                "served": true,
                "storage": storage,
                "deprecated": !storage,
                "additionalPrinterColumns": columns,
                "subresources": subresources,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "metadata": {"type": "object"},
                        "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    },
                }},
            })
        };
        let mut names = json!({
            "kind": self.kind,
            "listKind": format!("{}List", self.kind),
            "plural": self.plural,
            "singular": self.kind.to_lowercase(),
            "categories": ["cluster-api"],
        });
        if !self.short_names.is_empty() {
            names["shortNames"] = json!(self.short_names);
        }
        let mut labels = json!({"app.kubernetes.io/part-of": "flotilla-lifecycle"});
        if self.provider {
            labels["cluster.x-k8s.io/v1beta1"] = json!("v1beta1");
            labels["cluster.x-k8s.io/v1beta2"] = json!("v1beta2");
        }
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{}.{}", self.plural, self.group), "labels": labels},
            "spec": {
                "group": self.group,
                "names": names,
                "scope": "Namespaced",
                "versions": [
                    version("v1beta1", &self.v1beta1, false),
                    version("v1beta2", &self.v1beta2, true),
                ],
            },
        })
    }
}

pub fn resource(group: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: VERSION.into(),
        api_version: format!("{group}/{VERSION}"),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// The resource of an object, from its apiVersion and kind.
pub fn resource_of(object: &Value) -> ApiResource {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let group = api_version.split_once('/').map_or("", |(g, _)| g);
    let kind = object["kind"].as_str().unwrap_or_default();
    resource(group, kind, &plural(kind))
}

fn col(name: &str, type_: &str, path: &str, description: &str) -> Value {
    json!({"name": name, "type": type_, "jsonPath": path, "description": description})
}

fn wide(name: &str, type_: &str, path: &str, description: &str) -> Value {
    json!({"name": name, "type": type_, "jsonPath": path, "description": description, "priority": 10})
}

fn age(kind: &str) -> Value {
    col(
        "Age",
        "date",
        ".metadata.creationTimestamp",
        &format!("Time duration since creation of {kind}"),
    )
}

fn condition(name: &str, type_: &str, description: &str) -> Value {
    col(
        name,
        "string",
        &format!(".status.conditions[?(@.type==\"{type_}\")].status"),
        description,
    )
}

fn paused() -> Value {
    json!({"name": "Paused", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Paused\")].status", "description": "Reconciliation paused", "priority": 10})
}

fn label_cluster() -> Value {
    col(
        "Cluster",
        "string",
        ".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']",
        "Cluster",
    )
}

fn replicas(kind: &str) -> Vec<Value> {
    vec![
        col(
            "Desired",
            "integer",
            ".spec.replicas",
            "The desired number of machines",
        ),
        col(
            "Current",
            "integer",
            ".status.replicas",
            "The number of machines",
        ),
        col(
            "Ready",
            "integer",
            ".status.readyReplicas",
            "The number of machines with Ready condition true",
        ),
        col(
            "Available",
            "integer",
            ".status.availableReplicas",
            "The number of machines with Available condition true",
        ),
        col(
            "Up-to-date",
            "integer",
            ".status.upToDateReplicas",
            "The number of machines with UpToDate condition true",
        ),
        paused(),
    ]
    .into_iter()
    .chain(std::iter::once(age(kind)))
    .collect()
}

pub fn cluster() -> Kind {
    let counts = |prefix: &str, path: &str, who: &str| {
        vec![
            col(
                &format!("{prefix} Desired"),
                "integer",
                &format!(".status.{path}.desiredReplicas"),
                &format!("The desired number of {who} machines"),
            ),
            wide(
                &format!("{prefix} Current"),
                "integer",
                &format!(".status.{path}.replicas"),
                &format!("The number of {who} machines"),
            ),
            wide(
                &format!("{prefix} Ready"),
                "integer",
                &format!(".status.{path}.readyReplicas"),
                &format!("The number of {who} machines with Ready condition true"),
            ),
            col(
                &format!("{prefix} Available"),
                "integer",
                &format!(".status.{path}.availableReplicas"),
                &format!("The number of {who} machines with Available condition true"),
            ),
            col(
                &format!("{prefix} Up-to-date"),
                "integer",
                &format!(".status.{path}.upToDateReplicas"),
                &format!("The number of {who} machines with UpToDate condition true"),
            ),
        ]
    };
    let phase = col(
        "Phase",
        "string",
        ".status.phase",
        "Cluster status such as Pending/Provisioning/Provisioned/Deleting/Failed",
    );
    let version = col(
        "Version",
        "string",
        ".spec.topology.version",
        "Kubernetes version associated with this Cluster",
    );
    let mut v1beta2 = vec![
        col(
            "ClusterClass",
            "string",
            ".spec.topology.classRef.name",
            "ClusterClass of this Cluster, empty if the Cluster is not using a ClusterClass",
        ),
        condition(
            "Available",
            "Available",
            "Cluster pass all availability checks",
        ),
    ];
    v1beta2.extend(counts("CP", "controlPlane", "control plane"));
    v1beta2.extend(counts("W", "workers", "worker"));
    v1beta2.extend([paused(), phase.clone(), age("Cluster"), version.clone()]);
    Kind {
        group: CLUSTER_GROUP,
        kind: "Cluster",
        plural: "clusters",
        short_names: &["cl"],
        v1beta1: vec![
            col(
                "ClusterClass",
                "string",
                ".spec.topology.class",
                "ClusterClass of this Cluster, empty if the Cluster is not using a ClusterClass",
            ),
            phase,
            age("Cluster"),
            version,
        ],
        v1beta2,
        status: true,
        scale: false,
        provider: false,
    }
}

pub fn machine() -> Kind {
    let cluster = col("Cluster", "string", ".spec.clusterName", "Cluster");
    let phase = col(
        "Phase",
        "string",
        ".status.phase",
        "Machine status such as Terminating/Pending/Running/Failed etc",
    );
    let version = col(
        "Version",
        "string",
        ".spec.version",
        "Kubernetes version associated with this Machine",
    );
    Kind {
        group: CLUSTER_GROUP,
        kind: "Machine",
        plural: "machines",
        short_names: &["ma"],
        v1beta1: vec![
            cluster.clone(),
            col(
                "NodeName",
                "string",
                ".status.nodeRef.name",
                "Node name associated with this machine",
            ),
            col("ProviderID", "string", ".spec.providerID", "Provider ID"),
            phase.clone(),
            age("Machine"),
            version.clone(),
        ],
        v1beta2: vec![
            cluster,
            col(
                "Node Name",
                "string",
                ".status.nodeRef.name",
                "Node name associated with this machine",
            ),
            wide("Provider ID", "string", ".spec.providerID", "Provider ID"),
            col(
                "Failure domain",
                "string",
                ".status.failureDomain",
                "The failure domain where the Machine has been scheduled",
            ),
            condition("Ready", "Ready", "Machine pass all readiness checks"),
            condition(
                "Available",
                "Available",
                "Machine is Ready for at least MinReadySeconds",
            ),
            condition(
                "Up-to-date",
                "UpToDate",
                "Machine spec matches the spec of the Machine's owner resource, e.g. MachineDeployment",
            ),
            wide(
                "Internal-IP",
                "string",
                ".status.addresses[?(@.type==\"InternalIP\")].address",
                "Internal IP of the machine",
            ),
            wide(
                "External-IP",
                "string",
                ".status.addresses[?(@.type==\"ExternalIP\")].address",
                "External IP of the machine",
            ),
            wide(
                "OS-Image",
                "string",
                ".status.nodeInfo.osImage",
                "OS Image reported by the node",
            ),
            paused(),
            phase,
            age("Machine"),
            version,
        ],
        status: true,
        scale: false,
        provider: false,
    }
}

pub fn machine_set() -> Kind {
    let cluster = col("Cluster", "string", ".spec.clusterName", "Cluster");
    let version = col(
        "Version",
        "string",
        ".spec.template.spec.version",
        "Kubernetes version associated with this MachineSet",
    );
    let mut v1beta2 = vec![cluster.clone()];
    v1beta2.extend(replicas("MachineSet"));
    v1beta2.push(version.clone());
    Kind {
        group: CLUSTER_GROUP,
        kind: "MachineSet",
        plural: "machinesets",
        short_names: &["ms"],
        v1beta1: vec![
            cluster,
            wide(
                "Desired",
                "integer",
                ".spec.replicas",
                "Total number of machines desired by this machineset",
            ),
            col(
                "Replicas",
                "integer",
                ".status.replicas",
                "Total number of non-terminated machines targeted by this machineset",
            ),
            col(
                "Ready",
                "integer",
                ".status.readyReplicas",
                "Total number of ready machines targeted by this machineset.",
            ),
            col(
                "Available",
                "integer",
                ".status.availableReplicas",
                "Total number of available machines (ready for at least minReadySeconds)",
            ),
            age("MachineSet"),
            version,
        ],
        v1beta2,
        status: true,
        scale: true,
        provider: false,
    }
}

pub fn machine_deployment() -> Kind {
    let cluster = col("Cluster", "string", ".spec.clusterName", "Cluster");
    let phase = col(
        "Phase",
        "string",
        ".status.phase",
        "MachineDeployment status such as ScalingUp/ScalingDown/Running/Failed/Unknown",
    );
    let version = col(
        "Version",
        "string",
        ".spec.template.spec.version",
        "Kubernetes version associated with this MachineDeployment",
    );
    let mut v1beta2 = vec![
        cluster.clone(),
        condition(
            "Available",
            "Available",
            "Cluster pass all availability checks",
        ),
    ];
    let counts = replicas("MachineDeployment");
    // Desired .. Paused, then Phase before Age.
    v1beta2.extend(counts[..counts.len() - 1].iter().cloned());
    v1beta2.extend([phase.clone(), age("MachineDeployment"), version.clone()]);
    Kind {
        group: CLUSTER_GROUP,
        kind: "MachineDeployment",
        plural: "machinedeployments",
        short_names: &["md"],
        v1beta1: vec![
            cluster,
            wide(
                "Desired",
                "integer",
                ".spec.replicas",
                "Total number of machines desired by this MachineDeployment",
            ),
            col(
                "Replicas",
                "integer",
                ".status.replicas",
                "Total number of non-terminated machines targeted by this MachineDeployment",
            ),
            col(
                "Ready",
                "integer",
                ".status.readyReplicas",
                "Total number of ready machines targeted by this MachineDeployment",
            ),
            col(
                "Updated",
                "integer",
                ".status.updatedReplicas",
                "Total number of non-terminated machines targeted by this deployment that have the desired template spec",
            ),
            col(
                "Unavailable",
                "integer",
                ".status.unavailableReplicas",
                "Total number of unavailable machines targeted by this MachineDeployment",
            ),
            phase,
            age("MachineDeployment"),
            version,
        ],
        v1beta2,
        status: true,
        scale: true,
        provider: false,
    }
}

pub fn machine_health_check() -> Kind {
    let cluster = col("Cluster", "string", ".spec.clusterName", "Cluster");
    Kind {
        group: CLUSTER_GROUP,
        kind: "MachineHealthCheck",
        plural: "machinehealthchecks",
        short_names: &["mhc", "mhcs"],
        v1beta1: vec![
            cluster.clone(),
            col(
                "ExpectedMachines",
                "integer",
                ".status.expectedMachines",
                "Number of machines currently monitored",
            ),
            col(
                "MaxUnhealthy",
                "string",
                ".spec.maxUnhealthy",
                "Maximum number of unhealthy machines allowed",
            ),
            col(
                "CurrentHealthy",
                "integer",
                ".status.currentHealthy",
                "Current observed healthy machines",
            ),
            age("MachineHealthCheck"),
        ],
        v1beta2: vec![
            cluster,
            col(
                "Replicas",
                "integer",
                ".status.expectedMachines",
                "Number of machines currently monitored",
            ),
            col(
                "Healthy",
                "integer",
                ".status.currentHealthy",
                "Current observed healthy machines",
            ),
            paused(),
            age("MachineHealthCheck"),
        ],
        status: true,
        scale: false,
        provider: false,
    }
}

pub fn cluster_class() -> Kind {
    Kind {
        group: CLUSTER_GROUP,
        kind: "ClusterClass",
        plural: "clusterclasses",
        short_names: &["cc"],
        v1beta1: vec![age("ClusterClass")],
        v1beta2: vec![
            paused(),
            condition("Variables Ready", "VariablesReady", "Variables ready"),
            age("ClusterClass"),
        ],
        status: true,
        scale: false,
        provider: false,
    }
}

pub fn kubeadm_control_plane() -> Kind {
    let version = col(
        "Version",
        "string",
        ".spec.version",
        "Kubernetes version associated with this control plane",
    );
    let mut v1beta2 = vec![
        label_cluster(),
        condition(
            "Available",
            "Available",
            "Cluster pass all availability checks",
        ),
    ];
    let counts = replicas("KubeadmControlPlane");
    v1beta2.extend(counts[..counts.len() - 1].iter().cloned());
    v1beta2.extend([
        col(
            "Initialized",
            "boolean",
            ".status.initialization.controlPlaneInitialized",
            "This denotes whether or not the control plane can accept requests",
        ),
        age("KubeadmControlPlane"),
        version.clone(),
    ]);
    Kind {
        group: CONTROLPLANE_GROUP,
        kind: "KubeadmControlPlane",
        plural: "kubeadmcontrolplanes",
        short_names: &["kcp"],
        v1beta1: vec![
            label_cluster(),
            col(
                "Initialized",
                "boolean",
                ".status.initialized",
                "This denotes whether or not the control plane has the uploaded kubeadm-config configmap",
            ),
            col(
                "API Server Available",
                "boolean",
                ".status.ready",
                "KubeadmControlPlane API Server is ready to receive requests",
            ),
            wide(
                "Desired",
                "integer",
                ".spec.replicas",
                "Total number of machines desired by this control plane",
            ),
            col(
                "Replicas",
                "integer",
                ".status.replicas",
                "Total number of non-terminated machines targeted by this control plane",
            ),
            col(
                "Ready",
                "integer",
                ".status.readyReplicas",
                "Total number of fully running and ready control plane machines",
            ),
            col(
                "Updated",
                "integer",
                ".status.updatedReplicas",
                "Total number of non-terminated machines targeted by this control plane that have the desired template spec",
            ),
            col(
                "Unavailable",
                "integer",
                ".status.unavailableReplicas",
                "Total number of unavailable machines targeted by this control plane",
            ),
            age("KubeadmControlPlane"),
            version,
        ],
        v1beta2,
        status: true,
        scale: true,
        provider: true,
    }
}

/// A template kind: no status, an Age column, and in v1beta2 the
/// ClusterClass that owns it.
fn template(group: &'static str, kind: &'static str, plural: &'static str) -> Kind {
    Kind {
        group,
        kind,
        plural,
        short_names: &[],
        v1beta1: vec![age(kind)],
        v1beta2: vec![
            col(
                "ClusterClass",
                "string",
                ".metadata.ownerReferences[?(@.kind==\"ClusterClass\")].name",
                "Name of the ClusterClass owning this template",
            ),
            age(kind),
        ],
        status: false,
        scale: false,
        provider: true,
    }
}

pub fn kubeadm_config() -> Kind {
    Kind {
        group: BOOTSTRAP_GROUP,
        kind: "KubeadmConfig",
        plural: "kubeadmconfigs",
        short_names: &[],
        v1beta1: vec![label_cluster(), age("KubeadmConfig")],
        v1beta2: vec![
            label_cluster(),
            paused(),
            col(
                "Data secret created",
                "string",
                ".status.initialization.dataSecretCreated",
                "Boostrap secret is created",
            ),
            age("KubeadmConfig"),
        ],
        status: true,
        scale: false,
        provider: true,
    }
}

pub fn docker_cluster() -> Kind {
    Kind {
        group: INFRASTRUCTURE_GROUP,
        kind: "DockerCluster",
        plural: "dockerclusters",
        short_names: &[],
        v1beta1: vec![label_cluster(), age("DockerCluster")],
        v1beta2: vec![label_cluster(), age("DockerCluster")],
        status: true,
        scale: false,
        provider: true,
    }
}

pub fn docker_machine() -> Kind {
    Kind {
        group: INFRASTRUCTURE_GROUP,
        kind: "DockerMachine",
        plural: "dockermachines",
        short_names: &[],
        v1beta1: vec![
            label_cluster(),
            col(
                "Machine",
                "string",
                ".metadata.ownerReferences[?(@.kind==\"Machine\")].name",
                "Machine object which owns with this DockerMachine",
            ),
            col("ProviderID", "string", ".spec.providerID", "Provider ID"),
            col("Ready", "string", ".status.ready", "Machine ready status"),
            age("DockerMachine"),
        ],
        v1beta2: vec![
            label_cluster(),
            wide("Provider ID", "string", ".spec.providerID", "Provider ID"),
            col(
                "Failure domain",
                "string",
                ".status.failureDomain",
                "The failure domain where the VSphereMachine has been scheduled",
            ),
            wide(
                "IP",
                "string",
                ".status.addresses[?(@.type==\"InternalIP\")].address",
                "IP of the Machine",
            ),
            paused(),
            col(
                "Provisioned",
                "string",
                ".status.initialization.provisioned",
                "DockerMachine is provisioned",
            ),
            age("DockerMachine"),
        ],
        status: true,
        scale: false,
        provider: true,
    }
}

pub fn machine_pool() -> Kind {
    let cluster = col("Cluster", "string", ".spec.clusterName", "Cluster");
    let phase = col(
        "Phase",
        "string",
        ".status.phase",
        "MachinePool status such as Terminating/Pending/Provisioning/Running/Failed etc",
    );
    let version = col(
        "Version",
        "string",
        ".spec.template.spec.version",
        "Kubernetes version associated with this MachinePool",
    );
    let mut v1beta2 = vec![cluster.clone()];
    let counts = replicas("MachinePool");
    v1beta2.extend(counts[..counts.len() - 1].iter().cloned());
    v1beta2.extend([phase.clone(), age("MachinePool"), version.clone()]);
    Kind {
        group: CLUSTER_GROUP,
        kind: "MachinePool",
        plural: "machinepools",
        short_names: &["mp"],
        v1beta1: vec![
            cluster,
            wide(
                "Desired",
                "integer",
                ".spec.replicas",
                "Total number of machines desired by this MachinePool",
            ),
            col(
                "Replicas",
                "string",
                ".status.replicas",
                "MachinePool replicas count",
            ),
            phase,
            age("MachinePool"),
            version,
        ],
        v1beta2,
        status: true,
        scale: true,
        provider: false,
    }
}

/// An infrastructure kind with only an Age column (CAPD's pools, and the
/// `Dev*` kinds CAPD's quick start uses since v1.14).
fn infrastructure(kind: &'static str, plural: &'static str, status: bool) -> Kind {
    Kind {
        group: INFRASTRUCTURE_GROUP,
        kind,
        plural,
        short_names: &[],
        v1beta1: vec![age(kind)],
        v1beta2: vec![age(kind)],
        status,
        scale: false,
        provider: true,
    }
}

/// CAPD's `Dev*` kinds (v1.14): the same provider, the backend chosen in
/// `spec.backend`; DevCluster and DevMachine are reconciled as
/// DockerCluster and DockerMachine.
pub fn dev_clusters() -> ApiResource {
    resource(INFRASTRUCTURE_GROUP, "DevCluster", "devclusters")
}
pub fn dev_machines() -> ApiResource {
    resource(INFRASTRUCTURE_GROUP, "DevMachine", "devmachines")
}

/// Every kind served, Cluster API's core first.
pub fn kinds() -> Vec<Kind> {
    let mut docker_machine_template = template(
        INFRASTRUCTURE_GROUP,
        "DockerMachineTemplate",
        "dockermachinetemplates",
    );
    docker_machine_template.v1beta2 = vec![age("DockerMachineTemplate")];
    docker_machine_template.status = true;
    let mut docker_cluster_template = template(
        INFRASTRUCTURE_GROUP,
        "DockerClusterTemplate",
        "dockerclustertemplates",
    );
    docker_cluster_template.v1beta2 = vec![age("DockerClusterTemplate")];
    let mut kubeadm_config_template = template(
        BOOTSTRAP_GROUP,
        "KubeadmConfigTemplate",
        "kubeadmconfigtemplates",
    );
    kubeadm_config_template.v1beta2.insert(
        1,
        col(
            "Cluster",
            "string",
            ".metadata.ownerReferences[?(@.kind==\"Cluster\")].name",
            "Name of the Cluster owning this template",
        ),
    );
    vec![
        cluster(),
        machine(),
        machine_set(),
        machine_deployment(),
        machine_health_check(),
        cluster_class(),
        kubeadm_control_plane(),
        template(
            CONTROLPLANE_GROUP,
            "KubeadmControlPlaneTemplate",
            "kubeadmcontrolplanetemplates",
        ),
        kubeadm_config(),
        kubeadm_config_template,
        docker_cluster(),
        docker_machine(),
        docker_machine_template,
        docker_cluster_template,
        machine_pool(),
        infrastructure("DockerMachinePool", "dockermachinepools", true),
        infrastructure(
            "DockerMachinePoolTemplate",
            "dockermachinepooltemplates",
            false,
        ),
        infrastructure("DevCluster", "devclusters", true),
        infrastructure("DevMachine", "devmachines", true),
        infrastructure("DevClusterTemplate", "devclustertemplates", false),
        infrastructure("DevMachineTemplate", "devmachinetemplates", true),
        infrastructure("DevMachinePool", "devmachinepools", true),
        infrastructure("DevMachinePoolTemplate", "devmachinepooltemplates", false),
    ]
}

pub fn crds() -> Vec<Value> {
    kinds().iter().map(Kind::crd).collect()
}

/// The resources the controllers use.
pub fn clusters() -> ApiResource {
    resource(CLUSTER_GROUP, "Cluster", "clusters")
}
pub fn machines() -> ApiResource {
    resource(CLUSTER_GROUP, "Machine", "machines")
}
pub fn machine_sets() -> ApiResource {
    resource(CLUSTER_GROUP, "MachineSet", "machinesets")
}
pub fn machine_deployments() -> ApiResource {
    resource(CLUSTER_GROUP, "MachineDeployment", "machinedeployments")
}
pub fn cluster_classes() -> ApiResource {
    resource(CLUSTER_GROUP, "ClusterClass", "clusterclasses")
}
pub fn machine_health_checks() -> ApiResource {
    resource(CLUSTER_GROUP, "MachineHealthCheck", "machinehealthchecks")
}
pub fn kubeadm_control_planes() -> ApiResource {
    resource(
        CONTROLPLANE_GROUP,
        "KubeadmControlPlane",
        "kubeadmcontrolplanes",
    )
}
pub fn kubeadm_configs() -> ApiResource {
    resource(BOOTSTRAP_GROUP, "KubeadmConfig", "kubeadmconfigs")
}
pub fn docker_clusters() -> ApiResource {
    resource(INFRASTRUCTURE_GROUP, "DockerCluster", "dockerclusters")
}
pub fn docker_machines() -> ApiResource {
    resource(INFRASTRUCTURE_GROUP, "DockerMachine", "dockermachines")
}

/// A reference to another object of the same namespace, in either
/// version's shape: v1beta2's `{apiGroup, kind, name}` or v1beta1's
/// `{apiVersion, kind, name, namespace}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ref {
    pub group: String,
    pub kind: String,
    pub name: String,
}

impl Ref {
    pub fn from_value(v: &Value) -> Option<Ref> {
        let kind = v.get("kind")?.as_str()?.to_string();
        let name = v.get("name")?.as_str()?.to_string();
        let group = match v.get("apiGroup").and_then(Value::as_str) {
            Some(g) => g.to_string(),
            None => {
                let api_version = v.get("apiVersion")?.as_str()?;
                api_version
                    .split_once('/')
                    .map_or("", |(g, _)| g)
                    .to_string()
            }
        };
        (!kind.is_empty() && !name.is_empty()).then_some(Ref { group, kind, name })
    }

    /// The reference as v1beta2 writes it.
    pub fn to_value(&self) -> Value {
        json!({"apiGroup": self.group, "kind": self.kind, "name": self.name})
    }

    /// The CRD that serves the kind, by Cluster API's naming rule (the
    /// lower-cased kind, pluralized, dot the group).
    pub fn crd_name(&self) -> String {
        format!("{}.{}", plural(&self.kind), self.group)
    }

    pub fn resource(&self) -> ApiResource {
        resource(&self.group, &self.kind, &plural(&self.kind))
    }
}

impl std::fmt::Display for Ref {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.kind, self.name)
    }
}

/// English plural of a lower-cased kind, as flect pluralizes kinds.
pub fn plural(kind: &str) -> String {
    let lower = kind.to_lowercase();
    if lower.ends_with("ss") || lower.ends_with('x') || lower.ends_with("ch") {
        format!("{lower}es")
    } else if let Some(stem) = lower.strip_suffix('y')
        && !stem.ends_with(['a', 'e', 'i', 'o', 'u'])
    {
        format!("{stem}ies")
    } else {
        format!("{lower}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_of_both_versions_are_read() {
        let v2 = json!({"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerCluster", "name": "a"});
        let v1 = json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "DockerCluster", "name": "a", "namespace": "default"});
        assert_eq!(Ref::from_value(&v1), Ref::from_value(&v2));
        let r = Ref::from_value(&v2).unwrap();
        assert_eq!(
            r.crd_name(),
            "dockerclusters.infrastructure.cluster.x-k8s.io"
        );
        assert_eq!(plural("ClusterClass"), "clusterclasses");
        assert_eq!(plural("AWSCluster"), "awsclusters");
        assert!(Ref::from_value(&json!({"kind": "X"})).is_none());
    }

    #[test]
    fn every_kind_serves_both_versions_and_stores_v1beta2() {
        for crd in crds() {
            let versions = crd["spec"]["versions"].as_array().unwrap();
            let stored: Vec<_> = versions.iter().filter(|v| v["storage"] == true).collect();
            assert_eq!(stored.len(), 1);
            assert_eq!(stored[0]["name"], "v1beta2");
            assert!(versions.iter().all(|v| v["served"] == true));
        }
    }
}
