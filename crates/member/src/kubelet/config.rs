//! The kubelet's side of [`PodConfig`]: the pod read in full, the
//! ConfigMaps, Secrets, downward API and service-account tokens a
//! container's environment and the pod's volumes refer to, read from the
//! API with the kubelet's credentials and written out for the runtime.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, ObjectFieldSelector, Pod, ResourceFieldSelector, Secret, Volume,
};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use crate::runtime::config::{
    ConfigError, PodConfig, PodIdentity, config_error, expand, hostname, mount_error,
};
use flotilla_host::DEFAULT_PATH;

/// Reads what pods refer to with the kubelet's client.
pub struct ApiPodConfig {
    client: Client,
}

impl ApiPodConfig {
    pub fn new(client: Client) -> Self {
        ApiPodConfig { client }
    }
}

#[async_trait]
impl PodConfig for ApiPodConfig {
    async fn pod(&self, namespace: &str, name: &str) -> Result<Pod, ConfigError> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        api.get(name).await.map_err(|e| ConfigError {
            reason: "FailedCreatePodSandBox",
            message: format!("cannot read the pod: {e}"),
        })
    }

    async fn volumes(
        &self,
        id: &PodIdentity<'_>,
        dir: &Path,
    ) -> Result<BTreeMap<String, PathBuf>, ConfigError> {
        volumes(&self.resolver(id), id, dir).await
    }

    async fn environment(
        &self,
        container: &Container,
        id: &PodIdentity<'_>,
    ) -> Result<Vec<(String, String)>, ConfigError> {
        environment(&self.resolver(id), container, id).await
    }
}

impl ApiPodConfig {
    fn resolver(&self, id: &PodIdentity<'_>) -> Resolver {
        Resolver {
            client: self.client.clone(),
            namespace: id.pod.namespace().unwrap_or_default(),
        }
    }
}

/// Reads the ConfigMaps, Secrets and tokens of one pod's namespace.
struct Resolver {
    client: Client,
    namespace: String,
}

