//! Watch: newline-delimited JSON events over a chunked response, with
//! initial events, bookmarks, selectors and in-stream 410 Expired.

use std::convert::Infallible;
use std::time::Duration;

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use flotilla_store::{Event, EventKind, KeyValue, ListOptions, Revision, StoreError};
use http::{StatusCode, header};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tracing::debug;

use crate::error::{ApiError, ApiResult};
use crate::handlers::{
    Ctx, Filter, PartialMetadata, invalid_list_options, parse_rv, partial_metadata,
};
use crate::objects;
use crate::raw;
use crate::request::{self, Output};
use crate::resources::ResourceInfo;
use crate::table;

/// Renders watch events in the negotiated form.
struct Encoder {
    output: Output,
    columns_sent: bool,
    /// The embedder's computed columns of the kind, if any.
    convertor: Option<std::sync::Arc<dyn crate::extension::TableConvertor>>,
}

impl Encoder {
    fn object<'a>(&mut self, r: &ResourceInfo, obj: &'a Value) -> Served<'a> {
        match self.output {
            Output::Table(include) => {
                let with_columns = !self.columns_sent;
                self.columns_sent = true;
                Served::Table(table::table(
                    r,
                    self.convertor.as_deref(),
                    std::slice::from_ref(obj),
                    json!({"resourceVersion": objects::meta_str(obj, "resourceVersion")}),
                    include,
                    with_columns,
                ))
            }
            Output::PartialMetadata => Served::Metadata(partial_metadata(obj)),
            Output::Json | Output::Yaml => Served::Object(obj),
        }
    }

    /// The line for a store event, or None when the filter hides it. With
    /// no filter and the object served as stored, the line is made from
    /// the stored bytes without decoding them.
    fn event_line(
        &mut self,
        r: &ResourceInfo,
        filter: &Filter,
        event: &Event,
    ) -> ApiResult<Option<Bytes>> {
        let (before, now) = if serves_stored(filter, self.output) {
            // An empty filter matches every object, before and after.
            (event.prev.is_some(), true)
        } else if let Some(matched) = self.matches_stored(r, filter, event) {
            matched
        } else {
            return Ok(classify(r, filter, event)?.map(|(kind, obj)| self.line(r, kind, &obj)));
        };
        match event_type(event, before, now) {
            Some(kind) => Ok(Some(raw_line(r, kind, &event.kv)?)),
            None => Ok(None),
        }
    }

    /// Whether the event's object matched the filter before and matches it
    /// now, read from the stored bytes' labels when the object is served
    /// as stored; None when only decoding can tell.
    fn matches_stored(
        &self,
        r: &ResourceInfo,
        filter: &Filter,
        event: &Event,
    ) -> Option<(bool, bool)> {
        if !matches!(self.output, Output::Json | Output::Yaml) {
            return None;
        }
        let now = filter.matches_stored(r, &event.kv)?;
        let before = match &event.prev {
            Some(prev) => filter.matches_stored(r, prev)?,
            None => false,
        };
        Some((before, now))
    }

    fn line(&mut self, r: &ResourceInfo, kind: &str, obj: &Value) -> Bytes {
        #[derive(Serialize)]
        struct Line<'a> {
            #[serde(rename = "type")]
            kind: &'a str,
            object: Served<'a>,
        }
        let object = self.object(r, obj);
        let mut bytes = serde_json::to_vec(&Line { kind, object }).unwrap_or_default();
        bytes.push(b'\n');
        Bytes::from(bytes)
    }
}

