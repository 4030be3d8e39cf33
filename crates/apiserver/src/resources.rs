//! The registry of served resources: built-in kinds plus whatever CRDs add.
//!
//! Each entry is one (group, version, resource). Versions of a CRD share one
//! storage location (`/group/plural/...`); only `apiVersion` differs on read.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use parking_lot::RwLock;
use serde_json::Value;

use crate::builtin;

/// Where a resource's printer columns come from.
#[derive(Clone, Debug)]
pub enum Printer {
    /// Columns coded to match upstream's `kubectl get`.
    Builtin,
    /// A CRD's additionalPrinterColumns.
    Custom(Vec<PrinterColumn>),
}

#[derive(Clone, Debug)]
pub struct PrinterColumn {
    pub name: String,
    pub type_: String,
    pub format: String,
    pub description: String,
    pub priority: i64,
    pub json_path: String,
}

/// How objects of a resource are checked and pruned on write.
#[derive(Clone)]
pub enum Schema {
    /// A built-in kind: its OpenAPI component and a typed decode check.
    Builtin {
        component: &'static str,
        decode: fn(&Value) -> Result<(), (String, String)>,
    },
    /// A CRD version's structural `openAPIV3Schema`.
    Structural(Arc<Value>),
}

#[derive(Clone)]
pub struct ResourceInfo {
    pub group: String,
    pub version: String,
    pub plural: String,
    pub singular: String,
    pub kind: String,
    pub list_kind: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    pub status_subresource: bool,
    /// Whether metadata.generation tracks spec changes.
    pub uses_generation: bool,
    /// Custom resources: served from a CRD (merge patches only, delete returns the object).
    pub custom: bool,
    pub printer: Printer,
    pub schema: Schema,
    /// Extra fields a fieldSelector may use (a CRD's selectableFields).
    pub selectable_fields: Vec<String>,
    /// Where the scale subresource reads and writes replicas, if served.
    pub scale: Option<ScalePaths>,
    /// Served, but not stored (reviews, bindings, component statuses).
    pub computed: Option<Computed>,
    /// A built-in served at a version other than the stored one.
    pub conversion: Option<crate::conversion::Conversion>,
    /// Subresources the embedding process answers (`extension.rs`), as
    /// discovery lists them.
    pub added_subresources: Vec<AddedSubresource>,
}

/// A subresource an embedding process added to a CRD's kind, as
/// discovery lists it.
#[derive(Clone, Debug, PartialEq)]
pub struct AddedSubresource {
    pub name: String,
    /// What it answers, as (group, version, kind).
    pub response: (String, String, String),
    pub verbs: Vec<String>,
}

/// A kind whose objects are computed, not stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Computed {
    /// A question (TokenReview, SubjectAccessReview, ...): a POST is
    /// answered (`reviews.rs`).
    Review,
    /// A POST binds the pod it names to a node, as `pods/binding` does.
    Binding,
    /// The control plane's components and their health (`kubectl get cs`).
    ComponentStatus,
    /// Nodes' and pods' usage, `metrics.k8s.io` (`resource_metrics.rs`).
    Metrics,
}

/// The fields behind a `/scale` subresource, as JSON pointers.
#[derive(Clone, Debug)]
pub struct ScalePaths {
    pub spec_replicas: String,
    pub status_replicas: String,
    pub selector: ScaleSelector,
}

/// Where `Scale.status.selector` comes from.
#[derive(Clone, Debug)]
pub enum ScaleSelector {
    None,
    /// The workload's `spec.selector` LabelSelector, in string form (built-ins).
    SpecSelector,
    /// A string field of the object (a CRD's labelSelectorPath).
    Path(String),
}

impl ScalePaths {
    /// The scale of apps/v1 workloads.
    pub fn workload() -> Self {
        ScalePaths {
            spec_replicas: "/spec/replicas".into(),
            status_replicas: "/status/replicas".into(),
            selector: ScaleSelector::SpecSelector,
        }
    }
}

impl ResourceInfo {
    /// A kind served by code rather than stored (reviews, metrics): any
    /// object shape, `printer`'s columns, answered as `computed` says.
    pub fn computed(
        (group, version): (&str, &str),
        (plural, kind): (&str, &str),
        namespaced: bool,
        printer: Printer,
        computed: Computed,
    ) -> ResourceInfo {
        ResourceInfo {
            group: group.into(),
            version: version.into(),
            plural: plural.into(),
            singular: String::new(),
            kind: kind.into(),
            list_kind: format!("{kind}List"),
            namespaced,
            short_names: Vec::new(),
            categories: Vec::new(),
            status_subresource: false,
            uses_generation: false,
            custom: false,
            printer,
            schema: Schema::Structural(Arc::new(
                serde_json::json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
            )),
            selectable_fields: Vec::new(),
            scale: None,
            computed: Some(computed),
            conversion: None,
            added_subresources: Vec::new(),
        }
    }

    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The storage prefix of every object of this resource.
    pub fn prefix(&self) -> String {
        let group = match crate::conversion::stored_group(&self.group, &self.plural) {
            "" => "core",
            g => g,
        };
        format!("/{group}/{}/", self.plural)
    }

