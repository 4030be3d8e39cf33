//! Protobuf at the edge (`application/vnd.kubernetes.protobuf`).
//!
//! Handlers speak JSON. A request body in protobuf is decoded to JSON
//! before routing, and a JSON answer is encoded to protobuf when the
//! client prefers protobuf: objects, lists, Status errors, discovery
//! documents, and watch streams (each event a length-prefixed frame).
//! Only Kubernetes' own API groups travel as protobuf; a custom resource
//! is JSON only, as upstream serves it: a protobuf body for one gets 415,
//! and `Accept: protobuf, json` gets JSON.

use axum::body::Body;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use http::{HeaderMap, HeaderValue, StatusCode, header};

use crate::error::{ApiError, ApiResult};
use crate::request::{self, Query};

use flotilla_protobuf::{self as protobuf, MEDIA_TYPE};

/// How the answer to a request that prefers protobuf is encoded.
pub(crate) struct Outgoing {
    /// The client also takes JSON (for what has no message).
    accepts_json: bool,
    watch: bool,
}

/// The API group a request path addresses, if it is a resource path.
fn group_of(path: &str) -> Option<&str> {
    let mut segments = path.trim_start_matches('/').split('/');
    match segments.next()? {
        "api" => Some(""),
        "apis" => segments.next().filter(|g| !g.is_empty()),
        _ => None,
    }
}

/// Decodes a protobuf request body to JSON and, when the client prefers
/// protobuf answers, rewrites its Accept header to the JSON the handlers
/// produce; what to encode on the way out is returned.
pub(crate) async fn incoming(req: Request) -> ApiResult<(Request, Option<Outgoing>)> {
    let Some(group) = group_of(req.uri().path()).map(str::to_string) else {
        return Ok((req, None));
    };
    let builtin = protobuf::is_builtin_group(&group);
    let (mut parts, body) = req.into_parts();
    // A custom resource's protobuf body goes on as it is, to be refused
    // (415) once the resource is found.
    let decode = builtin && request::content_type(&parts.headers).as_deref() == Some(MEDIA_TYPE);
    let body = if decode {
        let bytes = request::read_body(body).await?;
        parts.headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        parts.headers.remove(header::CONTENT_LENGTH);
        if bytes.is_empty() {
            Body::empty()
        } else {
            let object = protobuf::decode(&bytes).map_err(decode_error)?;
            let json =
                serde_json::to_vec(&object).map_err(|e| ApiError::internal(e.to_string()))?;
            Body::from(json)
        }
    } else {
        body
    };
    let outgoing = if builtin {
        prefer_protobuf(&mut parts.headers).map(|accepts_json| Outgoing {
            accepts_json,
            watch: Query::parse(parts.uri.query()).flag("watch"),
        })
    } else {
        None
    };
    Ok((Request::from_parts(parts, body), outgoing))
}

/// The Status a protobuf body that cannot be read gets, as upstream's.
fn decode_error(e: protobuf::Error) -> ApiError {
    match e {
        protobuf::Error::UnknownKind { .. } => {
            ApiError::unsupported_media_type(MEDIA_TYPE, &["application/json", "application/yaml"])
        }
        other => ApiError::bad_request(format!("the object provided is unrecognized: {other}")),
    }
}

