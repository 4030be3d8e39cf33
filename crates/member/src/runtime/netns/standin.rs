//! The stand-in workload: what a container runs when it names no command
//! (its image cannot be pulled here). It serves HTTP on each declared
//! port: `/health` answers 200, any other path JSON naming the pod, its
//! namespace, cluster, node and IP, so manifests written for real images
//! run unchanged and can be called. Each request is logged to stdout.

use std::net::{Ipv4Addr, SocketAddr};

use axum::Router;
use axum::extract::Request;
use axum::response::{IntoResponse, Json};
use axum::routing::get;
use serde_json::json;

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_default()
}

async fn identity(request: Request) -> impl IntoResponse {
    println!("{} {}", request.method(), request.uri());
    Json(json!({
        "pod": var("FLOTILLA_POD_NAME"),
        "namespace": var("FLOTILLA_POD_NAMESPACE"),
        "cluster": var("FLOTILLA_CLUSTER"),
        "node": var("FLOTILLA_NODE"),
        "container": var("FLOTILLA_CONTAINER"),
        "podIP": var("FLOTILLA_POD_IP"),
        "path": request.uri().path(),
    }))
}

/// Serves every port until killed; fails when one cannot be bound.
pub async fn serve(ports: Vec<u16>) -> std::io::Result<()> {
    let app = Router::new()
        .route("/health", get(|| async { "ok\n" }))
        .fallback(identity);
    let mut servers = Vec::new();
    for port in if ports.is_empty() { vec![8080] } else { ports } {
        let addr = SocketAddr::from((Ipv4Addr::UNSPECIFIED, port));
        let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
            std::io::Error::new(e.kind(), format!("cannot listen on port {port}: {e}"))
        })?;
        println!("flotilla stand-in workload serving HTTP on :{port}");
        servers.push(tokio::spawn(
            axum::serve(listener, app.clone()).into_future(),
        ));
    }
    for s in servers {
        s.await.map_err(std::io::Error::other)??;
    }
    Ok(())
}
