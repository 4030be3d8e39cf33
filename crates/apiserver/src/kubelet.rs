//! The kubelet API behind pods' connect subresources (`log`, `exec`,
//! `attach`, `portforward`). Upstream's API server validates the request
//! against the pod, then proxies to the kubelet of the pod's node; here
//! whatever runs the pods (the member's netns runtime) implements
//! [`Kubelet`] and the server ([`crate::connect`]) speaks the wire
//! protocols (chunked logs, WebSocket channels) in front of it.
//!
//! An API server with no kubelet behind it answers these subresources
//! with a clear BadRequest.

use std::pin::Pin;

use async_trait::async_trait;
use bytes::Bytes;
use futures::Stream;
use futures::future::BoxFuture;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::error::ApiError;

/// The container a connect request is for, already checked against the pod.
#[derive(Clone, Debug)]
pub struct Target {
    pub namespace: String,
    pub pod: String,
    pub uid: String,
    pub container: String,
}

/// `PodLogOptions`, parsed.
#[derive(Clone, Debug, Default)]
pub struct LogOptions {
    pub follow: bool,
    pub previous: bool,
    pub timestamps: bool,
    pub tail_lines: Option<i64>,
    /// Only lines written at or after this time.
    pub since: Option<jiff::Timestamp>,
    pub limit_bytes: Option<i64>,
}

pub type ByteStream = Pin<Box<dyn Stream<Item = std::io::Result<Bytes>> + Send>>;

/// A process started by `exec` (or the container, for `attach`).
pub struct Session {
    pub stdin: Option<Pin<Box<dyn AsyncWrite + Send>>>,
    pub stdout: Option<Pin<Box<dyn AsyncRead + Send>>>,
    /// `None` with a TTY: everything comes through stdout.
    pub stderr: Option<Pin<Box<dyn AsyncRead + Send>>>,
    /// Resizes the TTY (columns, rows).
    pub resize: Option<Box<dyn Fn(u16, u16) + Send + Sync>>,
    /// The exit code, once the process has ended.
    pub exit: BoxFuture<'static, Result<i32, String>>,
}

/// What `exec` asks for.
#[derive(Clone, Debug, Default)]
pub struct ExecOptions {
    pub command: Vec<String>,
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

pub type Stream2 = Pin<Box<dyn AsyncReadWrite + Send>>;

/// A bidirectional byte stream (a port-forwarded connection).
pub trait AsyncReadWrite: AsyncRead + AsyncWrite {}
impl<T: AsyncRead + AsyncWrite> AsyncReadWrite for T {}

/// What runs pods, as the API server reaches it.
#[async_trait]
pub trait Kubelet: Send + Sync {
    /// The container's log.
    async fn logs(&self, target: &Target, options: &LogOptions) -> Result<ByteStream, ApiError>;
    /// Runs a command in the container.
    async fn exec(&self, target: &Target, options: &ExecOptions) -> Result<Session, ApiError>;
    /// Connects to a port of the pod (the container is ignored).
    async fn port_forward(&self, target: &Target, port: u16) -> Result<Stream2, ApiError>;
    /// Checkpoints the container (the kubelet's checkpoint API, KEP-2008):
    /// the archive's path on the node.
    async fn checkpoint(&self, target: &Target) -> Result<String, ApiError> {
        Err(checkpoint_failed(
            target,
            "the container runtime does not checkpoint containers",
        ))
    }
}

/// The kubelet's answer when a checkpoint cannot be made (HTTP 500, as
/// the kubelet answers a runtime's failure), saying why.
pub fn checkpoint_failed(target: &Target, why: &str) -> ApiError {
    ApiError::internal(format!(
        "checkpointing of {}/{}/{} failed ({why})",
        target.namespace, target.pod, target.container
    ))
}
