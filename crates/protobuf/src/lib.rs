//! Kubernetes' protobuf encoding of the built-in kinds
//! (`application/vnd.kubernetes.protobuf`), converted to and from the JSON
//! that the API server stores and serves.
//!
//! The wire format, as kube-apiserver writes it: the four bytes `k8s\0`,
//! then a `runtime.Unknown` whose `typeMeta` names the apiVersion and kind
//! and whose `raw` holds the object's own message. Watch streams are
//! frames of a 4-byte big-endian length and such an envelope holding a
//! `meta.v1.WatchEvent`, whose object is itself an envelope.
//!
//! No Rust code is generated from the protobuf definitions: the messages
//! are read by descriptor (prost-reflect) and converted field by field to
//! JSON (`convert`), which knows the few types whose JSON differs from
//! their message (times, IntOrString, Quantity, raw JSON, inlined structs).

#![forbid(unsafe_code)]

mod convert;
mod envelope;
pub mod openapi_v2;
mod types;

pub use envelope::{MAGIC, frame, read_frame};
pub use types::{is_builtin_group, message_for};

use serde_json::Value;

/// The media type of protobuf bodies.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";
/// The media type of `/openapi/v2` in protobuf, as kubectl asks for it.
pub const OPENAPI_V2_MEDIA_TYPE: &str =
    "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";
/// ... and as the answer names it (Go's MIME parser refuses the `@`).
pub const OPENAPI_V2_CONTENT_TYPE: &str =
    "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";
/// The media type of a protobuf watch stream.
pub const WATCH_MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf;stream=watch";

/// Why bytes could not be read as, or JSON written as, a protobuf object.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The bytes do not start with `k8s\0`.
    #[error(
        "provided data does not appear to be a protobuf message, expected prefix [107 56 115 0]"
    )]
    NotProtobuf,
    /// The envelope or the message is not valid protobuf.
    #[error("unable to decode the protobuf message: {0}")]
    Malformed(String),
    /// No built-in kind of that apiVersion and kind has a message.
    #[error("no kind {kind:?} is registered for version {api_version:?} in protobuf")]
    UnknownKind { api_version: String, kind: String },
    /// A field's JSON value does not fit its message field.
    #[error("{path}: {message}")]
    Field { path: String, message: String },
}

impl Error {
    pub(crate) fn field(path: &str, message: impl Into<String>) -> Self {
        Error::Field {
            path: path.trim_start_matches('.').to_string(),
            message: message.into(),
        }
    }
}

/// The apiVersion and kind an envelope names, without decoding its object.
pub fn peek_kind(bytes: &[u8]) -> Result<(String, String), Error> {
    let unknown = envelope::open(bytes)?;
    Ok(unknown.type_meta())
}

/// True when `api_version`/`kind` is a built-in kind with a message, so
/// that it can travel as protobuf.
pub fn is_known(api_version: &str, kind: &str) -> bool {
    message_for(api_version, kind).is_some()
}

/// Decodes an enveloped object into its JSON, with `apiVersion` and
/// `kind` from the envelope.
pub fn decode(bytes: &[u8]) -> Result<Value, Error> {
    convert::decode_object(bytes, 0)
}

/// Encodes a JSON object (with `apiVersion` and `kind`) as an enveloped
/// protobuf message. Fields the message does not have are left out, as a
/// protobuf client of an older version drops them.
pub fn encode(object: &Value) -> Result<Vec<u8>, Error> {
    convert::encode_object(object)
}

/// Encodes one watch event (`{"type": .., "object": ..}`) as a frame of a
/// protobuf watch stream.
pub fn encode_watch_event(event: &Value) -> Result<Vec<u8>, Error> {
    convert::encode_watch_event(event).map(|event| frame(&event))
}

/// Decodes one frame's payload (without its length) of a protobuf watch
/// stream into `{"type": .., "object": ..}`.
pub fn decode_watch_event(bytes: &[u8]) -> Result<Value, Error> {
    convert::decode_watch_event(bytes)
}
