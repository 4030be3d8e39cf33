//! A small client of etcd's gRPC API: the calls the etcd store makes (KV
//! Range, Txn and Compact, and Watch) over one tonic channel balanced
//! across the endpoints, with TLS when asked. The messages and stubs are
//! generated from `proto/etcd` at build time (see build.rs).

use std::time::Duration;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;
use tonic::codec::Streaming;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use super::EtcdOptions;
use crate::{Result, StoreError};

/// The generated protobuf messages and clients, in etcd's packages.
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub(crate) mod pb {
    pub mod mvccpb {
        tonic::include_proto!("mvccpb");
    }
    pub mod etcdserverpb {
        tonic::include_proto!("etcdserverpb");
    }
}

use pb::etcdserverpb::kv_client::KvClient;
use pb::etcdserverpb::watch_client::WatchClient;
use pb::etcdserverpb::{
    CompactionRequest, RangeRequest, RangeResponse, TxnRequest, TxnResponse, WatchCreateRequest,
    WatchRequest, WatchResponse, watch_request,
};

impl From<Status> for StoreError {
    fn from(status: Status) -> Self {
        StoreError::Etcd(format!("{:?}: {}", status.code(), status.message()))
    }
}

/// etcd's default limit on a request it receives is 1.5 MiB, and on a
/// response it sends none: a page of 1,000 objects can be large.
const MAX_DECODING_MESSAGE_SIZE: usize = 256 * 1024 * 1024;

#[derive(Clone)]
pub(crate) struct Client {
    kv: KvClient<Channel>,
    watch: WatchClient<Channel>,
}

impl Client {
    /// A client of every endpoint in `options`. Connections are made on
    /// first use, so an unreachable etcd shows in the first request.
    pub(crate) fn new(options: &EtcdOptions) -> Result<Self> {
        let tls = tls_config(options)?;
        let mut endpoints = Vec::with_capacity(options.endpoints.len());
        for url in &options.endpoints {
            endpoints.push(endpoint(url, tls.as_ref())?);
        }
        if endpoints.is_empty() {
            return Err(StoreError::Unavailable("no etcd endpoint given".into()));
        }
        let channel = Channel::balance_list(endpoints.into_iter());
        Ok(Client {
            kv: KvClient::new(channel.clone()).max_decoding_message_size(MAX_DECODING_MESSAGE_SIZE),
            watch: WatchClient::new(channel).max_decoding_message_size(MAX_DECODING_MESSAGE_SIZE),
        })
    }

    pub(crate) async fn range(&self, request: RangeRequest) -> Result<RangeResponse, Status> {
        Ok(self.kv.clone().range(request).await?.into_inner())
    }

    /// etcd's current revision, read through its consensus (a linearizable
    /// read): every write committed before the call is at or below it.
    pub(crate) async fn current_revision(&self, key: &[u8]) -> Result<i64, Status> {
        let response = self
            .range(RangeRequest {
                key: key.to_vec(),
                count_only: true,
                ..RangeRequest::default()
            })
            .await?;
        Ok(response.header.map_or(0, |h| h.revision))
    }

    pub(crate) async fn txn(&self, request: TxnRequest) -> Result<TxnResponse, Status> {
        Ok(self.kv.clone().txn(request).await?.into_inner())
    }

    /// Compacts etcd's history up to `revision`, as kube-apiserver does.
    pub(crate) async fn compact(&self, revision: i64) -> Result<(), Status> {
        self.kv
            .clone()
            .compact(CompactionRequest {
                revision,
                physical: false,
            })
            .await?;
        Ok(())
    }

    /// Opens a watch: one stream of responses for as long as the returned
    /// [`WatchStream`] lives.
    pub(crate) async fn watch(&self, create: WatchCreateRequest) -> Result<WatchStream, Status> {
        // etcd ends the watch when the client's half of the stream closes,
        // so the sender is kept alive beside the responses.
        let (requests, rx) = mpsc::channel(1);
        let first = WatchRequest {
            request_union: Some(watch_request::RequestUnion::CreateRequest(create)),
        };
        requests
            .send(first)
            .await
            .map_err(|_| Status::internal("the watch request stream closed"))?;
        let responses = self
            .watch
            .clone()
            .watch(ReceiverStream::new(rx))
            .await?
            .into_inner();
        Ok(WatchStream {
            _requests: requests,
            responses,
        })
    }
}

