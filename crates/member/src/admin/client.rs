//! The admin endpoint's client: `flotilla member fault`, `flotilla member
//! node` and the infrastructure provider that adds machines' nodes. It
//! finds the endpoint and its token in the member's data dir.

use std::path::{Path, PathBuf};

use http_body_util::BodyExt;
use serde_json::Value;

/// Where the member writes its admin endpoint's address.
pub const ADDRESS_FILE: &str = "admin-address";
/// Where the member keeps its admin token.
pub const TOKEN_FILE: &str = "admin-token";

#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("cannot read {path} (is a member running with --data-dir {dir}?): {source}")]
    NotRunning {
        path: PathBuf,
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "cannot reach the member's admin endpoint at {addr} (is the member running?): {message}"
    )]
    Unreachable { addr: String, message: String },
    /// The endpoint answered with an error; the message is its own.
    #[error("{message}")]
    Refused { status: u16, message: String },
}

/// The admin endpoint of one running member.
#[derive(Clone, Debug)]
pub struct AdminClient {
    addr: String,
    token: String,
}

impl AdminClient {
    /// The endpoint of the member running with `data_dir`.
    pub fn from_data_dir(data_dir: &Path) -> Result<AdminClient, AdminError> {
        let read = |file: &str| {
            let path = data_dir.join(file);
            std::fs::read_to_string(&path)
                .map(|s| s.trim().to_string())
                .map_err(|source| AdminError::NotRunning {
                    path,
                    dir: data_dir.to_path_buf(),
                    source,
                })
        };
        Ok(AdminClient {
            addr: read(ADDRESS_FILE)?,
            token: read(TOKEN_FILE)?,
        })
    }

    /// One request; the answer's body when it succeeds.
    pub async fn request(
        &self,
        method: http::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<String, AdminError> {
        let unreachable = |message: String| AdminError::Unreachable {
            addr: self.addr.clone(),
            message,
        };
        let stream = tokio::net::TcpStream::connect(&self.addr)
            .await
            .map_err(|e| unreachable(e.to_string()))?;
        let io = hyper_util::rt::TokioIo::new(stream);
        let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
            .await
            .map_err(|e| unreachable(e.to_string()))?;
        tokio::spawn(conn);
        let mut req = http::Request::builder()
            .method(method)
            .uri(path)
            .header(http::header::HOST, &self.addr)
            .header(
                http::header::AUTHORIZATION,
                format!("Bearer {}", self.token),
            );
        if body.is_some() {
            req = req.header(http::header::CONTENT_TYPE, "application/json");
        }
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let req = req
            .body(http_body_util::Full::new(bytes::Bytes::from(body)))
            .map_err(|e| unreachable(e.to_string()))?;
        let resp = sender
            .send_request(req)
            .await
            .map_err(|e| unreachable(e.to_string()))?;
        let status = resp.status();
        let bytes = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| unreachable(e.to_string()))?
            .to_bytes();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        if status.is_success() {
            return Ok(text);
        }
        let message = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(String::from))
            .unwrap_or(text);
        Err(AdminError::Refused {
            status: status.as_u16(),
            message,
        })
    }
}
