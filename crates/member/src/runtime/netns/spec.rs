//! From a pod's spec and its resolved configuration to how each of its
//! containers is started: the user to run as, limits, mounts, the command
//! resolved on the host (or the stand-in), and the pod's own /etc/hosts
//! and /etc/resolv.conf. Environment and volumes come resolved from the
//! kubelet (`runtime::config`).

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, Pod};
use kube::ResourceExt;

use super::images;
use super::shim::{Launch, Mount};
use crate::runtime::config::{ConfigError, PodIdentity, config_error, expand, hostname};
use flotilla_host::{DEFAULT_PATH, which_in};

/// The user pods run as when they name none: nobody.
pub const DEFAULT_UID: u32 = 65534;
pub const DEFAULT_GID: u32 = 65534;

/// The user and groups a container runs as.
pub fn user(pod: &Pod, c: &Container) -> (u32, u32, Vec<u32>) {
    let pod_sc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    let sc = c.security_context.as_ref();
    let uid = sc
        .and_then(|s| s.run_as_user)
        .or(pod_sc.and_then(|s| s.run_as_user))
        .map(|u| u as u32)
        .unwrap_or(DEFAULT_UID);
    let gid = sc
        .and_then(|s| s.run_as_group)
        .or(pod_sc.and_then(|s| s.run_as_group))
        .map(|g| g as u32)
        .unwrap_or(if uid == 0 { 0 } else { DEFAULT_GID });
    let mut groups: Vec<u32> = pod_sc
        .and_then(|s| s.supplemental_groups.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|g| g as u32)
        .collect();
    if let Some(fs) = pod_sc.and_then(|s| s.fs_group) {
        groups.push(fs as u32);
    }
    (uid, gid, groups)
}

/// A container's memory and CPU limits.
pub fn limits(c: &Container) -> super::cgroups::Limits {
    use crate::quantity;
    let limit = |name: &str| {
        c.resources
            .as_ref()
            .and_then(|r| r.limits.as_ref())
            .and_then(|l| l.get(name))
            .map(|q| q.0.clone())
    };
    super::cgroups::Limits {
        memory: limit("memory").as_deref().and_then(quantity::units),
        cpu_millis: limit("cpu").as_deref().and_then(quantity::millicores),
    }
}

/// The pod's /etc/hosts.
pub fn hosts_file(pod: &Pod, ip: Ipv4Addr) -> String {
    let host = hostname(pod);
    let ns = pod.namespace().unwrap_or_default();
    let mut names = Vec::new();
    if let Some(sub) = pod.spec.as_ref().and_then(|s| s.subdomain.as_deref()) {
        names.push(format!("{host}.{sub}.{ns}.svc.cluster.local"));
    }
    names.push(host);
    let mut out = format!(
        "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n{ip}\t{}\n",
        names.join("\t")
    );
    for alias in pod
        .spec
        .iter()
        .flat_map(|s| s.host_aliases.iter().flatten())
    {
        out.push_str(&format!(
            "{}\t{}\n",
            alias.ip,
            alias.hostnames.clone().unwrap_or_default().join("\t")
        ));
    }
    out
}

/// The pod's /etc/resolv.conf: cluster DNS with upstream's search path.
pub fn resolv_file(pod: &Pod, nameserver: Ipv4Addr) -> String {
    let ns = pod.namespace().unwrap_or_default();
    format!(
        "search {ns}.svc.cluster.local svc.cluster.local cluster.local\nnameserver {nameserver}\noptions ndots:5\n"
    )
}

/// How one container is started: the shim's launch, or why it cannot be.
pub struct ContainerLaunch {
    pub launch: Launch,
    /// Whether it runs the stand-in workload instead of a command.
    pub standin: bool,
}

