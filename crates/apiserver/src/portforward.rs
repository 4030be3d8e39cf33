//! `pods/portforward`, in the two ways clients ask for it:
//!
//! - over WebSocket (`v4.channel.k8s.io`, as the Python client's
//!   `portforward` speaks it): for the i-th port of `?ports=`, channel 2i
//!   carries data and 2i+1 errors, and the first frame of each is the
//!   port number (two bytes, little-endian); one connection to the pod per
//!   port, for the life of the WebSocket;
//! - over SPDY/3.1 (`kubectl port-forward`): the client opens an error
//!   stream and a data stream per local connection (headers `streamType`,
//!   `port`, `requestID`); each data stream is one connection to the pod.
//!   kubectl 1.32 first asks for SPDY tunnelled in a WebSocket
//!   (`SPDY/3.1+portforward.k8s.io`); that is answered 400, upon which it
//!   upgrades to SPDY directly.

use std::sync::Arc;

use axum::extract::ws::{Message, WebSocketUpgrade};
use axum::response::Response;
use bytes::Bytes;
use futures::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use crate::error::{ApiError, ApiResult};
use crate::handlers::Ctx;
use crate::kubelet::{Kubelet, Target};

const PROTOCOLS: [&str; 2] = ["v4.channel.k8s.io", "portforward.k8s.io"];

pub async fn serve(
    ctx: &Ctx,
    kubelet: Arc<dyn Kubelet>,
    target: Target,
    raw_query: Option<&str>,
    upgrade: Option<WebSocketUpgrade>,
    spdy: Option<hyper::upgrade::OnUpgrade>,
) -> ApiResult<Response> {
    if let Some(on_upgrade) = spdy {
        return Ok(serve_spdy(kubelet, target, on_upgrade));
    }
    // Only a WebSocket client of the channel protocol is served over
    // WebSocket; others (SPDY tunnelled in one) are told to upgrade
    // directly, which kubectl does on any answer but 101.
    let offered = ctx
        .headers
        .get(http::header::SEC_WEBSOCKET_PROTOCOL)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if !offered.is_empty()
        && !PROTOCOLS
            .iter()
            .any(|p| offered.split(',').any(|o| o.trim() == *p))
    {
        return Err(ApiError::bad_request(format!(
            "portforward over WebSocket speaks {}; for SPDY, upgrade to SPDY/3.1",
            PROTOCOLS.join(", ")
        )));
    }
    let ports: Vec<u16> = form_urlencoded::parse(raw_query.unwrap_or_default().as_bytes())
        .filter(|(k, _)| k == "ports")
        .flat_map(|(_, v)| v.split(',').map(str::to_string).collect::<Vec<_>>())
        .map(|p| {
            p.trim()
                .parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| {
                    ApiError::bad_request(format!("invalid port {p:?}: ports must be 1-65535"))
                })
        })
        .collect::<ApiResult<_>>()?;
    if ports.is_empty() {
        return Err(ApiError::bad_request(
            "at least one port must be given (the ports query parameter)",
        ));
    }
    let Some(upgrade) = upgrade else {
        return Err(ApiError::bad_request(
            "portforward needs a WebSocket upgrade (v4.channel.k8s.io); SPDY is not served",
        ));
    };
    let mut streams = Vec::new();
    for port in &ports {
        match kubelet.port_forward(&target, *port).await {
            Ok(stream) => streams.push(Ok(stream)),
            // Nothing listens on the port: said on its error channel, as
            // the kubelet does, and the other ports are forwarded.
            Err(e) if e.code == http::StatusCode::INTERNAL_SERVER_ERROR => {
                streams.push(Err(e.message))
            }
            // The pod cannot be reached at all.
            Err(e) => return Err(e),
        }
    }
    Ok(upgrade
        .protocols(PROTOCOLS)
        .on_upgrade(move |socket| async move {
            let (sink, mut incoming) = socket.split();
            let (tx, rx) = mpsc::channel::<Message>(64);
            let mut writers = Vec::new();
            for (i, (stream, port)) in streams.into_iter().zip(ports.iter()).enumerate() {
                let data = (2 * i) as u8;
                let tx = tx.clone();
                let port = port.to_le_bytes();
                let headers = [data, data + 1]
                    .map(|ch| Message::Binary(Bytes::from(vec![ch, port[0], port[1]])));
                let (mut read, write) = match stream {
                    Ok(stream) => tokio::io::split(stream),
                    Err(message) => {
                        writers.push(None);
                        let mut failed = vec![data + 1];
                        failed.extend_from_slice(message.as_bytes());
                        tokio::spawn(async move {
                            for m in headers
                                .into_iter()
                                .chain([Message::Binary(Bytes::from(failed))])
                            {
                                let _ = tx.send(m).await;
                            }
                        });
                        continue;
                    }
                };
                writers.push(Some(write));
                tokio::spawn(async move {
                    for m in headers {
                        let _ = tx.send(m).await;
                    }
                    let mut buf = vec![0u8; 32 * 1024];
                    while let Ok(n) = read.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                        let mut f = Vec::with_capacity(n + 1);
                        f.push(data);
                        f.extend_from_slice(&buf[..n]);
                        if tx.send(Message::Binary(Bytes::from(f))).await.is_err() {
                            break;
                        }
                    }
                });
            }
            drop(tx);
            let input = tokio::spawn(async move {
                while let Some(Ok(m)) = incoming.next().await {
                    let Message::Binary(b) = m else {
                        if matches!(m, Message::Close(_)) {
                            break;
                        }
                        continue;
                    };
                    let Some((&ch, payload)) = b.split_first() else {
                        continue;
                    };
                    if ch % 2 == 0
                        && let Some(Some(w)) = writers.get_mut(usize::from(ch / 2))
                    {
                        let _ = w.write_all(payload).await;
                    }
                }
            });
            crate::channels::send_all_then_close(sink, rx).await;
            input.abort();
        }))
}

