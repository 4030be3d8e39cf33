//! Pods' connect subresources on the wire: `log` as a (chunked) text
//! stream, `exec` and `attach` over WebSocket with the channel protocols
//! kubectl (`v5.channel.k8s.io`) and the Python client
//! (`v4.channel.k8s.io`) speak. Each binary frame starts with its
//! channel: 0 stdin, 1 stdout, 2 stderr, 3 the error channel (a Status
//! when the process ends), 4 TTY resize; 255 in v5 closes a stream.
//! The request is checked against the pod here, as upstream's API server
//! does, before the kubelet ([`crate::kubelet`]) is asked.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::StreamExt;
use http::{StatusCode, header};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use crate::channels::{exit_status, send_all_then_close};
use crate::error::{ApiError, ApiResult};
use crate::handlers::Ctx;
use crate::kubelet::{ExecOptions, Kubelet, LogOptions, Session, Target};
use crate::objects;

/// The protocols `exec` and `attach` answer, preferred first.
const CHANNEL_PROTOCOLS: [&str; 2] = ["v5.channel.k8s.io", "v4.channel.k8s.io"];

const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const ERROR: u8 = 3;
const RESIZE: u8 = 4;
const CLOSE: u8 = 255;

/// Every value of `key` in the raw query (`command` repeats).
fn all_values(raw: Option<&str>, key: &str) -> Vec<String> {
    form_urlencoded::parse(raw.unwrap_or_default().as_bytes())
        .filter(|(k, _)| k == key)
        .map(|(_, v)| v.into_owned())
        .collect()
}

