//! `flotilla dns`: serves the fleet's `clusterset.local` zone (see
//! `flotilla_dns`) over UDP and TCP on one address.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

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
    let sockets = bind(args.listen).await?;
    tokio::select! {
        r = serve(hub, sockets) => r,
        _ = shutdown_signal() => Ok(()),
    }
}

/// A UDP socket and a TCP listener on the same address.
pub struct Sockets {
    udp: UdpSocket,
    tcp: TcpListener,
}

/// Binds UDP, then TCP on the same port. With port 0, the port UDP picked
/// may be held on the TCP side (a client connection's local port), so a
/// few other ports are tried before giving up.
pub async fn bind(listen: SocketAddr) -> anyhow::Result<Sockets> {
    const PICKS: usize = 8;
    let mut pick = 1;
    loop {
        let udp = UdpSocket::bind(listen)
            .await
            .with_context(|| format!("cannot listen on {listen} (UDP): is the port in use?"))?;
        let addr = udp.local_addr()?;
        match TcpListener::bind(addr).await {
            Ok(tcp) => return Ok(Sockets { udp, tcp }),
            Err(_) if listen.port() == 0 && pick < PICKS => pick += 1,
            Err(error) => {
                return Err(error).with_context(|| {
                    format!("cannot listen on {addr} (TCP): is the port in use?")
                });
            }
        }
    }
}

/// Serves clusterset.local from the hub behind `hub`, for ever.
pub async fn serve(hub: kube::Client, sockets: Sockets) -> anyhow::Result<()> {
    let addr = sockets.udp.local_addr()?;
    let caches = Caches::follow(hub)
        .await
        .context("cannot follow the hub's ServiceImports (is this a Flotilla control plane?)")?;
    eprintln!("flotilla dns serving clusterset.local on {addr} (UDP and TCP)");
    tokio::join!(
        server::serve_udp(sockets.udp, Arc::new(caches.clone())),
        server::serve_tcp(sockets.tcp, Arc::new(caches))
    );
    Ok(())
}
