//! Which message carries which apiVersion and kind.

use std::sync::LazyLock;

use prost_reflect::{DescriptorPool, MessageDescriptor};

/// Every message of the definitions in proto/, compiled by build.rs.
static POOL: LazyLock<DescriptorPool> = LazyLock::new(|| {
    // The bytes are protox's own output for files in this crate: a
    // failure here is a build defect that every test of this crate shows.
    DescriptorPool::decode(&include_bytes!(concat!(env!("OUT_DIR"), "/kubernetes.bin"))[..])
        .unwrap_or_default()
});

/// The protobuf package of each built-in API group (proto/README.md).
/// Only these groups travel as protobuf: a custom resource of any other
/// group is JSON only, as upstream serves it.
const GROUPS: &[(&str, &str)] = &[
    ("", "api.core"),
    ("admission.k8s.io", "api.admission"),
    ("admissionregistration.k8s.io", "api.admissionregistration"),
    ("apidiscovery.k8s.io", "api.apidiscovery"),
    (
        "apiextensions.k8s.io",
        "apiextensions_apiserver.pkg.apis.apiextensions",
    ),
    (
        "apiregistration.k8s.io",
        "kube_aggregator.pkg.apis.apiregistration",
    ),
    ("apps", "api.apps"),
    ("authentication.k8s.io", "api.authentication"),
    ("authorization.k8s.io", "api.authorization"),
    ("autoscaling", "api.autoscaling"),
    ("batch", "api.batch"),
    ("certificates.k8s.io", "api.certificates"),
    ("coordination.k8s.io", "api.coordination"),
    ("discovery.k8s.io", "api.discovery"),
    ("events.k8s.io", "api.events"),
    ("flowcontrol.apiserver.k8s.io", "api.flowcontrol"),
    ("meta.k8s.io", "apimachinery.pkg.apis.meta"),
    ("networking.k8s.io", "api.networking"),
    ("node.k8s.io", "api.node"),
    ("policy", "api.policy"),
    ("rbac.authorization.k8s.io", "api.rbac"),
    ("scheduling.k8s.io", "api.scheduling"),
    ("storage.k8s.io", "api.storage"),
];

/// Kinds of `meta.k8s.io/v1` that every group version also carries
/// (options, Status, WatchEvent, discovery documents), whatever apiVersion
/// the envelope gives them.
const META_KINDS: &[&str] = &[
    "APIGroup",
    "APIGroupList",
    "APIResourceList",
    "APIVersions",
    "CreateOptions",
    "DeleteOptions",
    "GetOptions",
    "ListOptions",
    "PartialObjectMetadata",
    "PartialObjectMetadataList",
    "PatchOptions",
    "Status",
    "UpdateOptions",
    "WatchEvent",
];

/// True for the API groups of Kubernetes' own kinds, which travel as
/// protobuf (a custom resource's group never is one: a CRD's group has a
/// dot, and `*.k8s.io` groups are reserved upstream).
pub fn is_builtin_group(group: &str) -> bool {
    GROUPS.iter().any(|(g, _)| *g == group)
}

/// The message of a built-in kind at an apiVersion (`v1`, `apps/v1`).
pub fn message_for(api_version: &str, kind: &str) -> Option<MessageDescriptor> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    if version.is_empty() || kind.is_empty() {
        return None;
    }
    let found = GROUPS
        .iter()
        .find(|(g, _)| *g == group)
        .and_then(|(_, package)| POOL.get_message_by_name(&format!("{package}.{version}.{kind}")));
    found.or_else(|| {
        META_KINDS
            .contains(&kind)
            .then(|| message("apimachinery.pkg.apis.meta.v1", kind))
            .flatten()
    })
}

/// A message by package and name.
pub(crate) fn message(package: &str, name: &str) -> Option<MessageDescriptor> {
    POOL.get_message_by_name(&format!("{package}.{name}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_in_kinds_have_messages_and_custom_ones_do_not() {
        assert!(POOL.all_messages().count() > 500, "the descriptors loaded");
        for (api_version, kind) in [
            ("v1", "Pod"),
            ("v1", "ConfigMapList"),
            ("apps/v1", "Deployment"),
            ("rbac.authorization.k8s.io/v1", "ClusterRole"),
            ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
            ("apiregistration.k8s.io/v1", "APIService"),
            ("autoscaling/v2", "HorizontalPodAutoscaler"),
            ("v1", "Status"),
            ("apps/v1", "DeleteOptions"),
            ("meta.k8s.io/v1", "PartialObjectMetadataList"),
        ] {
            assert!(
                message_for(api_version, kind).is_some(),
                "{api_version} {kind}"
            );
        }
        for (api_version, kind) in [
            ("apps.example.com/v1", "Deployment"),
            ("policy.karmada.io/v1alpha1", "PropagationPolicy"),
            ("v1", "Widget"),
            ("", "Pod"),
            ("v1", ""),
        ] {
            assert!(
                message_for(api_version, kind).is_none(),
                "{api_version} {kind}"
            );
        }
    }
}