/// The pod and which of its containers the request means.
async fn target(ctx: &Ctx, container: Option<&str>) -> ApiResult<(Value, Target)> {
    let ns = ctx.namespace.clone().unwrap_or_default();
    let name = ctx.name.clone().unwrap_or_default();
    let kv = ctx
        .api
        .get_latest(&ctx.resource.key(Some(&ns), &name))
        .await?
        .ok_or_else(|| ApiError::not_found("", "pods", &name))?;
    let pod = objects::decode(&ctx.resource, &kv)?;
    let names = |field: &str| -> Vec<String> {
        pod.pointer(&format!("/spec/{field}"))
            .and_then(Value::as_array)
            .map(|cs| {
                cs.iter()
                    .filter_map(|c| c.get("name")?.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let (containers, init) = (names("containers"), names("initContainers"));
    let ephemeral = names("ephemeralContainers");
    let container = match container.filter(|c| !c.is_empty()) {
        Some(c) => {
            if !containers
                .iter()
                .chain(init.iter())
                .chain(ephemeral.iter())
                .any(|n| n == c)
            {
                return Err(ApiError::bad_request(format!(
                    "container {c} is not valid for pod {name}"
                )));
            }
            c.to_string()
        }
        None if containers.len() == 1 => containers[0].clone(),
        None => {
            let mut message = format!(
                "a container name must be specified for pod {name}, choose one of: [{}]",
                containers.join(" ")
            );
            if !init.is_empty() {
                message.push_str(&format!(
                    " or one of the init containers: [{}]",
                    init.join(" ")
                ));
            }
            return Err(ApiError::bad_request(message));
        }
    };
    if pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .is_empty()
    {
        return Err(ApiError::bad_request(format!(
            "pod {name} does not have a host assigned"
        )));
    }
    let uid = pod
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    Ok((
        pod,
        Target {
            namespace: ns,
            pod: name,
            uid,
            container,
        },
    ))
}

/// Serves `log`, `exec`, `attach` or `portforward` through `kubelet`.
pub async fn serve(
    ctx: &Ctx,
    kubelet: Arc<dyn Kubelet>,
    raw_query: Option<&str>,
    upgrade: Option<WebSocketUpgrade>,
    spdy: Option<hyper::upgrade::OnUpgrade>,
) -> ApiResult<Response> {
    let q = &ctx.query;
    match ctx.subresource.as_deref() {
        Some("log") => {
            let (_, target) = target(ctx, q.get("container")).await?;
            let since = match (q.int("sinceSeconds")?, q.get("sinceTime")) {
                (Some(s), _) if s <= 0 => {
                    return Err(ApiError::bad_request("sinceSeconds must be greater than 0"));
                }
                (Some(s), _) => Some(jiff::Timestamp::now() - jiff::SignedDuration::from_secs(s)),
                (None, Some(t)) => Some(t.parse::<jiff::Timestamp>().map_err(|e| {
                    ApiError::bad_request(format!("sinceTime {t:?} is not an RFC 3339 time: {e}"))
                })?),
                (None, None) => None,
            };
            let options = LogOptions {
                follow: q.flag("follow"),
                previous: q.flag("previous"),
                timestamps: q.flag("timestamps"),
                tail_lines: q.int("tailLines")?,
                since,
                limit_bytes: q.int("limitBytes")?,
            };
            if options.tail_lines.is_some_and(|t| t < 0) {
                return Err(ApiError::bad_request("tailLines must be 0 or greater"));
            }
            let stream = kubelet.logs(&target, &options).await?;
            Ok((
                StatusCode::OK,
                [(header::CONTENT_TYPE, "text/plain")],
                Body::from_stream(stream),
            )
                .into_response())
        }
        Some(sub @ ("exec" | "attach")) => {
            let (_, target) = target(ctx, q.get("container")).await?;
            let command = all_values(raw_query, "command");
            if sub == "exec" && command.is_empty() {
                return Err(ApiError::bad_request(
                    "you must specify at least 1 command (the command query parameter)",
                ));
            }
            let options = ExecOptions {
                command,
                stdin: q.flag("stdin"),
                stdout: q.get("stdout").is_none_or(|v| v == "true" || v == "1"),
                stderr: q.get("stderr").is_none_or(|v| v == "true" || v == "1"),
                tty: q.flag("tty"),
            };
            if let Some(on_upgrade) = spdy {
                // SPDY clients offer protocol versions; v4 is the one served.
                let offered = ctx
                    .headers
                    .get_all("X-Stream-Protocol-Version")
                    .iter()
                    .filter_map(|v| v.to_str().ok())
                    .flat_map(|v| v.split(','))
                    .any(|v| v.trim() == crate::spdy_exec::PROTOCOL);
                if !offered {
                    return Err(ApiError::bad_request(format!(
                        "{sub} over SPDY speaks {} only",
                        crate::spdy_exec::PROTOCOL
                    )));
                }
                let session = kubelet.exec(&target, &options).await?;
                return Ok(crate::spdy_exec::serve(session, options, on_upgrade));
            }
            let Some(upgrade) = upgrade else {
                return Err(ApiError::bad_request(format!(
                    "{sub} needs a WebSocket upgrade with one of the protocols {}, or SPDY/3.1",
                    CHANNEL_PROTOCOLS.join(", ")
                )));
            };
            let session = kubelet.exec(&target, &options).await?;
            let upgrade = upgrade.protocols(CHANNEL_PROTOCOLS);
            Ok(upgrade.on_upgrade(move |socket| pump(socket, session, options)))
        }
        Some("portforward") => {
            let (_, target) = target(ctx, None).await.or_else(|e| {
                // Port forwarding is to the pod, whatever its containers.
                if e.code == StatusCode::BAD_REQUEST {
                    Ok((
                        Value::Null,
                        Target {
                            namespace: ctx.namespace.clone().unwrap_or_default(),
                            pod: ctx.name.clone().unwrap_or_default(),
                            uid: String::new(),
                            container: String::new(),
                        },
                    ))
                } else {
                    Err(e)
                }
            })?;
            crate::portforward::serve(ctx, kubelet, target, raw_query, upgrade, spdy).await
        }
        _ => Err(ApiError::path_not_found()),
    }
}

fn frame(channel: u8, data: &[u8]) -> Message {
    let mut out = Vec::with_capacity(data.len() + 1);
    out.push(channel);
    out.extend_from_slice(data);
    Message::Binary(Bytes::from(out))
}

/// Moves bytes between the WebSocket and the process until it exits.
async fn pump(socket: WebSocket, session: Session, options: ExecOptions) {
    let (sink, mut incoming) = socket.split();
    let (out_tx, out_rx) = mpsc::channel::<Message>(64);
    let Session {
        stdin,
        stdout,
        stderr,
        resize,
        exit,
    } = session;
    let mut readers = Vec::new();
    for (channel, reader) in [(STDOUT, stdout), (STDERR, stderr)] {
        let Some(mut reader) = reader else { continue };
        let tx = out_tx.clone();
        readers.push(tokio::spawn(async move {
            let mut buf = vec![0u8; 32 * 1024];
            loop {
                match reader.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if tx.send(frame(channel, &buf[..n])).await.is_err() {
                            break;
                        }
                    }
                }
            }
        }));
    }
    // The client's side: stdin, resizes, closes.
    let input = tokio::spawn(async move {
        let mut stdin = stdin;
        while let Some(Ok(message)) = incoming.next().await {
            // Clients send text frames too (the Python client does for
            // str data): the first byte is the channel all the same.
            let data = match message {
                Message::Binary(b) => b,
                Message::Text(t) => Bytes::copy_from_slice(t.as_str().as_bytes()),
                Message::Close(_) => break,
                _ => continue,
            };
            let Some((&channel, payload)) = data.split_first() else {
                continue;
            };
            match channel {
                STDIN => {
                    if let Some(w) = stdin.as_mut()
                        && w.write_all(payload).await.is_err()
                    {
                        stdin = None;
                    }
                }
                RESIZE => {
                    let size: Value = serde_json::from_slice(payload).unwrap_or_default();
                    let dim = |k: &str| size.get(k).and_then(Value::as_u64).unwrap_or(0) as u16;
                    if let Some(r) = &resize {
                        r(dim("Width"), dim("Height"));
                    }
                }
                CLOSE if payload.first() == Some(&STDIN) => {
                    // v5: the client has no more input.
                    if let Some(mut w) = stdin.take() {
                        let _ = w.shutdown().await;
                    }
                }
                _ => {}
            }
        }
    });
    let writer = tokio::spawn(send_all_then_close(sink, out_rx));
    let code = exit.await;
    for r in readers {
        let _ = r.await;
    }
    let status = serde_json::to_vec(&exit_status(code, &options.command)).unwrap_or_default();
    let _ = out_tx.send(frame(ERROR, &status)).await;
    drop(out_tx);
    let _ = writer.await;
    input.abort();
}