/// Answers 101 and runs the SPDY session on the upgraded connection.
fn serve_spdy(
    kubelet: Arc<dyn Kubelet>,
    target: Target,
    on_upgrade: hyper::upgrade::OnUpgrade,
) -> Response {
    tokio::spawn(async move {
        match on_upgrade.await {
            Ok(upgraded) => {
                spdy_session(hyper_util::rt::TokioIo::new(upgraded), kubelet, target).await
            }
            Err(error) => tracing::debug!(%error, "portforward: the SPDY upgrade failed"),
        }
    });
    let mut response = Response::new(axum::body::Body::empty());
    *response.status_mut() = http::StatusCode::SWITCHING_PROTOCOLS;
    let h = response.headers_mut();
    h.insert(
        http::header::CONNECTION,
        http::HeaderValue::from_static("Upgrade"),
    );
    h.insert(
        http::header::UPGRADE,
        http::HeaderValue::from_static("SPDY/3.1"),
    );
    h.insert(
        "X-Stream-Protocol-Version",
        http::HeaderValue::from_static("portforward.k8s.io"),
    );
    response
}

/// One SPDY connection: streams in, frames out through one writer.
async fn spdy_session<IO>(io: IO, kubelet: Arc<dyn Kubelet>, target: Target)
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static,
{
    use crate::spdy::{self, FLAG_FIN, Frame};
    use std::collections::HashMap;

    let (mut reader, writer) = tokio::io::split(io);
    let (out, write) = spdy::writer(writer);
    let mut codec = spdy::Codec::default();
    let mut buf = bytes::BytesMut::with_capacity(64 * 1024);
    // requestID -> the error stream's id; data stream id -> its pod writer.
    let mut errors: HashMap<String, u32> = HashMap::new();
    let mut pods: HashMap<u32, mpsc::Sender<Option<Vec<u8>>>> = HashMap::new();
    let mut last_stream = 0;
    'read: loop {
        loop {
            let frame = match codec.read(&mut buf) {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(error) => {
                    tracing::debug!(%error, "portforward: bad SPDY input; closing");
                    break 'read;
                }
            };
            match frame {
                Frame::SynStream {
                    stream_id, headers, ..
                } => {
                    last_stream = stream_id;
                    let get = |k: &str| {
                        headers
                            .iter()
                            .find(|(n, _)| n == k)
                            .map(|(_, v)| v.clone())
                            .unwrap_or_default()
                    };
                    let reply = codec.syn_reply(stream_id, &[]);
                    if out.send(reply).await.is_err() {
                        break 'read;
                    }
                    let request = get("requestid");
                    match get("streamtype").as_str() {
                        "error" => {
                            errors.insert(request, stream_id);
                        }
                        "data" => {
                            let error_stream = errors.get(&request).copied();
                            let port = get("port").parse::<u16>().ok().filter(|p| *p > 0);
                            let (tx, rx) = mpsc::channel(64);
                            pods.insert(stream_id, tx);
                            tokio::spawn(forward(
                                kubelet.clone(),
                                target.clone(),
                                port,
                                stream_id,
                                error_stream,
                                rx,
                                out.clone(),
                            ));
                        }
                        _ => {
                            let _ = out.send(spdy::rst_stream(stream_id)).await;
                        }
                    }
                }
                Frame::Data {
                    stream_id,
                    flags,
                    data,
                } => {
                    if let Some(tx) = pods.get(&stream_id) {
                        if !data.is_empty() {
                            let _ = tx.send(Some(data)).await;
                        }
                        if flags & FLAG_FIN != 0 {
                            let _ = tx.send(None).await;
                        }
                    }
                }
                Frame::RstStream { stream_id } => {
                    pods.remove(&stream_id);
                }
                Frame::Ping(id) => {
                    let _ = out.send(spdy::ping(id)).await;
                }
                Frame::GoAway => break 'read,
                Frame::Other => {}
            }
        }
        match reader.read_buf(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
    let _ = out.send(spdy::goaway(last_stream)).await;
    drop(pods);
    drop(out);
    let _ = write.await;
}

/// One forwarded connection: the pod's port and a data stream, both ways;
/// a failure is written to the request's error stream, as the kubelet does.
async fn forward(
    kubelet: Arc<dyn Kubelet>,
    target: Target,
    port: Option<u16>,
    stream_id: u32,
    error_stream: Option<u32>,
    mut from_client: mpsc::Receiver<Option<Vec<u8>>>,
    out: mpsc::Sender<Vec<u8>>,
) {
    use crate::spdy::{self, FLAG_FIN};
    let fail = |message: String| {
        let out = out.clone();
        async move {
            if let Some(e) = error_stream {
                let _ = out.send(spdy::data(e, FLAG_FIN, message.as_bytes())).await;
            }
            let _ = out.send(spdy::data(stream_id, FLAG_FIN, &[])).await;
        }
    };
    let Some(port) = port else {
        fail("invalid port in the data stream's headers".into()).await;
        return;
    };
    let stream = match kubelet.port_forward(&target, port).await {
        Ok(s) => s,
        Err(e) => {
            fail(e.message).await;
            return;
        }
    };
    if let Some(e) = error_stream {
        // Nothing to report: the error stream ends empty.
        let _ = out.send(spdy::data(e, FLAG_FIN, &[])).await;
    }
    let (mut read, mut write) = tokio::io::split(stream);
    let to_pod = tokio::spawn(async move {
        while let Some(chunk) = from_client.recv().await {
            match chunk {
                Some(data) => {
                    if write.write_all(&data).await.is_err() {
                        break;
                    }
                }
                None => {
                    let _ = write.shutdown().await;
                    break;
                }
            }
        }
    });
    let mut chunk = vec![0u8; 32 * 1024];
    loop {
        match read.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if out
                    .send(spdy::data(stream_id, 0, &chunk[..n]))
                    .await
                    .is_err()
                {
                    break;
                }
            }
        }
    }
    let _ = out.send(spdy::data(stream_id, FLAG_FIN, &[])).await;
    to_pod.abort();
}
