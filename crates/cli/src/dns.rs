//! `flotilla dns`: serves the fleet's `clusterset.local` zone (see
//! `flotilla_dns`) over UDP and TCP on one address.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use flotilla_dns::server::{self, Caches};
use tokio::net::{TcpListener, UdpSocket};

use crate::apiserver::shutdown_signal;
use crate::kubeconfig;

#[derive(clap::Args)]
pub struct DnsArgs {
    /// The hub's kubeconfig.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: PathBuf,
    /// Address to serve on, UDP and TCP; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:5353")]
    pub listen: SocketAddr,
}

pub async fn run(args: DnsArgs) -> anyhow::Result<()> {
    let hub = kubeconfig::client(&args.kubeconfig).await?;
    let udp = UdpSocket::bind(args.listen).await.with_context(|| {
        format!(
            "cannot listen on {} (UDP): is the port in use?",
            args.listen
        )
    })?;
    // The same port for TCP, also when the UDP one was picked.
    let addr = udp.local_addr()?;
    let tcp = TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr} (TCP): is the port in use?"))?;
    let caches = Caches::follow(hub)
        .await
        .context("cannot follow the hub's ServiceImports (is this a Flotilla control plane?)")?;
    eprintln!("flotilla dns serving clusterset.local on {addr} (UDP and TCP)");
    tokio::select! {
        _ = server::serve_udp(udp, caches.clone()) => {}
        _ = server::serve_tcp(tcp, caches) => {}
        _ = shutdown_signal() => {}
    }
    Ok(())
}
