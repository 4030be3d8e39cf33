//! The stand-in workload: what a container runs when it names no command
//! (its image cannot be pulled here). It serves HTTP on each declared
//! port: `/health` answers 200, any other path JSON naming the pod, its
//! namespace, cluster, node and IP, so manifests written for real images
//! run unchanged and can be called; `/bytes/{n}` streams n bytes, so
//! `flotilla network benchmark` can measure throughput without an image.
//! For a well-known image `/` answers that image's page instead
//! ([`super::images`]), the identity in a comment; and where a volume is
//! mounted at that image's document root (nginx's
//! `/usr/share/nginx/html`), its files are served as the server would
//! serve them, so tutorials that write an `index.html` into a volume read
//! it back. Each request is logged to stdout.

use std::net::{Ipv4Addr, SocketAddr};

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Request};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Json, Response};
use axum::routing::get;
use bytes::Bytes;
use serde_json::json;

use super::images::Page;

/// The most `/bytes/{n}` sends: enough for any benchmark, and a typo
/// cannot make a pod stream for ever.
pub const MAX_BYTES: u64 = 1 << 30;
/// The chunk `/bytes/{n}` writes at a time.
const CHUNK: usize = 64 * 1024;

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_default()
}

fn identity_of(path: &str) -> serde_json::Value {
    json!({
        "pod": var("FLOTILLA_POD_NAME"),
        "namespace": var("FLOTILLA_POD_NAMESPACE"),
        "cluster": var("FLOTILLA_CLUSTER"),
        "node": var("FLOTILLA_NODE"),
        "container": var("FLOTILLA_CONTAINER"),
        "podIP": var("FLOTILLA_POD_IP"),
        "path": path,
    })
}

async fn identity(request: Request) -> impl IntoResponse {
    println!("{} {}", request.method(), request.uri());
    Json(identity_of(request.uri().path()))
}

/// What a well-known image's server answers: the files of its document
/// root where one is mounted, else its page at `/` (who answered in a
/// comment) and the identity elsewhere.
async fn served(page: Page, request: Request) -> Response {
    println!("{} {}", request.method(), request.uri());
    let path = request.uri().path();
    if let Some(docroot) = page.docroot().map(std::path::Path::new)
        && docroot.is_dir()
    {
        return from_docroot(page, docroot, path).await;
    }
    if path != "/" && !(page == Page::HpaExample && path == "/index.php") {
        return Json(identity_of(path)).into_response();
    }
    if page == Page::HpaExample {
        let _ = tokio::task::spawn_blocking(move || page.work()).await;
    }
    let identity = identity_of(path).to_string();
    (
        [(header::CONTENT_TYPE, "text/html")],
        page.render(&identity),
    )
        .into_response()
}

/// A file under `docroot` as nginx serves one: a directory's
/// `index.html`, 403 for a directory without one, 404 for nothing there.
async fn from_docroot(page: Page, docroot: &std::path::Path, path: &str) -> Response {
    let error = |code: StatusCode| {
        let status = format!(
            "{} {}",
            code.as_u16(),
            code.canonical_reason().unwrap_or("")
        );
        (
            code,
            [(header::CONTENT_TYPE, "text/html")],
            page.error(&status),
        )
            .into_response()
    };
    let relative = std::path::Path::new(path.trim_start_matches('/'));
    if relative
        .components()
        .any(|c| !matches!(c, std::path::Component::Normal(_)))
    {
        return error(StatusCode::BAD_REQUEST);
    }
    let mut file = docroot.join(relative);
    if file.is_dir() {
        file.push("index.html");
        if !file.is_file() {
            return error(StatusCode::FORBIDDEN);
        }
    }
    match tokio::fs::read(&file).await {
        Ok(body) => {
            let kind = match file.extension().and_then(|e| e.to_str()) {
                Some("html" | "htm") => "text/html",
                Some("txt") => "text/plain",
                Some("css") => "text/css",
                Some("js") => "application/javascript",
                Some("json") => "application/json",
                Some("png") => "image/png",
                Some("svg") => "image/svg+xml",
                _ => "application/octet-stream",
            };
            ([(header::CONTENT_TYPE, kind)], body).into_response()
        }
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => error(StatusCode::FORBIDDEN),
        Err(_) => error(StatusCode::NOT_FOUND),
    }
}