pub(crate) struct WatchStream {
    _requests: mpsc::Sender<WatchRequest>,
    responses: Streaming<WatchResponse>,
}

impl WatchStream {
    /// The next response; `None` once etcd ended the stream.
    pub(crate) async fn message(&mut self) -> Result<Option<WatchResponse>, Status> {
        self.responses.message().await
    }
}

/// One endpoint: `http://` and `https://` URLs as given, and a bare
/// `host:port` as https when TLS is configured, http otherwise (etcdctl's
/// reading of `--endpoints`).
fn endpoint(url: &str, tls: Option<&ClientTlsConfig>) -> Result<Endpoint> {
    let invalid = |why: String| StoreError::Unavailable(format!("etcd endpoint {url:?}: {why}"));
    let url = if url.contains("://") {
        url.to_string()
    } else if tls.is_some() {
        format!("https://{url}")
    } else {
        format!("http://{url}")
    };
    if tls.is_some() && url.starts_with("http://") {
        return Err(invalid(
            "TLS flags were given but the URL is http://; use https://".into(),
        ));
    }
    let mut endpoint = Endpoint::from_shared(url.clone())
        .map_err(|e| invalid(e.to_string()))?
        .connect_timeout(Duration::from_secs(5))
        .http2_keep_alive_interval(Duration::from_secs(10))
        .keep_alive_timeout(Duration::from_secs(5))
        .keep_alive_while_idle(true);
    if url.starts_with("https://") {
        let tls = tls.cloned().unwrap_or_default();
        endpoint = endpoint
            .tls_config(tls)
            .map_err(|e| invalid(e.to_string()))?;
    }
    Ok(endpoint)
}

/// The CA to trust and the client certificate to present, from PEM files.
fn tls_config(o: &EtcdOptions) -> Result<Option<ClientTlsConfig>> {
    if o.ca_file.is_none() && o.cert_file.is_none() && o.key_file.is_none() {
        return Ok(None);
    }
    let mut tls = ClientTlsConfig::new();
    if let Some(ca) = &o.ca_file {
        tls = tls.ca_certificate(Certificate::from_pem(read(ca)?));
    }
    match (&o.cert_file, &o.key_file) {
        (Some(cert), Some(key)) => {
            tls = tls.identity(Identity::from_pem(read(cert)?, read(key)?));
        }
        (None, None) => {}
        _ => {
            return Err(StoreError::Unavailable(
                "an etcd client certificate needs both --etcd-certfile and --etcd-keyfile".into(),
            ));
        }
    }
    Ok(Some(tls))
}

fn read(path: &std::path::Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| {
        StoreError::Io(std::io::Error::new(
            e.kind(),
            format!("{}: {e}", path.display()),
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_endpoints_take_the_scheme_of_the_tls_settings() {
        let plain = endpoint("127.0.0.1:2379", None).expect("an endpoint");
        assert_eq!(plain.uri().scheme_str(), Some("http"));
        let tls = ClientTlsConfig::new();
        let secure = endpoint("127.0.0.1:2379", Some(&tls)).expect("an endpoint");
        assert_eq!(secure.uri().scheme_str(), Some("https"));
        assert!(endpoint("http://127.0.0.1:2379", Some(&tls)).is_err());
        assert!(endpoint("http://[::1", None).is_err());
    }

    #[test]
    fn a_client_certificate_needs_its_key() {
        let options = EtcdOptions {
            cert_file: Some("/nonexistent/cert.pem".into()),
            ..EtcdOptions::default()
        };
        let error = tls_config(&options).expect_err("a certificate without a key");
        assert!(error.to_string().contains("--etcd-keyfile"), "{error}");
    }
}
