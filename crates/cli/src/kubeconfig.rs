//! Writing kubeconfig files atomically, so their appearance means "ready".

use std::io::Write;
use std::path::Path;

use anyhow::Context;
use base64::Engine;

/// A kubeconfig with one cluster, user and context, all called `name`:
/// the server's CA and a bearer token.
pub fn render(server: &str, name: &str, ca_pem: &str, token: &str) -> String {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    render_contexts(
        &[Entry {
            name,
            server,
            ca_base64: &ca,
            token,
        }],
        name,
    )
}

/// One server in a kubeconfig: its cluster, user and context share `name`.
pub struct Entry<'a> {
    pub name: &'a str,
    pub server: &'a str,
    pub ca_base64: &'a str,
    pub token: &'a str,
}

/// A kubeconfig with a context per entry; `current` is the current one.
pub fn render_contexts(entries: &[Entry], current: &str) -> String {
    let mut clusters = String::new();
    let mut contexts = String::new();
    let mut users = String::new();
    for Entry {
        name,
        server,
        ca_base64,
        token,
    } in entries
    {
        clusters.push_str(&format!(
            "- name: {name}\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca_base64}\n"
        ));
        contexts.push_str(&format!(
            "- name: {name}\n  context:\n    cluster: {name}\n    user: {name}\n    namespace: default\n"
        ));
        users.push_str(&format!("- name: {name}\n  user:\n    token: {token}\n"));
    }
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n{clusters}contexts:\n{contexts}current-context: {current}\nusers:\n{users}preferences: {{}}\n"
    )
}

/// The server an existing kubeconfig points at (its current context's
/// cluster, else its first).
pub struct Target {
    pub cluster: String,
    pub server: String,
    pub ca_pem: String,
}

pub fn target_of(config: &kube::config::Kubeconfig) -> anyhow::Result<Target> {
    let current = config.current_context.as_deref().and_then(|name| {
        config
            .contexts
            .iter()
            .find(|c| c.name == name)
            .and_then(|c| c.context.as_ref())
            .map(|c| c.cluster.clone())
    });
    let named = config
        .clusters
        .iter()
        .find(|c| Some(&c.name) == current.as_ref())
        .or_else(|| config.clusters.first())
        .context("the kubeconfig names no cluster (pass the server's admin kubeconfig)")?;
    let cluster = named
        .cluster
        .as_ref()
        .context("the kubeconfig's cluster has no server")?;
    let ca = cluster
        .certificate_authority_data
        .as_deref()
        .map(|b| base64::engine::general_purpose::STANDARD.decode(b))
        .transpose()
        .context("the kubeconfig's certificate-authority-data is not base64")?
        .unwrap_or_default();
    Ok(Target {
        cluster: named.name.clone(),
        server: cluster.server.clone().unwrap_or_default(),
        ca_pem: String::from_utf8_lossy(&ca).into_owned(),
    })
}

/// A kubeconfig for `user` authenticating with a client certificate
/// (PEM `certificate` and `key`) at `target`; context `user@cluster`.
pub fn render_client_certificate(
    target: &Target,
    user: &str,
    certificate: &str,
    key: &str,
    namespace: &str,
) -> String {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let cluster = &target.cluster;
    let context = format!("{user}@{cluster}");
    // Names are quoted: a user name may hold YAML's special characters.
    let q = |s: &str| serde_json::Value::String(s.to_string()).to_string();
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: {c}\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\ncontexts:\n- name: {ctx}\n  context:\n    cluster: {c}\n    user: {u}\n    namespace: {ns}\ncurrent-context: {ctx}\nusers:\n- name: {u}\n  user:\n    client-certificate-data: {cert}\n    client-key-data: {key}\npreferences: {{}}\n",
        c = q(cluster),
        server = q(&target.server),
        ca = b64(&target.ca_pem),
        ctx = q(&context),
        u = q(user),
        ns = q(namespace),
        cert = b64(certificate),
        key = b64(key),
    )
}

/// Writes `contents` to `path` via a temporary file and a rename; only
/// the owner may read it, as it carries a credential.
pub fn write_atomically(path: &Path, contents: &str) -> anyhow::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let file_name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("kubeconfig");
    let tmp = dir.join(format!(".{file_name}.tmp-{}", std::process::id()));
    {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        let mut f = options
            .open(&tmp)
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        // 0600 even where a leftover temporary file had other bits.
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            f.set_permissions(std::fs::Permissions::from_mode(0o600))
                .with_context(|| format!("cannot restrict {} to its owner", tmp.display()))?;
        }
        f.write_all(contents.as_bytes())?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

/// A kube-rs client from the kubeconfig at `path`, as any user's would load.
pub async fn client(path: &Path) -> anyhow::Result<kube::Client> {
    let file = kube::config::Kubeconfig::read_from(path)
        .with_context(|| format!("cannot read the kubeconfig {}", path.display()))?;
    client_from(file).await
}

pub async fn client_from(file: kube::config::Kubeconfig) -> anyhow::Result<kube::Client> {
    let config =
        kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
            .await?;
    Ok(kube::Client::try_from(config)?)
}
