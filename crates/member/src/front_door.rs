//! The member's API endpoint, which the unreachable fault can close: in
//! `refuse` mode nothing listens on the port (connections are refused), in
//! `hang` mode connections are accepted and never answered. Either way open
//! connections are dropped, so pooled HTTP/2 clients notice at once, and
//! the API comes back on the same address with all its state when the
//! fault is cleared.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use flotilla_apiserver::{ApiServer, ServeHandle};
use tokio::net::TcpListener;
use tracing::{info, warn};

use crate::faults::{Faults, Unreachable};

/// How long in-flight requests get on a clean shutdown.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Serves `api` on `listener` until `shutdown` resolves, opening and
/// closing the door as the unreachable fault says.
pub async fn serve(
    api: Arc<ApiServer>,
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    faults: Faults,
    shutdown: impl Future<Output = ()> + Send,
) -> std::io::Result<()> {
    let addr = listener.local_addr()?;
    let mut listener = Some(listener);
    let mut changes = faults.subscribe();
    tokio::pin!(shutdown);
    loop {
        let mode = faults.get().unreachable;
        match mode {
            None => {
                let l = match listener.take() {
                    Some(l) => l,
                    None => rebind(addr).await?,
                };
                let handle = ServeHandle::new();
                let server = tokio::spawn(api.clone().serve_with_handle(
                    l,
                    Some(tls.clone()),
                    handle.clone(),
                ));
                let stop = loop {
                    tokio::select! {
                        _ = &mut shutdown => break true,
                        changed = changes.changed() => {
                            if changed.is_err() || faults.get().unreachable.is_some() {
                                break changed.is_err();
                            }
                        }
                    }
                };
                if stop {
                    api.end_watches();
                    handle.graceful_shutdown(Some(SHUTDOWN_GRACE));
                    return server.await.unwrap_or(Ok(()));
                }
                handle.shutdown();
                let _ = server.await;
                info!(%addr, "API endpoint closed (unreachable fault)");
            }
            Some(Unreachable::Refuse) => {
                drop(listener.take());
                tokio::select! {
                    _ = &mut shutdown => return Ok(()),
                    _ = changes.changed() => {}
                }
            }
            Some(Unreachable::Hang) => {
                let l = match listener.take() {
                    Some(l) => l,
                    None => rebind(addr).await?,
                };
                let mut held = Vec::new();
                loop {
                    tokio::select! {
                        _ = &mut shutdown => return Ok(()),
                        accepted = l.accept() => {
                            if let Ok((socket, _)) = accepted {
                                held.push(socket);
                            }
                        }
                        _ = changes.changed() => break,
                    }
                }
                drop(held);
                listener = Some(l);
            }
        }
    }
}

/// Binds the address again; the port was ours a moment ago, so retry
/// briefly if the kernel has not let go of it yet.
async fn rebind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let mut last = None;
    for _ in 0..50 {
        match TcpListener::bind(addr).await {
            Ok(l) => {
                info!(%addr, "API endpoint open again");
                return Ok(l);
            }
            Err(e) => {
                warn!(error = %e, %addr, "cannot listen again yet; retrying");
                last = Some(e);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("cannot listen again")))
}