impl Resolver {
    async fn config_map(&self, name: &str) -> Result<Option<ConfigMap>, ConfigError> {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.namespace);
        api.get_opt(name)
            .await
            .map_err(|e| config_error(format!("cannot read configmap {name:?}: {e}")))
    }

    async fn secret(&self, name: &str) -> Result<Option<Secret>, ConfigError> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), &self.namespace);
        api.get_opt(name)
            .await
            .map_err(|e| config_error(format!("cannot read secret {name:?}: {e}")))
    }

    /// The host directory of the volume bound to claim `name` (a
    /// `hostPath` or `local` volume), made when its type asks for it.
    async fn claimed_dir(&self, name: &str) -> Result<PathBuf, ConfigError> {
        use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
        let claims: Api<PersistentVolumeClaim> =
            Api::namespaced(self.client.clone(), &self.namespace);
        let claim = claims
            .get_opt(name)
            .await
            .map_err(|e| mount_error(format!("cannot read persistentvolumeclaim {name:?}: {e}")))?
            .ok_or_else(|| mount_error(format!("persistentvolumeclaim \"{name}\" not found")))?;
        if let Some(restore) = claim
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(flotilla_core::volume_data::RESTORING_ANNOTATION))
        {
            // Its data is being written back: the container waits, as
            // Velero's restore-wait init container makes it wait.
            return Err(mount_error(format!(
                "persistentvolumeclaim {name:?}: its data is being restored by restore {restore}"
            )));
        }
        let bound = claim.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
        let volume = claim
            .spec
            .and_then(|s| s.volume_name)
            .filter(|v| bound && !v.is_empty())
            .ok_or_else(|| {
                mount_error(format!(
                    "pod has unbound immediate PersistentVolumeClaims: {name:?} is not bound yet"
                ))
            })?;
        let volumes: Api<PersistentVolume> = Api::all(self.client.clone());
        let pv = volumes
            .get_opt(&volume)
            .await
            .map_err(|e| mount_error(format!("cannot read persistentvolume {volume:?}: {e}")))?
            .and_then(|pv| pv.spec)
            .ok_or_else(|| mount_error(format!("persistentvolume \"{volume}\" not found")))?;
        let (path, create) = match (pv.host_path, pv.local) {
            (Some(h), _) => {
                let create = matches!(h.type_.as_deref(), Some("DirectoryOrCreate"));
                (PathBuf::from(h.path), create)
            }
            (None, Some(l)) => (PathBuf::from(l.path), false),
            _ => {
                return Err(mount_error(format!(
                    "persistentvolume {volume:?} is of a type this runtime does not mount (hostPath, local)"
                )));
            }
        };
        if create {
            std::fs::create_dir_all(&path)
                .and_then(|()| {
                    use std::os::unix::fs::PermissionsExt;
                    // As local-path's: any container user may write.
                    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777))
                })
                .map_err(|e| mount_error(format!("cannot make {}: {e}", path.display())))?;
        } else if !path.is_dir() {
            return Err(mount_error(format!(
                "volume {volume:?}: {} is not a directory",
                path.display()
            )));
        }
        Ok(path)
    }

    /// A ConfigMap's or Secret's data as bytes per key.
    async fn data(&self, kind: Source, name: &str) -> Result<Option<Data>, ConfigError> {
        Ok(match kind {
            Source::ConfigMap => self.config_map(name).await?.map(|cm| {
                let mut out: Data = cm
                    .data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.into_bytes()))
                    .collect();
                out.extend(
                    cm.binary_data
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(k, v)| (k, v.0)),
                );
                out
            }),
            Source::Secret => self.secret(name).await?.map(|s| {
                let mut out: Data = s
                    .data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.0))
                    .collect();
                out.extend(
                    s.string_data
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(k, v)| (k, v.into_bytes())),
                );
                out
            }),
        })
    }

    async fn token(
        &self,
        pod: &Pod,
        audience: Option<&str>,
        seconds: Option<i64>,
    ) -> Result<String, ConfigError> {
        let sa = pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_else(|| "default".into());
        let api: Api<k8s_openapi::api::core::v1::ServiceAccount> =
            Api::namespaced(self.client.clone(), &self.namespace);
        let request = json!({
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {
                "audiences": audience.map(|a| vec![a]).unwrap_or_default(),
                "expirationSeconds": seconds.unwrap_or(3607),
                "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": pod.name_any(), "uid": pod.uid()},
            },
        });
        let answer: TokenRequest = api
            .create_subresource("token", &sa, &Default::default(), &request)
            .await
            .map_err(|e| {
                mount_error(format!("cannot get a token for serviceaccount {sa:?}: {e}"))
            })?;
        Ok(answer.status.map(|s| s.token).unwrap_or_default())
    }
}

type Data = BTreeMap<String, Vec<u8>>;

#[derive(Clone, Copy)]
enum Source {
    ConfigMap,
    Secret,
}

impl Source {
    fn noun(self) -> &'static str {
        match self {
            Source::ConfigMap => "configmap",
            Source::Secret => "secret",
        }
    }
}

