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
