//! `flotilla controlplane`: the hub. The API server on the embedded store
//! plus the federation control plane, which talks to it through a loopback
//! kube-rs client like any other client. The hub runs no workload
//! controllers: a Deployment here is a template.

use anyhow::Context;
use flotilla_apiserver::{Config, loopback};

use crate::apiserver::{Args, announce_and_serve, prepare, shutdown_signal};

pub async fn run(args: Args) -> anyhow::Result<()> {
    let (data_dir, kubeconfig_path) = args.paths("controlplane");
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