/// When the first media range the server can produce is protobuf, turns
/// every protobuf range of Accept into its JSON twin (parameters kept, so
/// `;as=PartialObjectMetadataList` still reaches the handler) and says
/// whether JSON itself was acceptable.
fn prefer_protobuf(headers: &mut HeaderMap) -> Option<bool> {
    let accept = headers.get(header::ACCEPT)?.to_str().ok()?.to_string();
    let essence = |range: &str| {
        range
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase()
    };
    let first = accept.split(',').map(essence).find(|e| {
        matches!(
            e.as_str(),
            MEDIA_TYPE | "application/json" | "application/yaml" | "*/*" | "application/*"
        )
    })?;
    if first != MEDIA_TYPE {
        return None;
    }
    let accepts_json = accept
        .split(',')
        .map(essence)
        .any(|e| matches!(e.as_str(), "application/json" | "*/*" | "application/*"));
    let rewritten = accept
        .split(',')
        .map(|range| {
            let range = range.trim();
            match range.split_once(';') {
                Some((e, params)) if essence(e) == MEDIA_TYPE => {
                    format!("application/json;{params}")
                }
                None if essence(range) == MEDIA_TYPE => "application/json".to_string(),
                _ => range.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join(", ");
    headers.insert(header::ACCEPT, HeaderValue::from_str(&rewritten).ok()?);
    Some(accepts_json)
}

/// Encodes a JSON answer as protobuf for a client that prefers it.
pub(crate) async fn outgoing(response: Response, how: Outgoing) -> Response {
    let content_type = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let Some(params) = content_type.strip_prefix("application/json") else {
        return response;
    };
    let protobuf_type = format!("{MEDIA_TYPE}{params}");
    if how.watch && response.status() == StatusCode::OK {
        return watch_stream(response, protobuf_type);
    }
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return ApiError::internal("reading the answer failed").into_response();
    };
    let encoded = serde_json::from_slice(&bytes)
        .map_err(|e| e.to_string())
        .and_then(|json| protobuf::encode(&json).map_err(|e| e.to_string()));
    match encoded {
        Ok(pb) => {
            set_content_type(&mut parts.headers, &protobuf_type);
            parts.headers.remove(header::CONTENT_LENGTH);
            Response::from_parts(parts, Body::from(pb))
        }
        // A kind without a message (a Table): JSON, when the client takes it.
        Err(_) if how.accepts_json => Response::from_parts(parts, Body::from(bytes)),
        Err(error) => {
            tracing::debug!(%error, "no protobuf encoding for an answer");
            ApiError::not_acceptable("application/json, application/yaml").into_response()
        }
    }
}

fn set_content_type(headers: &mut HeaderMap, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        headers.insert(header::CONTENT_TYPE, v);
    }
}

/// Re-frames a JSON watch stream (one event per line) as a protobuf one.
fn watch_stream(response: Response, content_type: String) -> Response {
    let (mut parts, body) = response.into_parts();
    set_content_type(&mut parts.headers, &format!("{content_type};stream=watch"));
    let mut pending = BytesMut::new();
    let frames = body.into_data_stream().map(move |chunk| {
        let chunk = chunk?;
        pending.extend_from_slice(&chunk);
        let mut out = Vec::new();
        while let Some(end) = pending.iter().position(|b| *b == b'\n') {
            let line = pending.split_to(end + 1);
            let Ok(event) = serde_json::from_slice::<serde_json::Value>(&line) else {
                continue;
            };
            match protobuf::encode_watch_event(&event) {
                Ok(frame) => out.extend(frame),
                Err(error) => tracing::warn!(%error, "a watch event has no protobuf encoding"),
            }
        }
        Ok::<Bytes, axum::Error>(Bytes::from(out))
    });
    Response::from_parts(parts, Body::from_stream(frames))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accept(value: &str) -> (Option<bool>, String) {
        let mut headers = HeaderMap::new();
        headers.insert(header::ACCEPT, HeaderValue::from_str(value).unwrap());
        let result = prefer_protobuf(&mut headers);
        let after = headers[header::ACCEPT].to_str().unwrap().to_string();
        (result, after)
    }

    #[test]
    fn protobuf_is_preferred_only_when_it_comes_first() {
        assert_eq!(
            accept("application/vnd.kubernetes.protobuf, application/json"),
            (Some(true), "application/json, application/json".into())
        );
        assert_eq!(
            accept(
                "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
            ),
            (
                Some(false),
                "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1".into()
            )
        );
        assert_eq!(
            accept("application/json, application/vnd.kubernetes.protobuf").0,
            None
        );
        assert_eq!(
            accept("application/json;as=Table;v=v1;g=meta.k8s.io").0,
            None
        );
    }

    #[test]
    fn resource_paths_name_their_group() {
        assert_eq!(group_of("/api/v1/pods"), Some(""));
        assert_eq!(group_of("/apis/apps/v1/deployments"), Some("apps"));
        assert_eq!(group_of("/apis"), None);
        assert_eq!(group_of("/version"), None);
    }
}
