//! What the runtime needs of a pod beyond its sandbox, and the kubelet
//! gives it: the pod in full (the kubelet's cache keeps a smaller view
//! of it), each container's environment with its references resolved,
//! and the pod's volumes made ready on the host. The runtime asks through
//! [`PodConfig`] and holds no API client; the kubelet's implementation
//! (`kubelet::config`) reads the API, as upstream's kubelet resolves a
//! container's environment and its volume manager mounts volumes before
//! the CRI is asked to create the container.
//!
//! A reference that cannot be resolved is a [`ConfigError`], which the
//! kubelet reports as upstream does (`CreateContainerConfigError`, a
//! failed volume mount) while it keeps retrying.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Container, Pod};
use kube::ResourceExt;

/// A pod reference that does not resolve (yet).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct ConfigError {
    /// Upstream's reason: CreateContainerConfigError, FailedMount, ...
    pub reason: &'static str,
    pub message: String,
}

pub fn config_error(message: impl Into<String>) -> ConfigError {
    ConfigError {
        reason: "CreateContainerConfigError",
        message: message.into(),
    }
}

pub fn mount_error(message: impl Into<String>) -> ConfigError {
    ConfigError {
        reason: "FailedMount",
        message: message.into(),
    }
}

/// What the pod is, for the downward API and the stand-in workload.
pub struct PodIdentity<'a> {
    pub pod: &'a Pod,
    pub ip: Ipv4Addr,
    pub host_ip: Ipv4Addr,
    pub node: &'a str,
    pub cluster: &'a str,
}

/// What a runtime asks of the kubelet while it makes a pod's sandbox and
/// starts its containers.
#[async_trait]
pub trait PodConfig: Send + Sync {
    /// The pod in full, once per sandbox and when it gains ephemeral
    /// containers.
    async fn pod(&self, namespace: &str, name: &str) -> Result<Pod, ConfigError>;
    /// Writes the pod's volumes under `dir`, one directory each, and
    /// returns each volume's path on the host.
    async fn volumes(
        &self,
        id: &PodIdentity<'_>,
        dir: &Path,
    ) -> Result<BTreeMap<String, PathBuf>, ConfigError>;
    /// A container's environment, in order, `$(VAR)` references expanded.
    async fn environment(
        &self,
        container: &Container,
        id: &PodIdentity<'_>,
    ) -> Result<Vec<(String, String)>, ConfigError>;
}

/// `$(VAR)` expands to an earlier variable; `$$(VAR)` is literal.
pub fn expand(value: &str, env: &[(String, String)]) -> String {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(tail) = after.strip_prefix('(')
            && let Some(end) = tail.find(')')
        {
            let name = &tail[..end];
            match env.iter().rev().find(|(k, _)| k == name) {
                Some((_, v)) => out.push_str(v),
                None => out.push_str(&format!("$({name})")),
            }
            rest = &tail[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

pub fn hostname(pod: &Pod) -> String {
    pod.spec
        .as_ref()
        .and_then(|s| s.hostname.clone())
        .unwrap_or_else(|| pod.name_any())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dollar_references_expand_like_the_kubelet() {
        let env = vec![("A".to_string(), "1".to_string())];
        assert_eq!(expand("x$(A)y", &env), "x1y");
        assert_eq!(expand("$$(A)", &env), "$(A)");
        assert_eq!(expand("$(B)", &env), "$(B)");
        assert_eq!(expand("cost $5", &env), "cost $5");
        assert_eq!(expand("$(A", &env), "$(A");
    }
}
