//! What Cluster API's webhooks refuse, refused when written: versions
//! that are not semantic versions, cluster networks that are not CIDRs,
//! that overlap each other, or that overlap the ranges the hub hands out
//! (ClusterSet IPs): a cluster made with them could not work.

use flotilla_apiserver::admission::{Mutating, Operation, Request, View};
use flotilla_apiserver::error::{ApiError, ApiResult, Cause};
use ipnet::IpNet;
use serde_json::Value;

use crate::api;

/// Refuses invalid Cluster API objects; `reserved` are the hub's own
/// ranges, with what they are.
pub struct Validation {
    pub reserved: Vec<(IpNet, String)>,
}

/// `v1.33.0`, `1.33.0`, `v1.34.0-rc.1+build`: what semver's tolerant
/// parse takes for a Kubernetes version.
pub fn valid_version(v: &str) -> bool {
    let v = v.strip_prefix('v').unwrap_or(v);
    let core = v.split(['-', '+']).next().unwrap_or_default();
    let parts: Vec<&str> = core.split('.').collect();
    parts.len() == 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
}

pub(crate) fn cause(field: &str, message: String) -> Cause {
    Cause {
        reason: "FieldValueInvalid",
        field: field.into(),
        message,
    }
}

fn check_version(object: &Value, pointer: &str, field: &str, causes: &mut Vec<Cause>) {
    if let Some(v) = object.pointer(pointer).and_then(Value::as_str)
        && !valid_version(v)
    {
        causes.push(cause(
            field,
            format!("Invalid value: \"{v}\": must be a valid semantic version (e.g. v1.33.0)"),
        ));
    }
}

impl Validation {
    fn cluster_network(&self, object: &Value, causes: &mut Vec<Cause>) {
        let mut blocks = Vec::new();
        for which in ["pods", "services"] {
            let listed = object["spec"]["clusterNetwork"][which]["cidrBlocks"].as_array();
            for (i, block) in listed.into_iter().flatten().enumerate() {
                blocks.push((
                    format!("spec.clusterNetwork.{which}.cidrBlocks[{i}]"),
                    block.as_str().unwrap_or_default(),
                ));
            }
        }
        self.check_ranges(&blocks, causes);
    }

    /// `(field, CIDR)`s must be CIDRs, apart from each other and from the
    /// hub's own ranges.
    pub(crate) fn check_ranges(&self, blocks: &[(String, &str)], causes: &mut Vec<Cause>) {
        let mut ranges: Vec<(IpNet, String)> = Vec::new();
        for (field, text) in blocks {
            match text.parse::<IpNet>() {
                Ok(net) => {
                    for (other, what) in ranges.iter().chain(self.reserved.iter()) {
                        if other.contains(&net.network()) || net.contains(&other.network()) {
                            causes.push(cause(
                                field,
                                format!("Invalid value: \"{text}\": overlaps {what} ({other})"),
                            ));
                        }
                    }
                    ranges.push((net, field.clone()));
                }
                Err(_) => causes.push(cause(
                    field,
                    format!("Invalid value: \"{text}\": must be a CIDR (e.g. 192.168.0.0/16)"),
                )),
            }
        }
    }
}

impl Mutating for Validation {
    fn admit(&self, view: &View, request: &Request, object: &mut Value) -> ApiResult<()> {
        if !matches!(request.operation, Operation::Create | Operation::Update)
            || request.subresource.is_some()
        {
            return Ok(());
        }
        let resource = request.resource;
        let mut causes = Vec::new();
        match (resource.group.as_str(), resource.plural.as_str()) {
            (crate::gardener::api::CORE_GROUP, "shoots") => {
                crate::gardener::admission::shoot(self, view, request, object, &mut causes)?
            }
            (api::CLUSTER_GROUP, "clusters") => {
                self.cluster_network(object, &mut causes);
                check_version(
                    object,
                    "/spec/topology/version",
                    "spec.topology.version",
                    &mut causes,
                );
            }
            (api::CLUSTER_GROUP, "machines") => {
                check_version(object, "/spec/version", "spec.version", &mut causes)
            }
            (api::CLUSTER_GROUP, "machinesets" | "machinedeployments") => check_version(
                object,
                "/spec/template/spec/version",
                "spec.template.spec.version",
                &mut causes,
            ),
            (api::CONTROLPLANE_GROUP, "kubeadmcontrolplanes") => {
                check_version(object, "/spec/version", "spec.version", &mut causes)
            }
            _ => return Ok(()),
        }
        if causes.is_empty() {
            return Ok(());
        }
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        Err(ApiError::invalid(
            &resource.group,
            &resource.kind,
            name,
            causes,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_semantic() {
        for ok in ["v1.33.0", "1.33.0", "v1.34.0-rc.1", "v1.33.0+build.1"] {
            assert!(valid_version(ok), "{ok}");
        }
        for bad in ["v1.33", "latest", "v1.33.x", "", "v1..0"] {
            assert!(!valid_version(bad), "{bad}");
        }
    }

    #[test]
    fn networks_must_be_cidrs_apart_from_each_other_and_the_hub() {
        let v = Validation {
            reserved: vec![(
                "243.0.0.0/16".parse().unwrap(),
                "the hub's ClusterSet IP range".into(),
            )],
        };
        let mut causes = Vec::new();
        let cluster = serde_json::json!({"spec": {"clusterNetwork": {
            "pods": {"cidrBlocks": ["10.0.0.0/8", "nonsense"]},
            "services": {"cidrBlocks": ["10.96.0.0/12", "243.0.1.0/24"]},
        }}});
        v.cluster_network(&cluster, &mut causes);
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "spec.clusterNetwork.pods.cidrBlocks[1]",
                "spec.clusterNetwork.services.cidrBlocks[0]",
                "spec.clusterNetwork.services.cidrBlocks[1]"
            ]
        );
    }
}