    /// Prefix for one namespace, or all objects when `namespace` is `None`.
    pub fn collection_prefix(&self, namespace: Option<&str>) -> String {
        match namespace {
            Some(ns) if self.namespaced => format!("{}{ns}/", self.prefix()),
            _ => self.prefix(),
        }
    }

    pub fn key(&self, namespace: Option<&str>, name: &str) -> String {
        format!("{}{name}", self.collection_prefix(namespace))
    }

    /// Services get addresses assigned on write.
    pub fn is_service(&self) -> bool {
        self.group.is_empty() && self.plural == "services"
    }

    /// Namespaces get special treatment: label names, Terminating phase, content removal.
    pub fn is_namespace(&self) -> bool {
        self.group.is_empty() && self.plural == "namespaces"
    }

    pub fn verbs(&self) -> Vec<&'static str> {
        match self.computed {
            Some(Computed::Review | Computed::Binding) => return vec!["create"],
            Some(Computed::ComponentStatus | Computed::Metrics) => return vec!["get", "list"],
            None => {}
        }
        vec![
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch",
        ]
    }
}

#[derive(Default)]
struct Inner {
    /// (group, version, plural) → resource.
    resources: BTreeMap<(String, String, String), Arc<ResourceInfo>>,
    /// Bumped on every change, so caches of derived documents know to rebuild.
    generation: u64,
    /// The store revision of the CRD that each custom (group, plural) was
    /// last set or removed from: a replica hears of a CRD twice (its own
    /// write, then the store's watch) and must keep the newer.
    custom_revisions: HashMap<(String, String), i64>,
}

/// The set of served resources; CRDs change it at run time.
pub struct Registry {
    inner: RwLock<Inner>,
}

impl Default for Registry {
    fn default() -> Self {
        Self::new()
    }
}

impl Registry {
    pub fn new() -> Self {
        let mut inner = Inner::default();
        for r in builtin::resources() {
            inner.resources.insert(
                (r.group.clone(), r.version.clone(), r.plural.clone()),
                Arc::new(r),
            );
        }
        Registry {
            inner: RwLock::new(inner),
        }
    }

    pub fn generation(&self) -> u64 {
        self.inner.read().generation
    }

