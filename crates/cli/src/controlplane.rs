//! `flotilla controlplane`: the hub. The API server on the embedded store
//! plus the federation control plane, which talks to it through a loopback
//! kube-rs client like any other client. The hub runs no workload
//! controllers: a Deployment here is a template.

use std::path::PathBuf;

use anyhow::Context;
use flotilla_apiserver::{Config, loopback};

use crate::apiserver::{ServeArgs, announce_and_serve, default_data_dir, prepare, shutdown_signal};

#[derive(clap::Args)]
pub struct Args {
    /// Where the embedded store keeps the hub's data [default: <user data dir>/flotilla/controlplane]
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Write a kubeconfig for the hub here once it is ready [default: <data dir>/kubeconfig]
    #[arg(long)]
    write_kubeconfig: Option<PathBuf>,
    #[command(flatten)]
    serve: ServeArgs,
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let data_dir = args
        .data_dir
        .unwrap_or_else(|| default_data_dir("controlplane"));
    let kubeconfig_path = args
        .write_kubeconfig
        .unwrap_or_else(|| data_dir.join("kubeconfig"));
    let p = prepare(&data_dir, &args.serve, Config::default()).await?;
    let client = loopback::in_process(&p.api, &p.admin_token, "flotilla-controlplane");
    let server = tokio::spawn(p.api.serve(p.listener, Some(p.tls), shutdown_signal()));
    // Ready means the Karmada API is served: install before publishing.
    flotilla_federation::crds::install(&client)
        .await
        .context("cannot install the control plane's CRDs")?;
    announce_and_serve(
        "controlplane",
        server,
        &p.ca_pem,
        &p.admin_token,
        p.addr,
        &data_dir,
        &kubeconfig_path,
    )
    .await
}
