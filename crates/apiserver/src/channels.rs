//! What the connect subresources' streams share, whichever protocol
//! carries them (WebSocket channels in `connect.rs` and `portforward.rs`,
//! SPDY in `spdy_exec.rs`): the error channel's Status for an exit code,
//! and closing a WebSocket once everything queued is sent.

use axum::extract::ws::{Message, WebSocket};
use futures::SinkExt;
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// The error channel's Status for an exit code, as the kubelet writes it.
pub(crate) fn exit_status(code: Result<i32, String>, command: &[String]) -> Value {
    match code {
        Ok(0) => json!({"metadata": {}, "status": "Success"}),
        Ok(code) => json!({
            "metadata": {},
            "status": "Failure",
            "message": format!("command terminated with non-zero exit code: error executing command {command:?}, exit code {code}"),
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
        }),
        Err(message) => json!({
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": "InternalError",
            "code": 500,
        }),
    }
}

/// Sends what comes on `rx` until it ends, then closes the WebSocket
/// normally (clients read a close without a status, 1005, as an error).
pub(crate) async fn send_all_then_close(
    mut sink: futures::stream::SplitSink<WebSocket, Message>,
    mut rx: mpsc::Receiver<Message>,
) {
    while let Some(m) = rx.recv().await {
        if sink.send(m).await.is_err() {
            break;
        }
    }
    let _ = sink
        .send(Message::Close(Some(axum::extract::ws::CloseFrame {
            code: axum::extract::ws::close_code::NORMAL,
            reason: "".into(),
        })))
        .await;
}
