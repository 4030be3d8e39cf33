//! The multi-cluster CLI on top of the hub's API: `flotilla clusters`,
//! `get`, `describe placement` and `plan`. Everything is read through the
//! hub (and, for `get`, the members it reaches); nothing is written.

pub mod clusters;
pub mod describe;
pub mod get;
mod placement;
pub mod plan;
mod policy;
pub mod resolve;
pub mod review;
pub mod table;

use std::path::PathBuf;

use anyhow::Context;
use kube::config::{KubeConfigOptions, Kubeconfig};

/// Which hub to talk to.
#[derive(clap::Args, Clone)]
pub struct HubArgs {
    /// The hub's kubeconfig [default: $KUBECONFIG, then ~/.kube/config]
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// The hub's context in it [default: its current context]
    #[arg(long)]
    pub context: Option<String>,
}

impl HubArgs {
    /// The kubeconfig, as kubectl finds it.
    pub fn kubeconfig(&self) -> anyhow::Result<Kubeconfig> {
        match &self.kubeconfig {
            Some(path) => Kubeconfig::read_from(path)
                .with_context(|| format!("cannot read the kubeconfig {}", path.display())),
            None => Kubeconfig::read().context(
                "no kubeconfig: pass --kubeconfig, set KUBECONFIG, or start a fleet with `flotilla up`",
            ),
        }
    }

    pub async fn client(&self) -> anyhow::Result<kube::Client> {
        self.client_for(self.context.clone()).await
    }

    /// A client for `context` of the same kubeconfig.
    pub async fn client_for(&self, context: Option<String>) -> anyhow::Result<kube::Client> {
        let options = KubeConfigOptions {
            context,
            ..Default::default()
        };
        let config = kube::Config::from_custom_kubeconfig(self.kubeconfig()?, &options)
            .await
            .context("invalid kubeconfig")?;
        Ok(kube::Client::try_from(config)?)
    }
}

/// Writes a command's output to stdout; a reader that went away (`| head`)
/// is no error.
pub fn emit(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

/// A hub error a user can act on: an unreachable hub, or one that is not
/// a Flotilla (or Karmada) control plane.
pub fn hub_error(e: kube::Error) -> anyhow::Error {
    match &e {
        kube::Error::Api(s) if s.code == 404 => anyhow::anyhow!(
            "the server does not serve cluster.karmada.io: is this kubeconfig a Flotilla control plane's? ({e})"
        ),
        _ => anyhow::Error::new(e).context("cannot reach the hub"),
    }
}

/// A client for one member: Push members with the credentials the hub
/// holds for them; a Pull member (which the hub cannot reach) through the
/// context of the same name in the kubeconfig, as `flotilla up` writes it
/// (none when asked on the hub itself: `hub_args` is then `None`).
pub async fn member_client(
    hub_args: Option<&HubArgs>,
    members: &flotilla_federation::members::Members,
    cluster: &flotilla_federation::api::Cluster,
) -> Result<kube::Client, String> {
    use kube::ResourceExt;
    let name = cluster.name_any();
    if cluster.spec.sync_mode == flotilla_federation::api::sync_mode::PUSH {
        // The HTTP/1.1 client: the CLI's few requests include exec
        // (`flotilla network verify`), which upgrades the connection.
        return members
            .get(cluster)
            .await
            .map(|m| m.upgrades)
            .map_err(|e| format!("cannot build its client: {e}"));
    }
    let Some(hub_args) = hub_args else {
        return Err(format!(
            "{} mode: the hub cannot reach its API",
            cluster.spec.sync_mode
        ));
    };
    hub_args.client_for(Some(name.clone())).await.map_err(|_| {
        format!(
            "{} mode: the hub cannot reach it, and the kubeconfig has no context \"{name}\" for it",
            cluster.spec.sync_mode
        )
    })
}