/// A container's environment, in order, `$(VAR)` references expanded.
async fn environment(
    r: &Resolver,
    container: &Container,
    id: &PodIdentity<'_>,
) -> Result<Vec<(String, String)>, ConfigError> {
    let mut env: Vec<(String, String)> = vec![
        ("PATH".into(), DEFAULT_PATH.into()),
        ("HOSTNAME".into(), hostname(id.pod)),
    ];
    let set = |env: &mut Vec<(String, String)>, k: String, v: String| {
        env.retain(|(name, _)| name != &k);
        env.push((k, v));
    };
    for from in container.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        let (kind, name, optional) = match (&from.config_map_ref, &from.secret_ref) {
            (Some(c), _) => (Source::ConfigMap, c.name.clone(), c.optional),
            (None, Some(s)) => (Source::Secret, s.name.clone(), s.optional),
            (None, None) => continue,
        };
        match r.data(kind, &name).await? {
            Some(data) => {
                for (k, v) in data {
                    set(
                        &mut env,
                        format!("{prefix}{k}"),
                        String::from_utf8_lossy(&v).into_owned(),
                    );
                }
            }
            None if optional == Some(true) => {}
            None => return Err(config_error(format!("{} {name:?} not found", kind.noun()))),
        }
    }
    for var in container.env.iter().flatten() {
        let value = match (&var.value, &var.value_from) {
            (Some(v), _) => expand(v, &env),
            (None, Some(from)) => {
                if let Some(f) = &from.field_ref {
                    field(id, f)?
                } else if let Some(f) = &from.resource_field_ref {
                    resource_field(container_named(id.pod, f, container), f)?
                } else {
                    let (kind, name, key, optional) =
                        match (&from.config_map_key_ref, &from.secret_key_ref) {
                            (Some(c), _) => (Source::ConfigMap, &c.name, &c.key, c.optional),
                            (None, Some(s)) => (Source::Secret, &s.name, &s.key, s.optional),
                            (None, None) => continue,
                        };
                    match r.data(kind, name).await? {
                        Some(data) => match data.get(key) {
                            Some(v) => String::from_utf8_lossy(v).into_owned(),
                            None if optional == Some(true) => continue,
                            None => {
                                return Err(config_error(format!(
                                    "couldn't find key {key} in {} {}/{name}",
                                    kind.noun()
                                        .replace("configmap", "ConfigMap")
                                        .replace("secret", "Secret"),
                                    r.namespace
                                )));
                            }
                        },
                        None if optional == Some(true) => continue,
                        None => {
                            return Err(config_error(format!(
                                "{} {name:?} not found",
                                kind.noun()
                            )));
                        }
                    }
                }
            }
            (None, None) => String::new(),
        };
        set(&mut env, var.name.clone(), value);
    }
    Ok(env)
}

fn container_named<'a>(
    pod: &'a Pod,
    f: &ResourceFieldSelector,
    default: &'a Container,
) -> &'a Container {
    match &f.container_name {
        Some(name) if !name.is_empty() => pod
            .spec
            .iter()
            .flat_map(|s| {
                s.containers
                    .iter()
                    .chain(s.init_containers.iter().flatten())
            })
            .find(|c| &c.name == name)
            .unwrap_or(default),
        _ => default,
    }
}

fn field(id: &PodIdentity<'_>, f: &ObjectFieldSelector) -> Result<String, ConfigError> {
    let pod = id.pod;
    let path = f.field_path.as_str();
    let spec = pod.spec.as_ref();
    Ok(match path {
        "metadata.name" => pod.name_any(),
        "metadata.namespace" => pod.namespace().unwrap_or_default(),
        "metadata.uid" => pod.uid().unwrap_or_default(),
        "spec.nodeName" => id.node.to_string(),
        "spec.serviceAccountName" => spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_else(|| "default".into()),
        "status.hostIP" | "status.hostIPs" => id.host_ip.to_string(),
        "status.podIP" | "status.podIPs" => id.ip.to_string(),
        "metadata.labels" => format_map(pod.labels()),
        "metadata.annotations" => format_map(pod.annotations()),
        other => {
            let map_key = |prefix: &str| {
                other
                    .strip_prefix(prefix)
                    .and_then(|k| k.strip_prefix("['"))
                    .and_then(|k| k.strip_suffix("']"))
            };
            if let Some(k) = map_key("metadata.labels") {
                pod.labels().get(k).cloned().unwrap_or_default()
            } else if let Some(k) = map_key("metadata.annotations") {
                pod.annotations().get(k).cloned().unwrap_or_default()
            } else {
                return Err(config_error(format!(
                    "unsupported fieldPath {other:?} in the downward API"
                )));
            }
        }
    })
}

