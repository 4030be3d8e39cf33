//! `pods/portforward` over WebSocket (`v4.channel.k8s.io`, as the Python
//! client's `portforward` speaks it): for the i-th port of `?ports=`,
//! channel 2i carries data and 2i+1 errors, and the first frame of each
//! is the port number (two bytes, little-endian). One connection to the
//! pod per port, for the life of the WebSocket.

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
    _ctx: &Ctx,
    kubelet: Arc<dyn Kubelet>,
    target: Target,
    raw_query: Option<&str>,
    upgrade: Option<WebSocketUpgrade>,
) -> ApiResult<Response> {
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
        streams.push(kubelet.port_forward(&target, *port).await?);
    }
    Ok(upgrade
        .protocols(PROTOCOLS)
        .on_upgrade(move |socket| async move {
            let (sink, mut incoming) = socket.split();
            let (tx, rx) = mpsc::channel::<Message>(64);
            let mut writers = Vec::new();
            for (i, (stream, port)) in streams.into_iter().zip(ports.iter()).enumerate() {
                let data = (2 * i) as u8;
                let (mut read, write) = tokio::io::split(stream);
                writers.push(write);
                let tx = tx.clone();
                let port = port.to_le_bytes();
                tokio::spawn(async move {
                    for ch in [data, data + 1] {
                        let _ = tx
                            .send(Message::Binary(Bytes::from(vec![ch, port[0], port[1]])))
                            .await;
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
                        && let Some(w) = writers.get_mut(usize::from(ch / 2))
                    {
                        let _ = w.write_all(payload).await;
                    }
                }
            });
            crate::connect::send_all_then_close(sink, rx).await;
            input.abort();
        }))
}