/// Builds the launch of container `c`, with its environment and volume
/// paths already resolved.
#[allow(clippy::too_many_arguments)]
pub fn launch(
    id: &PodIdentity<'_>,
    c: &Container,
    env: Vec<(String, String)>,
    volumes: &BTreeMap<String, PathBuf>,
    etc: &[(PathBuf, &str)],
    helper: &Path,
    netns: PathBuf,
    root: PathBuf,
    tmp: PathBuf,
) -> Result<ContainerLaunch, ConfigError> {
    let (uid, gid, groups) = user(id.pod, c);
    let mut mounts = Vec::new();
    for m in c.volume_mounts.iter().flatten() {
        let Some(source) = volumes.get(&m.name) else {
            return Err(config_error(format!(
                "volumeMount {:?} refers to no volume of the pod",
                m.name
            )));
        };
        let source = match &m.sub_path {
            Some(sub) if !sub.is_empty() => {
                if Path::new(sub).components().any(|c| c.as_os_str() == "..") {
                    return Err(config_error(format!("subPath {sub:?} leaves the volume")));
                }
                source.join(sub)
            }
            _ => source.clone(),
        };
        mounts.push(Mount {
            source,
            target: m.mount_path.clone(),
            read_only: m.read_only == Some(true),
        });
    }
    for (source, target) in etc {
        mounts.push(Mount {
            source: source.clone(),
            target: target.to_string(),
            read_only: false,
        });
    }
    let image = images::profile(c.image.as_deref().unwrap_or_default());
    let path = env
        .iter()
        .rev()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| DEFAULT_PATH.to_string());
    // The name to run a program by: its own where the host has it, the
    // host's where the image names it otherwise. The shim looks it up on
    // the PATH, so that the program sees its argv[0] as it was written.
    let resolve = |program: &str| {
        if which_in(program, &path).is_some() {
            return Some(program.to_string());
        }
        let (_, host) = image.renamed.iter().find(|(ours, _)| *ours == program)?;
        which_in(host, &path).map(|_| host.to_string())
    };
    // As Kubernetes: the command and args; the image's ENTRYPOINT with
    // the args in place of its CMD when there is no command.
    let args = c.args.clone().unwrap_or_default();
    let program: Vec<String> = match (c.command.as_deref(), image.process) {
        (Some(command), _) if !command.is_empty() => command.iter().cloned().chain(args).collect(),
        (_, Some(process)) => process.argv(&args, |p| resolve(p).is_some()),
        _ => Vec::new(),
    };
    let standin = program.is_empty();
    let imitation = program
        .first()
        .and_then(|p| image.imitated.iter().find(|(ours, _)| ours == p))
        .map(|(_, subcommand)| *subcommand);
    if standin || imitation.is_some() {
        mounts.push(Mount {
            source: helper.to_path_buf(),
            target: STANDIN_PATH.into(),
            read_only: true,
        });
    }
    let argv = if let Some(subcommand) = imitation {
        // A program of the image's own that Flotilla imitates.
        [STANDIN_PATH, subcommand]
            .into_iter()
            .map(str::to_string)
            .chain(program[1..].iter().map(|a| expand(a, &env)))
            .collect()
    } else if standin {
        // Images are not pulled: the stand-in serves the declared ports,
        // or the one a well-known image listens on.
        let mut argv = vec![STANDIN_PATH.to_string(), "__standin".into()];
        let ports: Vec<i32> = c
            .ports
            .iter()
            .flatten()
            .filter(|p| p.protocol.as_deref().unwrap_or("TCP") == "TCP")
            .map(|p| p.container_port)
            .collect();
        let ports = if ports.is_empty() {
            vec![i32::from(image.default_port)]
        } else {
            ports
        };
        for p in ports {
            argv.push("--port".into());
            argv.push(p.to_string());
        }
        if let Some(page) = image.page {
            argv.push("--page".into());
            argv.push(page.to_string());
        }
        argv
    } else {
        let mut argv: Vec<String> = program.iter().map(|a| expand(a, &env)).collect();
        let Some(resolved) = resolve(&argv[0]) else {
            return Err(ConfigError {
                reason: "StartError",
                message: format!(
                    "failed to create containerd task: exec: {:?}: executable file not found in $PATH",
                    argv[0]
                ),
            });
        };
        argv[0] = resolved;
        argv
    };
    let mut env = env;
    if standin {
        for (k, v) in [
            ("FLOTILLA_POD_NAME", id.pod.name_any()),
            (
                "FLOTILLA_POD_NAMESPACE",
                id.pod.namespace().unwrap_or_default(),
            ),
            ("FLOTILLA_POD_IP", id.ip.to_string()),
            ("FLOTILLA_CLUSTER", id.cluster.to_string()),
            ("FLOTILLA_NODE", id.node.to_string()),
            ("FLOTILLA_CONTAINER", c.name.clone()),
        ] {
            env.push((k.into(), v));
        }
    }
    Ok(ContainerLaunch {
        launch: Launch {
            netns,
            join_pid: None,
            root,
            tmp,
            hostname: hostname(id.pod),
            mounts,
            uid,
            gid,
            supplemental_groups: groups,
            working_dir: c.working_dir.clone().filter(|w| !w.is_empty()),
            argv,
            env,
            // A terminal on stdin for containers that ask for one.
            tty: c.tty == Some(true),
            cgroups: Vec::new(),
        },
        standin,
    })
}

/// Where the stand-in binary (Flotilla's own, for the stand-in and the
/// imitated programs) appears inside a container.
pub const STANDIN_PATH: &str = "/.flotilla/standin";

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn hosts_and_resolv_name_the_pod_and_its_namespace() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "web-0", "namespace": "shop"},
            "spec": {"containers": [], "hostname": "web-0", "subdomain": "web",
                     "hostAliases": [{"ip": "10.1.2.3", "hostnames": ["foo.local"]}]},
        }))
        .unwrap();
        let hosts = hosts_file(&pod, "10.128.0.5".parse().unwrap());
        assert!(hosts.contains("10.128.0.5\tweb-0.web.shop.svc.cluster.local\tweb-0\n"));
        assert!(hosts.contains("10.1.2.3\tfoo.local\n"));
        let resolv = resolv_file(&pod, "10.96.0.10".parse().unwrap());
        assert!(resolv.starts_with("search shop.svc.cluster.local svc.cluster.local"));
        assert!(resolv.contains("nameserver 10.96.0.10\n"));
    }
}