    pub fn get(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceInfo>> {
        self.inner
            .read()
            .resources
            .get(&(group.to_string(), version.to_string(), plural.to_string()))
            .cloned()
    }

    /// The resource whose objects live under store key `key`
    /// (`/<group or core>/<plural>/...`), in its preferred version.
    pub fn for_key(&self, key: &str) -> Option<Arc<ResourceInfo>> {
        let mut parts = key.trim_start_matches('/').splitn(3, '/');
        let group = match parts.next()? {
            "core" => "",
            g => g,
        };
        let plural = parts.next()?;
        self.inner
            .read()
            .resources
            .iter()
            .filter(|((g, _, p), _)| g == group && p == plural)
            .max_by_key(|((_, v, _), _)| version_priority(v))
            .map(|(_, r)| r.clone())
    }

    pub fn all(&self) -> Vec<Arc<ResourceInfo>> {
        self.inner.read().resources.values().cloned().collect()
    }

    /// Whether (group, version) is served at all.
    pub fn has_group_version(&self, group: &str, version: &str) -> bool {
        self.inner
            .read()
            .resources
            .keys()
            .any(|(g, v, _)| g == group && v == version)
    }

    /// Groups in discovery order: built-ins first in upstream order, then
    /// CRD groups alphabetically; versions sorted by Kubernetes priority.
    pub fn groups(&self) -> Vec<(String, Vec<String>)> {
        let inner = self.inner.read();
        let mut groups: Vec<(String, Vec<String>)> = Vec::new();
        for (g, v, _) in inner.resources.keys() {
            match groups.iter_mut().find(|(name, _)| name == g) {
                Some((_, versions)) => {
                    if !versions.contains(v) {
                        versions.push(v.clone());
                    }
                }
                None => groups.push((g.clone(), vec![v.clone()])),
            }
        }
        for (_, versions) in groups.iter_mut() {
            versions.sort_by_key(|v| std::cmp::Reverse(version_priority(v)));
        }
        groups.sort_by_key(|(g, _)| {
            let order = builtin::GROUP_ORDER
                .iter()
                .position(|b| b == g)
                .unwrap_or(usize::MAX);
            (order, g.clone())
        });
        groups
    }

    pub fn resources_in(&self, group: &str, version: &str) -> Vec<Arc<ResourceInfo>> {
        self.inner
            .read()
            .resources
            .iter()
            .filter(|((g, v, _), _)| g == group && v == version)
            .map(|(_, r)| r.clone())
            .collect()
    }

    /// Replaces every version served for `(group, plural)` with `versions`,
    /// from the CRD stored at `revision`; false, and nothing changes, when
    /// what is served comes from that revision or a newer one.
    pub fn set_custom(
        &self,
        group: &str,
        plural: &str,
        revision: i64,
        versions: Vec<ResourceInfo>,
    ) -> bool {
        let mut inner = self.inner.write();
        let key = (group.to_string(), plural.to_string());
        if inner
            .custom_revisions
            .get(&key)
            .is_some_and(|&served| served >= revision)
        {
            return false;
        }
        inner.custom_revisions.insert(key, revision);
        inner
            .resources
            .retain(|(g, _, p), r| !(g == group && p == plural && r.custom));
        for r in versions {
            inner.resources.insert(
                (r.group.clone(), r.version.clone(), r.plural.clone()),
                Arc::new(r),
            );
        }
        inner.generation += 1;
        true
    }

    /// Converts a served resource's objects with `conversion` (an
    /// embedder's, for a CRD); nothing when it is not served.
    pub fn set_conversion(
        &self,
        group: &str,
        version: &str,
        plural: &str,
        conversion: crate::conversion::Conversion,
    ) {
        let mut inner = self.inner.write();
        let key = (group.to_string(), version.to_string(), plural.to_string());
        if let Some(r) = inner.resources.get(&key) {
            let mut r = (**r).clone();
            r.conversion = Some(conversion);
            inner.resources.insert(key, Arc::new(r));
            inner.generation += 1;
        }
    }

    /// Lists `added` among the subresources of every version of
    /// `(group, plural)` served now.
    pub fn set_added_subresources(&self, group: &str, plural: &str, added: &[AddedSubresource]) {
        let mut inner = self.inner.write();
        let keys: Vec<_> = inner
            .resources
            .keys()
            .filter(|(g, _, p)| g == group && p == plural)
            .cloned()
            .collect();
        for key in keys {
            if let Some(r) = inner.resources.get(&key) {
                let mut r = (**r).clone();
                r.added_subresources = added.to_vec();
                inner.resources.insert(key, Arc::new(r));
                inner.generation += 1;
            }
        }
    }

    /// Stops serving `(group, plural)`, deleted at `revision`.
    pub fn remove_custom(&self, group: &str, plural: &str, revision: i64) -> bool {
        self.set_custom(group, plural, revision, Vec::new())
    }

    /// Serves `r`, a computed resource the embedding process provides
    /// (`metrics.k8s.io`, once something measures the pods).
    pub fn add_computed(&self, r: ResourceInfo) {
        let mut inner = self.inner.write();
        inner.resources.insert(
            (r.group.clone(), r.version.clone(), r.plural.clone()),
            Arc::new(r),
        );
        inner.generation += 1;
    }

    /// The custom resources served now, as (group, plural).
    pub fn custom_kinds(&self) -> BTreeSet<(String, String)> {
        self.inner
            .read()
            .resources
            .values()
            .filter(|r| r.custom)
            .map(|r| (r.group.clone(), r.plural.clone()))
            .collect()
    }

    /// Whether some served resource already uses this plural, kind or short
    /// name in `group` (other than the CRD `except`).
    pub fn name_clash(&self, group: &str, names: &[&str], except_plural: &str) -> Option<String> {
        let inner = self.inner.read();
        for r in inner.resources.values() {
            if r.group != group || r.plural == except_plural {
                continue;
            }
            for n in names {
                if r.plural == *n || r.singular == *n || r.short_names.iter().any(|s| s == n) {
                    return Some(n.to_string());
                }
            }
        }
        None
    }
}

/// Kubernetes' version ordering: GA > beta > alpha, higher numbers first,
/// and anything not of that shape last.
pub fn version_priority(v: &str) -> (u8, u32, u32) {
    let Some(rest) = v.strip_prefix('v') else {
        return (0, 0, 0);
    };
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    let Ok(major) = digits.parse::<u32>() else {
        return (0, 0, 0);
    };
    let rest = &rest[digits.len()..];
    if rest.is_empty() {
        return (3, major, 0);
    }
    let (level, tail) = if let Some(t) = rest.strip_prefix("beta") {
        (2, t)
    } else if let Some(t) = rest.strip_prefix("alpha") {
        (1, t)
    } else {
        return (0, 0, 0);
    };
    match tail.parse::<u32>() {
        Ok(minor) => (level, major, minor),
        Err(_) => (0, 0, 0),
    }
}