/// `key="value"` lines, as the downward API writes labels.
fn format_map(m: &BTreeMap<String, String>) -> String {
    m.iter()
        .map(|(k, v)| format!("{k}={}", serde_json::Value::String(v.clone())))
        .collect::<Vec<_>>()
        .join("\n")
}

fn resource_field(c: &Container, f: &ResourceFieldSelector) -> Result<String, ConfigError> {
    use crate::quantity;
    let resources = c.resources.as_ref();
    let get = |limits: bool, name: &str| {
        let map = if limits {
            resources.and_then(|r| r.limits.as_ref())
        } else {
            resources.and_then(|r| r.requests.as_ref())
        };
        map.and_then(|m| m.get(name)).map(|q| q.0.clone())
    };
    let divisor = f.divisor.as_ref().map(|q| q.0.as_str()).unwrap_or("1");
    let (limits, name) = match f.resource.split_once('.') {
        Some(("limits", n)) => (true, n),
        Some(("requests", n)) => (false, n),
        _ => {
            return Err(config_error(format!(
                "unsupported resource {:?} in the downward API",
                f.resource
            )));
        }
    };
    // Limits left out are the node's capacity; requests left out are 0.
    let value = get(limits, name);
    Ok(match name {
        "cpu" => {
            let m = value
                .as_deref()
                .and_then(quantity::millicores)
                .unwrap_or(if limits { i64::from(i32::MAX) } else { 0 });
            let d = quantity::millicores(divisor).unwrap_or(1000).max(1);
            // Rounded up, as upstream does.
            ((m + d - 1) / d).to_string()
        }
        _ => {
            let b = value
                .as_deref()
                .and_then(quantity::units)
                .unwrap_or(if limits { i64::MAX / 2 } else { 0 });
            let d = quantity::units(divisor).unwrap_or(1).max(1);
            ((b + d - 1) / d).to_string()
        }
    })
}

/// Writes `files` into `dir` with `mode` (the volume's contents).
fn write_files(dir: &Path, files: &[(String, Vec<u8>, u32)]) -> Result<(), ConfigError> {
    for (path, data, mode) in files {
        let rel = Path::new(path);
        if rel.is_absolute() || rel.components().any(|c| c.as_os_str() == "..") {
            return Err(mount_error(format!("invalid path {path:?} in a volume")));
        }
        let target = dir.join(rel);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(|e| mount_error(e.to_string()))?;
        }
        std::fs::write(&target, data).map_err(|e| mount_error(e.to_string()))?;
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(*mode))
            .map_err(|e| mount_error(e.to_string()))?;
    }
    Ok(())
}

/// The files of a ConfigMap or Secret projection: `items` or every key.
async fn key_files(
    r: &Resolver,
    kind: Source,
    name: &str,
    items: Option<&Vec<k8s_openapi::api::core::v1::KeyToPath>>,
    optional: Option<bool>,
    mode: u32,
) -> Result<Vec<(String, Vec<u8>, u32)>, ConfigError> {
    let Some(data) = r.data(kind, name).await? else {
        if optional == Some(true) {
            return Ok(Vec::new());
        }
        return Err(mount_error(format!(
            "MountVolume.SetUp failed: {} {name:?} not found",
            kind.noun()
        )));
    };
    match items {
        Some(items) => items
            .iter()
            .filter_map(|item| match data.get(&item.key) {
                Some(v) => Some(Ok((
                    item.path.clone(),
                    v.clone(),
                    item.mode.map(|m| m as u32).unwrap_or(mode),
                ))),
                None if optional == Some(true) => None,
                None => Some(Err(mount_error(format!(
                    "MountVolume.SetUp failed: key {:?} not in {} {name:?}",
                    item.key,
                    kind.noun()
                )))),
            })
            .collect(),
        None => Ok(data.into_iter().map(|(k, v)| (k, v, mode)).collect()),
    }
}