/// `n` zero bytes (capped at [`MAX_BYTES`]), streamed with a
/// Content-Length so clients can time the transfer.
async fn bytes(Path(n): Path<String>) -> Response {
    println!("GET /bytes/{n}");
    let Ok(n) = n.parse::<u64>() else {
        return (
            StatusCode::BAD_REQUEST,
            "the size must be a number of bytes, e.g. /bytes/1048576\n",
        )
            .into_response();
    };
    let n = n.min(MAX_BYTES);
    let chunk = Bytes::from(vec![0u8; CHUNK]);
    let chunks = (0..n.div_ceil(CHUNK as u64)).map(move |i| {
        let left = n - i * CHUNK as u64;
        Ok::<_, std::io::Error>(chunk.slice(..left.min(CHUNK as u64) as usize))
    });
    (
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_string()),
            (header::CONTENT_LENGTH, n.to_string()),
        ],
        Body::from_stream(futures::stream::iter(chunks)),
    )
        .into_response()
}

fn app(root: Option<Page>) -> Router {
    let app = Router::new()
        .route("/health", get(|| async { "ok\n" }))
        .route("/bytes/{n}", get(bytes));
    match root {
        Some(p) => app.fallback(move |request: Request| served(p, request)),
        None => app.fallback(identity),
    }
}

/// Serves every port until killed (`root`: the page `/` answers); fails
/// when one cannot be bound.
pub async fn serve(ports: Vec<u16>, root: Option<Page>) -> std::io::Result<()> {
    let app = app(root);
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

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// The raw HTTP/1.0 response to `GET path`: (head, body length).
    async fn get(path: &str) -> (String, usize) {
        let (head, body) = get_from(None, path).await;
        (head, body.len())
    }

    /// The raw HTTP/1.0 response to `GET path` of a stand-in whose `/` is
    /// `root`: (head, body).
    async fn get_from(root: Option<super::Page>, path: &str) -> (String, String) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(axum::serve(listener, super::app(root)).into_future());
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).await.unwrap();
        let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
        (
            String::from_utf8_lossy(&raw[..split]).to_string(),
            String::from_utf8_lossy(&raw[split + 4..]).to_string(),
        )
    }

    #[tokio::test]
    async fn a_well_known_images_page_answers_at_the_root_only() {
        let (head, body) = get_from(Some(super::Page::Nginx), "/").await;
        assert!(head.starts_with("HTTP/1.0 200"), "{head}");
        assert!(head.to_ascii_lowercase().contains("text/html"), "{head}");
        assert!(body.contains("<h1>Welcome to nginx!</h1>"), "{body}");
        assert!(body.contains(r#""path":"/""#), "{body}");
        let (_, body) = get_from(Some(super::Page::Nginx), "/hello").await;
        let identity: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(identity["path"], "/hello");
        let (_, body) = get_from(None, "/").await;
        assert!(
            serde_json::from_str::<serde_json::Value>(&body).is_ok(),
            "{body}"
        );
    }

    #[tokio::test]
    async fn a_mounted_docroot_is_served_as_nginx_serves_it() {
        let dir = std::env::temp_dir().join(format!("standin-docroot-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        let page = super::Page::Nginx;
        let status = |r: &axum::response::Response| r.status().as_u16();
        assert_eq!(status(&super::from_docroot(page, &dir, "/").await), 403);
        std::fs::write(dir.join("index.html"), "web-0\n").unwrap();
        let r = super::from_docroot(page, &dir, "/").await;
        assert_eq!(status(&r), 200);
        let body = axum::body::to_bytes(r.into_body(), 1024).await.unwrap();
        assert_eq!(&body[..], b"web-0\n");
        assert_eq!(
            status(&super::from_docroot(page, &dir, "/missing").await),
            404
        );
        assert_eq!(status(&super::from_docroot(page, &dir, "/sub").await), 403);
        assert_eq!(
            status(&super::from_docroot(page, &dir, "/../etc/passwd").await),
            400
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn bytes_streams_exactly_n() {
        let (head, len) = get("/bytes/200001").await;
        assert!(head.starts_with("HTTP/1.0 200"), "{head}");
        assert!(
            head.to_ascii_lowercase().contains("content-length: 200001"),
            "{head}"
        );
        assert_eq!(len, 200_001);
        let (head, _) = get("/bytes/lots").await;
        assert!(head.starts_with("HTTP/1.0 400"), "{head}");
        let (head, len) = get("/elsewhere").await;
        assert!(head.starts_with("HTTP/1.0 200") && len > 0, "{head}");
    }
}
