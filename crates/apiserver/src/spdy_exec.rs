//! `exec` and `attach` over SPDY/3.1, for clients that do not speak
//! WebSocket (kubectl before 1.30, or with
//! `KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false`): protocol
//! `v4.channel.k8s.io`, one SPDY stream per channel (`streamType` error,
//! stdin, stdout, stderr, resize), the exit as a Status on the error
//! stream. Framing is [`crate::spdy`].

use std::collections::HashMap;
use std::time::Duration;

use axum::response::Response;
use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::kubelet::{ExecOptions, Session};
use crate::spdy::{self, FLAG_FIN, Frame};

pub const PROTOCOL: &str = "v4.channel.k8s.io";

/// Answers 101 and runs the session on the upgraded connection.
pub fn serve(
    session: Session,
    options: ExecOptions,
    on_upgrade: hyper::upgrade::OnUpgrade,
) -> Response {
    tokio::spawn(async move {
        if let Ok(upgraded) = on_upgrade.await {
            run(hyper_util::rt::TokioIo::new(upgraded), session, options).await;
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
        http::HeaderValue::from_static(PROTOCOL),
    );
    response
}

async fn run<IO>(io: IO, session: Session, options: ExecOptions)
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static,
{
    let (mut reader, writer) = tokio::io::split(io);
    let (out, write) = spdy::writer(writer);
    let Session {
        stdin,
        stdout,
        stderr,
        resize,
        exit,
    } = session;
    let mut codec = spdy::Codec::default();
    let mut buf = BytesMut::with_capacity(16 * 1024);
    let mut streams: HashMap<String, u32> = HashMap::new();
    let expected = |streams: &HashMap<String, u32>| {
        streams.contains_key("error")
            && (!options.stdout || streams.contains_key("stdout"))
            && (!options.stderr || options.tty || streams.contains_key("stderr"))
            && (!options.stdin || streams.contains_key("stdin"))
    };
    // Streams first (the client opens them all before anything else).
    let opened = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            while let Ok(Some(frame)) = codec.read(&mut buf) {
                if let Frame::SynStream {
                    stream_id, headers, ..
                } = frame
                {
                    let _ = out.send(codec.syn_reply(stream_id, &[])).await;
                    if let Some((_, kind)) = headers.iter().find(|(k, _)| k == "streamtype") {
                        streams.insert(kind.clone(), stream_id);
                    }
                }
            }
            if expected(&streams) {
                return true;
            }
            match reader.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return false,
                Ok(_) => {}
            }
        }
    })
    .await;
    if opened != Ok(true) {
        drop(out);
        let _ = write.await;
        return;
    }
    let mut pumps = Vec::new();
    for (kind, source) in [("stdout", stdout), ("stderr", stderr)] {
        let (Some(mut source), Some(&id)) = (source, streams.get(kind)) else {
            continue;
        };
        let out = out.clone();
        pumps.push(tokio::spawn(async move {
            let mut chunk = vec![0u8; 32 * 1024];
            while let Ok(n) = source.read(&mut chunk).await {
                if n == 0 || out.send(spdy::data(id, 0, &chunk[..n])).await.is_err() {
                    break;
                }
            }
            let _ = out.send(spdy::data(id, FLAG_FIN, &[])).await;
        }));
    }
    // The client's side: stdin and resizes, until it goes.
    let (stdin_id, resize_id) = (
        streams.get("stdin").copied(),
        streams.get("resize").copied(),
    );
    let input = tokio::spawn(async move {
        let mut stdin = stdin;
        loop {
            while let Ok(Some(frame)) = codec.read(&mut buf) {
                match frame {
                    Frame::Data {
                        stream_id,
                        flags,
                        data,
                    } if Some(stream_id) == stdin_id => {
                        if let Some(w) = stdin.as_mut()
                            && !data.is_empty()
                            && w.write_all(&data).await.is_err()
                        {
                            stdin = None;
                        }
                        if flags & FLAG_FIN != 0
                            && let Some(mut w) = stdin.take()
                        {
                            let _ = w.shutdown().await;
                        }
                    }
                    Frame::Data {
                        stream_id, data, ..
                    } if Some(stream_id) == resize_id => {
                        // One JSON object per resize, possibly several per frame.
                        let stream = serde_json::Deserializer::from_slice(&data)
                            .into_iter::<serde_json::Value>();
                        for size in stream.flatten() {
                            let dim =
                                |k: &str| size.get(k).and_then(|v| v.as_u64()).unwrap_or(0) as u16;
                            if let Some(r) = &resize {
                                r(dim("Width"), dim("Height"));
                            }
                        }
                    }
                    Frame::GoAway => return,
                    _ => {}
                }
            }
            match reader.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    });
    let code = exit.await;
    for p in pumps {
        let _ = p.await;
    }
    if let Some(&error) = streams.get("error") {
        let status = crate::channels::exit_status(code, &options.command);
        let body = serde_json::to_vec(&status).unwrap_or_default();
        let _ = out.send(spdy::data(error, FLAG_FIN, &body)).await;
    }
    let last = streams.values().copied().max().unwrap_or(0);
    let _ = out.send(spdy::goaway(last)).await;
    drop(out);
    let _ = write.await;
    input.abort();
}