/// Writes the pod's volumes under `dir`, one directory each; returns
/// each volume's path on the host.
async fn volumes(
    r: &Resolver,
    id: &PodIdentity<'_>,
    dir: &Path,
) -> Result<BTreeMap<String, PathBuf>, ConfigError> {
    let mut out = BTreeMap::new();
    let spec_volumes: &[Volume] = id
        .pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_deref())
        .unwrap_or(&[]);
    for v in spec_volumes {
        let path = dir.join(&v.name);
        std::fs::create_dir_all(&path).map_err(|e| mount_error(e.to_string()))?;
        let mode = |m: Option<i32>| m.map(|m| m as u32).unwrap_or(0o644);
        let files = if v.empty_dir.is_some() {
            // Writable by whichever user the containers run as.
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777))
                .map_err(|e| mount_error(e.to_string()))?;
            Vec::new()
        } else if let Some(cm) = &v.config_map {
            key_files(
                r,
                Source::ConfigMap,
                &cm.name,
                cm.items.as_ref(),
                cm.optional,
                mode(cm.default_mode),
            )
            .await?
        } else if let Some(s) = &v.secret {
            let name = s.secret_name.clone().unwrap_or_default();
            key_files(
                r,
                Source::Secret,
                &name,
                s.items.as_ref(),
                s.optional,
                mode(s.default_mode),
            )
            .await?
        } else if let Some(d) = &v.downward_api {
            downward_files(id, d.items.as_deref().unwrap_or(&[]), mode(d.default_mode))?
        } else if let Some(p) = &v.projected {
            let mut files = Vec::new();
            let default = mode(p.default_mode);
            for source in p.sources.iter().flatten() {
                if let Some(cm) = &source.config_map {
                    files.extend(
                        key_files(
                            r,
                            Source::ConfigMap,
                            &cm.name,
                            cm.items.as_ref(),
                            cm.optional,
                            default,
                        )
                        .await?,
                    );
                } else if let Some(s) = &source.secret {
                    files.extend(
                        key_files(
                            r,
                            Source::Secret,
                            &s.name,
                            s.items.as_ref(),
                            s.optional,
                            default,
                        )
                        .await?,
                    );
                } else if let Some(d) = &source.downward_api {
                    files.extend(downward_files(
                        id,
                        d.items.as_deref().unwrap_or(&[]),
                        default,
                    )?);
                } else if let Some(t) = &source.service_account_token {
                    let token = r
                        .token(id.pod, t.audience.as_deref(), t.expiration_seconds)
                        .await?;
                    files.push((t.path.clone(), token.into_bytes(), default));
                }
            }
            files
        } else if let Some(h) = &v.host_path {
            // The host's own directory, as upstream binds it.
            out.insert(v.name.clone(), PathBuf::from(&h.path));
            continue;
        } else if let Some(claim) = &v.persistent_volume_claim {
            out.insert(v.name.clone(), r.claimed_dir(&claim.claim_name).await?);
            continue;
        } else {
            return Err(mount_error(format!(
                "volume {:?} is of a type this runtime does not support (emptyDir, configMap, secret, downwardAPI, projected, hostPath, persistentVolumeClaim)",
                v.name
            )));
        };
        write_files(&path, &files)?;
        out.insert(v.name.clone(), path);
    }
    Ok(out)
}

fn downward_files(
    id: &PodIdentity<'_>,
    items: &[k8s_openapi::api::core::v1::DownwardAPIVolumeFile],
    mode: u32,
) -> Result<Vec<(String, Vec<u8>, u32)>, ConfigError> {
    let first = id.pod.spec.as_ref().and_then(|s| s.containers.first());
    items
        .iter()
        .map(|item| {
            let value = if let Some(f) = &item.field_ref {
                field(id, f)?
            } else if let (Some(f), Some(c)) = (&item.resource_field_ref, first) {
                resource_field(container_named(id.pod, f, c), f)?
            } else {
                String::new()
            };
            Ok((
                item.path.clone(),
                value.into_bytes(),
                item.mode.map(|m| m as u32).unwrap_or(mode),
            ))
        })
        .collect()
}
