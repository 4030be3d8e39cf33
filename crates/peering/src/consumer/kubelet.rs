//! The virtual kubelet's connect subresources: `kubectl logs` and
//! `kubectl exec` on a pod bound to a virtual node reach the pod the
//! provider runs for it, through the provider's API with the peering's
//! identity; any other pod goes to the kubelet the member already has
//! (none, for simulated pods).

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use flotilla_apiserver::error::ApiError;
use flotilla_apiserver::kubelet::{
    ByteStream, ExecOptions, Kubelet, LogOptions, Session, Stream2, Target,
};
use futures::{AsyncReadExt, FutureExt, StreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{AttachParams, LogParams, TerminalSize};
use kube::{Api, Client, ResourceExt};
use parking_lot::Mutex;

use super::{Peers, offloading};
use crate::api::{REMOTE_CLUSTER_ID, TYPE_LABEL, TYPE_VIRTUAL_NODE};
use crate::identity;

pub struct VirtualKubelet {
    local: Client,
    /// The member's own kubelet, for pods on its own nodes.
    inner: Option<Arc<dyn Kubelet>>,
    /// This cluster's peerings, followed from the first pod on a virtual
    /// node asked for (the cluster has its ID by then).
    peers: tokio::sync::OnceCell<Arc<Peers>>,
}

impl VirtualKubelet {
    pub fn new(local: Client, inner: Option<Arc<dyn Kubelet>>) -> Arc<VirtualKubelet> {
        Arc::new(VirtualKubelet {
            local,
            inner,
            peers: tokio::sync::OnceCell::new(),
        })
    }

    /// The provider's client and the pod's namespace there, when the pod
    /// is on a virtual node; None for this cluster's own pods.
    async fn remote(&self, target: &Target) -> Result<Option<(Client, String)>, ApiError> {
        let pod = Api::<Pod>::namespaced(self.local.clone(), &target.namespace)
            .get_opt(&target.pod)
            .await
            .map_err(|e| ApiError::internal(e.to_string()))?;
        let Some(node) = pod.and_then(|p| p.spec?.node_name) else {
            return Ok(None);
        };
        let node = Api::<Node>::all(self.local.clone())
            .get_opt(&node)
            .await
            .map_err(|e| ApiError::internal(e.to_string()))?;
        let Some(node) = node else {
            return Ok(None);
        };
        if node.labels().get(TYPE_LABEL).map(String::as_str) != Some(TYPE_VIRTUAL_NODE) {
            return Ok(None);
        }
        let provider_id = node
            .labels()
            .get(REMOTE_CLUSTER_ID)
            .cloned()
            .unwrap_or_default();
        let peers = self
            .peers
            .get_or_try_init(|| async {
                match identity::cluster_id(&self.local).await {
                    Ok(Some(id)) => Ok(Peers::new(self.local.clone(), id)),
                    _ => Err(unavailable(format!(
                        "pod {} runs in cluster {provider_id}, but this cluster's ID cannot be read now",
                        target.pod
                    ))),
                }
            })
            .await?;
        let provider = peers
            .providers()
            .await
            .into_iter()
            .find(|p| p.id == provider_id)
            .ok_or_else(|| {
                unavailable(format!(
                    "pod {} runs in cluster {provider_id}, which this cluster cannot reach now",
                    target.pod
                ))
            })?;
        let entries = peers.offloadings().await;
        let twin =
            offloading::twin_in(&entries, &target.namespace, &provider_id).ok_or_else(|| {
                ApiError::bad_request(format!(
                    "namespace {} is not offloaded to cluster {provider_id}",
                    target.namespace
                ))
            })?;
        Ok(Some((provider.client, twin)))
    }

    fn inner(&self, sub: &str, target: &Target) -> Result<&Arc<dyn Kubelet>, ApiError> {
        self.inner.as_ref().ok_or_else(|| {
            ApiError::bad_request(format!(
                "pods \"{}\" has no container runtime behind it: {sub} is not available on this cluster (Flotilla serves the Kubernetes API; look at the pod's status and events instead)",
                target.pod
            ))
        })
    }
}

fn remote_error(e: kube::Error) -> ApiError {
    match e {
        kube::Error::Api(s) if s.code == 404 => ApiError::not_found("", "pods", &s.message),
        kube::Error::Api(s) => {
            ApiError::bad_request(format!("the provider answered: {}", s.message))
        }
        other => unavailable(format!("the provider does not answer: {other}")),
    }
}

#[async_trait]
impl Kubelet for VirtualKubelet {
    async fn logs(&self, target: &Target, options: &LogOptions) -> Result<ByteStream, ApiError> {
        let Some((client, ns)) = self.remote(target).await? else {
            return self.inner("log", target)?.logs(target, options).await;
        };
        let params = LogParams {
            container: Some(target.container.clone()),
            follow: options.follow,
            limit_bytes: options.limit_bytes,
            previous: options.previous,
            since_time: options.since,
            tail_lines: options.tail_lines,
            timestamps: options.timestamps,
            ..Default::default()
        };
        let reader = Api::<Pod>::namespaced(client, &ns)
            .log_stream(&target.pod, &params)
            .await
            .map_err(remote_error)?;
        let stream = futures::stream::unfold(Box::pin(reader), |mut r| async move {
            let mut buf = vec![0u8; 16 * 1024];
            match r.read(&mut buf).await {
                Ok(0) => None,
                Ok(n) => {
                    buf.truncate(n);
                    Some((Ok(Bytes::from(buf)), r))
                }
                Err(e) => Some((Err(e), r)),
            }
        });
        Ok(stream.boxed())
    }

    async fn exec(&self, target: &Target, options: &ExecOptions) -> Result<Session, ApiError> {
        let Some((client, ns)) = self.remote(target).await? else {
            return self.inner("exec", target)?.exec(target, options).await;
        };
        let params = AttachParams {
            container: Some(target.container.clone()),
            stdin: options.stdin,
            stdout: options.stdout,
            stderr: options.stderr && !options.tty,
            tty: options.tty,
            ..Default::default()
        };
        let mut process = Api::<Pod>::namespaced(client, &ns)
            .exec(&target.pod, options.command.clone(), &params)
            .await
            .map_err(remote_error)?;
        let stdin = process
            .stdin()
            .map(|w| Box::pin(w) as std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>);
        let stdout = process
            .stdout()
            .map(|r| Box::pin(r) as std::pin::Pin<Box<dyn tokio::io::AsyncRead + Send>>);
        let stderr = process
            .stderr()
            .map(|r| Box::pin(r) as std::pin::Pin<Box<dyn tokio::io::AsyncRead + Send>>);
        let resize = process.terminal_size().map(|tx| {
            let tx = Mutex::new(tx);
            Box::new(move |width: u16, height: u16| {
                let _ = tx.lock().try_send(TerminalSize { width, height });
            }) as Box<dyn Fn(u16, u16) + Send + Sync>
        });
        let status = process.take_status();
        // The process lives as long as the session waits for its end.
        let exit = async move {
            let status = match status {
                Some(s) => s.await,
                None => None,
            };
            drop(process);
            Ok(exit_code(status.as_ref()))
        }
        .boxed();
        Ok(Session {
            stdin,
            stdout,
            stderr,
            resize,
            exit,
        })
    }

    async fn checkpoint(&self, target: &Target) -> Result<String, ApiError> {
        match self.remote(target).await? {
            None => self.inner("checkpoint", target)?.checkpoint(target).await,
            // The provider's kubelet is not reachable through its API as a
            // pod's subresource is.
            Some(_) => Err(flotilla_apiserver::kubelet::checkpoint_failed(
                target,
                "the pod is offloaded to a peered cluster, whose kubelet this cluster cannot reach",
            )),
        }
    }

    async fn port_forward(&self, target: &Target, port: u16) -> Result<Stream2, ApiError> {
        match self.remote(target).await? {
            None => {
                self.inner("portforward", target)?
                    .port_forward(target, port)
                    .await
            }
            Some(_) => Err(ApiError::bad_request(format!(
                "port-forward to pod {}, which runs in a peered cluster, is not supported; reach it through a Service or from the provider",
                target.pod
            ))),
        }
    }
}

fn unavailable(message: String) -> ApiError {
    ApiError::new(
        axum::http::StatusCode::SERVICE_UNAVAILABLE,
        "ServiceUnavailable",
        message,
    )
}

/// The exit code an exec's Status gives (kubelet's `ExitCode` cause).
fn exit_code(status: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Status>) -> i32 {
    let Some(s) = status else {
        return 0;
    };
    if s.status.as_deref() == Some("Success") {
        return 0;
    }
    s.details
        .as_ref()
        .and_then(|d| d.causes.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.reason.as_deref() == Some("ExitCode")))
        .and_then(|c| c.message.as_deref()?.parse().ok())
        .unwrap_or(1)
}