/// An event's object as the watch serves it, serialized where it lies.
#[derive(Serialize)]
#[serde(untagged)]
enum Served<'a> {
    Table(Value),
    Metadata(PartialMetadata<'a>),
    Object(&'a Value),
}

/// Whether events can be written from the stored bytes: every object is
/// sent (no filter), as plain JSON.
fn serves_stored(filter: &Filter, output: Output) -> bool {
    filter.is_empty() && matches!(output, Output::Json | Output::Yaml)
}

/// `{"type": kind, "object": <the stored object as served>}` and a newline.
fn raw_line(r: &ResourceInfo, kind: &str, kv: &KeyValue) -> ApiResult<Bytes> {
    let mut bytes = Vec::with_capacity(kv.value.len() + 96);
    bytes.extend_from_slice(b"{\"type\":\"");
    bytes.extend_from_slice(kind.as_bytes());
    bytes.extend_from_slice(b"\",\"object\":");
    raw::write_served(&mut bytes, r, kv)?;
    bytes.extend_from_slice(b"}\n");
    Ok(Bytes::from(bytes))
}

fn bookmark(r: &ResourceInfo, rv: Revision, initial_end: bool) -> Bytes {
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if initial_end {
        meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    let obj = json!({"kind": r.kind, "apiVersion": r.api_version(), "metadata": meta});
    let mut bytes =
        serde_json::to_vec(&json!({"type": "BOOKMARK", "object": obj})).unwrap_or_default();
    bytes.push(b'\n');
    Bytes::from(bytes)
}

fn error_line(e: &ApiError) -> Bytes {
    let mut bytes =
        serde_json::to_vec(&json!({"type": "ERROR", "object": e.to_status()})).unwrap_or_default();
    bytes.push(b'\n');
    Bytes::from(bytes)
}

/// Maps a store event to a watch event under the filter: objects that start
/// matching are ADDED, objects that stop matching are DELETED.
fn classify(
    r: &ResourceInfo,
    filter: &Filter,
    event: &Event,
) -> ApiResult<Option<(&'static str, Value)>> {
    let obj = objects::decode(r, &event.kv)?;
    let now = filter.matches(&obj);
    let before = match &event.prev {
        Some(prev) if !filter.is_empty() => filter.matches(&objects::decode(r, prev)?),
        Some(_) => true,
        None => false,
    };
    Ok(event_type(event, before, now).map(|kind| (kind, obj)))
}

/// The watch event type of a store event, given whether its object matched
/// the filter before (`before`, false without a previous version) and
/// after (`now`); None when the watcher is not to see it.
fn event_type(event: &Event, before: bool, now: bool) -> Option<&'static str> {
    match event.kind {
        EventKind::Delete => before.then_some("DELETED"),
        EventKind::Put => match (event.prev.is_some() && before, now) {
            (true, true) => Some("MODIFIED"),
            (false, true) => Some("ADDED"),
            (true, false) => Some("DELETED"),
            (false, false) => None,
        },
    }
}

pub async fn serve(ctx: Ctx) -> ApiResult<Response> {
    let r = ctx.resource.clone();
    let q = &ctx.query;
    let output = request::negotiate(&ctx.headers, q.get("includeObject"))?;
    let filter = Filter::from_query(&r, q)?;
    let send_initial = q.get("sendInitialEvents").map(|v| v == "true" || v == "1");
    let rv_match = q.get("resourceVersionMatch");
    let rv = q.get("resourceVersion");
    match (send_initial, rv_match) {
        (Some(_), Some("NotOlderThan")) => {}
        (Some(_), _) => {
            return Err(invalid_list_options(
                "resourceVersionMatch",
                "Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            ));
        }
        (None, Some(_)) => {
            return Err(invalid_list_options(
                "resourceVersionMatch",
                "Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
            ));
        }
        (None, None) => {}
    }
    let timeout = q
        .int("timeoutSeconds")?
        .filter(|t| *t > 0)
        .map(|t| Duration::from_secs(t as u64));
    let bookmarks = q.flag("allowWatchBookmarks");
    let store = ctx.api.store.clone();
    let prefix = r.collection_prefix(ctx.namespace.as_deref());
    let requested: Option<Revision> = match rv {
        Some(v) => Some(parse_rv(v)?),
        None => None,
    };

    let initial = matches!(
        (send_initial, requested),
        (Some(true), _) | (None, None) | (None, Some(0))
    );
    let (tx, rx) = mpsc::channel::<Result<Bytes, Infallible>>(64);
    let mut encoder = Encoder {
        output,
        columns_sent: false,
        convertor: ctx.api.extensions.table(&ctx.resource),
    };
    let bookmark_interval = ctx.api.config.bookmark_interval;

    // The first lines are computed before responding, so a client that reads
    // the status line also sees the initial state promptly.
    let mut first: Vec<Bytes> = Vec::new();
    crate::handlers::read_fresh(&ctx.api, rv).await?;
    let start = if initial {
        let snapshot = store.list(&prefix, &ListOptions::default())?;
        let raw = serves_stored(&filter, output);
        for kv in &snapshot.items {
            if raw {
                first.push(raw_line(&r, "ADDED", kv)?);
                continue;
            }
            let obj = objects::decode(&r, kv)?;
            if filter.matches(&obj) {
                first.push(encoder.line(&r, "ADDED", &obj));
            }
        }
        if send_initial == Some(true) {
            // The end marker is a bookmark, sent even if the client forgot allowWatchBookmarks.
            first.push(bookmark(&r, snapshot.revision, true));
        }
        snapshot.revision
    } else {
        requested.unwrap_or(0)
    };

    let watch = match store.watch(&prefix, start) {
        Ok(w) => Some(w),
        Err(StoreError::Compacted { requested, oldest }) => {
            first.push(error_line(&ApiError::expired(format!(
                "too old resource version: {requested} ({oldest})"
            ))));
            None
        }
        Err(e) => return Err(e.into()),
    };

    let stopping = ctx.api.stopping.subscribe();
    tokio::spawn(async move {
        for line in first {
            if tx.send(Ok(line)).await.is_err() {
                return;
            }
        }
        let Some(mut watch) = watch else { return };
        // timeoutSeconds ends the stream cleanly; without it the stream lasts.
        let expiry = async {
            match timeout {
                Some(t) => tokio::time::sleep(t).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(expiry);
        let mut ticker = tokio::time::interval(bookmark_interval);
        ticker.tick().await;
        let stopped = async move {
            let mut stopping = stopping;
            let _ = stopping.wait_for(|s| *s).await.is_ok();
        };
        tokio::pin!(stopped);
        loop {
            tokio::select! {
                _ = tx.closed() => return,
                _ = &mut expiry => return,
                () = &mut stopped => return,
                _ = ticker.tick(), if bookmarks => {
                    if tx.send(Ok(bookmark(&r, watch.revision(), false))).await.is_err() {
                        return;
                    }
                }
                batch = watch.next() => {
                    let events = match batch {
                        Ok(events) => events,
                        Err(StoreError::Compacted { requested, oldest }) => {
                            let e = ApiError::expired(format!("too old resource version: {requested} ({oldest})"));
                            let _ = tx.send(Ok(error_line(&e))).await;
                            return;
                        }
                        Err(error) => {
                            debug!(%error, "watch ended");
                            return;
                        }
                    };
                    for event in events.iter() {
                        let line = match encoder.event_line(&r, &filter, event) {
                            Ok(Some(line)) => line,
                            Ok(None) => continue,
                            Err(e) => error_line(&e),
                        };
                        if tx.send(Ok(line)).await.is_err() {
                            return;
                        }
                    }
                }
            }
        }
    });

    let content_type = match output {
        Output::Table(_) => "application/json;as=Table;v=v1;g=meta.k8s.io",
        _ => "application/json",
    };
    Ok((
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache, private"),
        ],
        Body::from_stream(ReceiverStream::new(rx)),
    )
        .into_response())
}
