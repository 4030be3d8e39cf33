//! Gardener's kinds as its API server serves them, for a landscape whose
//! only provider is `local` (Gardener's provider-local): Shoot,
//! CloudProfile, Seed, Project and SecretBinding of
//! `core.gardener.cloud/v1beta1`, and CredentialsBinding and
//! WorkloadIdentity of `security.gardener.cloud/v1alpha1`, so that
//! provider-local's example manifests apply as they are. Shoots' columns
//! are computed (`table.rs`); the others' are JSONPath.

use kube::api::ApiResource;
use serde_json::{Value, json};

pub const CORE_GROUP: &str = "core.gardener.cloud";
pub const SECURITY_GROUP: &str = "security.gardener.cloud";
pub const CORE_VERSION: &str = "v1beta1";
pub const SECURITY_VERSION: &str = "v1alpha1";

/// The finalizer Gardener puts on every Shoot.
pub const FINALIZER: &str = "gardener";
/// The health of a Shoot, as Gardener's care controller labels it.
pub const STATUS_LABEL: &str = "shoot.gardener.cloud/status";
/// On the Cluster API objects a Shoot is made of: the Shoot's name.
pub const SHOOT_NAME_LABEL: &str = "shoot.gardener.cloud/name";
/// On a worker pool's MachineDeployment: the pool's name.
pub const POOL_LABEL: &str = "worker.gardener.cloud/pool";

struct Kind {
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    namespaced: bool,
    short_names: &'static [&'static str],
    columns: Vec<Value>,
}

fn col(name: &str, path: &str) -> Value {
    json!({"name": name, "type": "string", "jsonPath": path})
}

fn age() -> Value {
    json!({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"})
}

fn kinds() -> Vec<Kind> {
    let core = |kind, plural, namespaced, short_names, columns| Kind {
        group: CORE_GROUP,
        version: CORE_VERSION,
        kind,
        plural,
        namespaced,
        short_names,
        columns,
    };
    let security = |kind, plural| Kind {
        group: SECURITY_GROUP,
        version: SECURITY_VERSION,
        kind,
        plural,
        namespaced: true,
        short_names: &[],
        columns: vec![age()],
    };
    vec![
        core("Shoot", "shoots", true, &[], vec![]),
        core(
            "CloudProfile",
            "cloudprofiles",
            false,
            &["cprofile", "cpfl"],
            vec![col("Type", ".spec.type"), age()],
        ),
        core(
            "Seed",
            "seeds",
            false,
            &[],
            vec![
                col("Provider", ".spec.provider.type"),
                col("Region", ".spec.provider.region"),
                age(),
            ],
        ),
        core(
            "Project",
            "projects",
            false,
            &[],
            vec![
                col("Namespace", ".spec.namespace"),
                col("Status", ".status.phase"),
                col("Owner", ".spec.owner.name"),
                col("Creator", ".spec.createdBy.name"),
                age(),
            ],
        ),
        core(
            "SecretBinding",
            "secretbindings",
            true,
            &[],
            vec![
                col("Provider", ".provider.type"),
                col("Secret", ".secretRef.name"),
                age(),
            ],
        ),
        security("CredentialsBinding", "credentialsbindings"),
        security("WorkloadIdentity", "workloadidentities"),
    ]
}

impl Kind {
    /// Gardener's kinds keep what is written; bindings have no `spec`,
    /// their fields at the top level.
    fn crd(&self) -> Value {
        let mut crd = flotilla_core::crd::Kind {
            group: self.group,
            version: self.version,
            kind: self.kind.into(),
            plural: self.plural.into(),
            short_names: self.short_names.iter().map(|s| s.to_string()).collect(),
            namespaced: self.namespaced,
            categories: &["gardener"],
            columns: self.columns.clone(),
            spec: flotilla_core::crd::open_schema(),
        }
        .crd();
        flotilla_core::crd::spec_optional(&mut crd);
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["x-kubernetes-preserve-unknown-fields"] =
            json!(true);
        crd["metadata"]["labels"] = json!({"app.kubernetes.io/part-of": "flotilla-lifecycle"});
        crd
    }
}

pub fn crds() -> Vec<Value> {
    kinds().iter().map(Kind::crd).collect()
}

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: format!("{group}/{version}"),
        kind: kind.into(),
        plural: plural.into(),
    }
}

pub fn shoots() -> ApiResource {
    resource(CORE_GROUP, CORE_VERSION, "Shoot", "shoots")
}

pub fn cloud_profiles() -> ApiResource {
    resource(CORE_GROUP, CORE_VERSION, "CloudProfile", "cloudprofiles")
}

pub fn seeds() -> ApiResource {
    resource(CORE_GROUP, CORE_VERSION, "Seed", "seeds")
}

pub fn projects() -> ApiResource {
    resource(CORE_GROUP, CORE_VERSION, "Project", "projects")
}
