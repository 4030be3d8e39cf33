//! `flotilla apiserver`: the API server on the embedded store.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use flotilla_apiserver::{ApiServer, Config};
use flotilla_store::{SqliteOptions, SqliteStore, Store};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tracing::info;

use crate::kubeconfig;

#[derive(clap::Args)]
pub struct Args {
    /// Where the embedded store keeps its data [default: <user data dir>/flotilla/apiserver]
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Address to serve on; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:6443")]
    listen: SocketAddr,
    /// Write a kubeconfig for this server here once it answers [default: <data dir>/kubeconfig]
    #[arg(long)]
    write_kubeconfig: Option<PathBuf>,
    /// How many recent changes the watch cache keeps for resuming watches;
    /// older resourceVersions get 410 Expired.
    #[arg(long, default_value_t = 100_000)]
    watch_history: usize,
}

pub fn default_data_dir(component: &str) -> PathBuf {
    dirs::data_dir()
        .unwrap_or_else(|| PathBuf::from("."))
        .join("flotilla")
        .join(component)
}

/// Resolves when SIGTERM or SIGINT arrives.
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

/// Asks the server at `addr` for /readyz until it answers 200.
async fn wait_ready(addr: SocketAddr) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        if let Ok(mut conn) = tokio::net::TcpStream::connect(addr).await {
            let req = format!("GET /readyz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
            if conn.write_all(req.as_bytes()).await.is_ok() {
                let mut buf = Vec::new();
                let _ = conn.read_to_end(&mut buf).await;
                if buf.starts_with(b"HTTP/1.1 200") {
                    return Ok(());
                }
            }
        }
        if tokio::time::Instant::now() > deadline {
            bail!("the server at {addr} did not become ready within 30s");
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let data_dir = args
        .data_dir
        .unwrap_or_else(|| default_data_dir("apiserver"));
    let kubeconfig_path = args
        .write_kubeconfig
        .unwrap_or_else(|| data_dir.join("kubeconfig"));
    let store = SqliteStore::open(
        &data_dir,
        SqliteOptions {
            history_capacity: args.watch_history,
            ..SqliteOptions::default()
        },
    )
    .with_context(|| {
        format!(
            "cannot open the store in {} (is another flotilla using it?)",
            data_dir.display()
        )
    })?;
    let store: Arc<dyn Store> = store;
    let api = ApiServer::new(store, Config::default())
        .await
        .map_err(|e| anyhow::anyhow!("cannot start the API server: {}", e.message))?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| {
            format!(
                "cannot listen on {} (in use? pass --listen 127.0.0.1:0 for a free port)",
                args.listen
            )
        })?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn(api.serve(listener, shutdown_signal()));
    wait_ready(addr).await?;
    kubeconfig::write_atomically(
        &kubeconfig_path,
        &kubeconfig::render(&format!("http://{addr}"), "flotilla"),
    )?;
    info!(kubeconfig = %kubeconfig_path.display(), data_dir = %data_dir.display(), "ready");
    eprintln!(
        "flotilla apiserver ready on http://{addr}\n  export KUBECONFIG={}",
        kubeconfig_path.display()
    );
    server.await.context("the server task failed")??;
    info!("shut down cleanly");
    Ok(())
}
