//! Request parsing: resource paths, query parameters, media types.

use std::collections::HashMap;

use http::HeaderMap;

use crate::error::{ApiError, ApiResult};
use crate::table::IncludeObject;

/// Largest accepted request body, as kube-apiserver's limit.
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;
/// How much of a body over the limit is still read (and dropped) before the
/// 413 is answered; beyond it the connection is cut.
const DRAIN_BYTES: usize = 64 * 1024 * 1024;

/// Reads a request body of at most [`MAX_BODY_BYTES`]. A larger one is read
/// to its end (up to 64 MiB) before 413 is answered: over HTTP/2, answering
/// while the client is still sending resets the stream, and kubectl reports
/// the reset instead of the Status.
pub async fn read_body(mut body: axum::body::Body) -> ApiResult<bytes::Bytes> {
    use http_body_util::BodyExt;
    let mut buf = bytes::BytesMut::new();
    let mut total = 0usize;
    while let Some(frame) = body.frame().await {
        let frame =
            frame.map_err(|e| ApiError::bad_request(format!("reading the request body: {e}")))?;
        if let Ok(data) = frame.into_data() {
            total = total.saturating_add(data.len());
            if total <= MAX_BODY_BYTES {
                buf.extend_from_slice(&data);
            } else if total > DRAIN_BYTES {
                break;
            }
        }
    }
    if total > MAX_BODY_BYTES {
        return Err(ApiError::too_large(MAX_BODY_BYTES));
    }
    Ok(buf.freeze())
}

/// A parsed resource path below `/api/v1` or `/apis/<g>/<v>`.
#[derive(Debug, Clone, PartialEq)]
pub struct ResourcePath {
    pub group: String,
    pub version: String,
    pub namespace: Option<String>,
    pub plural: String,
    pub name: Option<String>,
    pub subresource: Option<String>,
}

/// Splits a resource path. `is_namespaced` tells whether a plural names a
/// namespaced resource, which disambiguates `/namespaces/<ns>/<x>` between a
/// namespaced collection and a subresource of a namespace.
pub fn parse_resource_path(
    group: &str,
    version: &str,
    rest: &[&str],
    is_namespaced: &dyn Fn(&str) -> bool,
) -> Option<ResourcePath> {
    let mk = |namespace: Option<&str>, plural: &str, name: Option<&str>, sub: Option<&str>| {
        Some(ResourcePath {
            group: group.to_string(),
            version: version.to_string(),
            namespace: namespace.map(String::from),
            plural: plural.to_string(),
            name: name.map(String::from),
            subresource: sub.map(String::from),
        })
    };
    match rest {
        ["namespaces", ns, plural, tail @ ..] if is_namespaced(plural) => match tail {
            [] => mk(Some(ns), plural, None, None),
            [name] => mk(Some(ns), plural, Some(name), None),
            [name, sub] => mk(Some(ns), plural, Some(name), Some(sub)),
            _ => None,
        },
        [plural] => mk(None, plural, None, None),
        [plural, name] => mk(None, plural, Some(name), None),
        [plural, name, sub] => mk(None, plural, Some(name), Some(sub)),
        _ => None,
    }
}

/// Query parameters; tolerates `?`, `?&a=b` and repeated keys (last wins).
#[derive(Debug, Default, Clone)]
pub struct Query(HashMap<String, String>);

impl Query {
    pub fn parse(raw: Option<&str>) -> Self {
        let mut map = HashMap::new();
        if let Some(raw) = raw {
            for (k, v) in form_urlencoded::parse(raw.as_bytes()) {
                if !k.is_empty() {
                    map.insert(k.into_owned(), v.into_owned());
                }
            }
        }
        Query(map)
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .get(key)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    pub fn flag(&self, key: &str) -> bool {
        matches!(self.get(key), Some("true" | "1" | "True"))
    }

    pub fn int(&self, key: &str) -> ApiResult<Option<i64>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v.parse::<i64>().map(Some).map_err(|_| {
                ApiError::bad_request(format!("invalid value for {key}: {v:?} is not an integer"))
            }),
        }
    }
}

/// How the response body is rendered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    Json,
    Yaml,
    Table(IncludeObject),
    PartialMetadata,
}

struct MediaRange<'a> {
    essence: &'a str,
    params: Vec<(&'a str, &'a str)>,
}

fn media_ranges(accept: &str) -> Vec<MediaRange<'_>> {
    accept
        .split(',')
        .map(|part| {
            let mut pieces = part.split(';').map(str::trim);
            let essence = pieces.next().unwrap_or("");
            let params = pieces
                .filter_map(|p| p.split_once('='))
                .map(|(k, v)| (k.trim(), v.trim()))
                .collect();
            MediaRange { essence, params }
        })
        .collect()
}

/// Picks the first acceptable representation for an object or list response.
pub fn negotiate(headers: &HeaderMap, include: Option<&str>) -> ApiResult<Output> {
    let accept = headers
        .get(http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .trim();
    if accept.is_empty() {
        return Ok(Output::Json);
    }
    let include = match include {
        Some("None") => IncludeObject::None,
        Some("Object") => IncludeObject::Object,
        _ => IncludeObject::Metadata,
    };
    for range in media_ranges(accept) {
        let param = |k: &str| range.params.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
        match range.essence {
            "application/json" => match (param("as"), param("g"), param("v")) {
                (None, _, _) => return Ok(Output::Json),
                (Some("Table"), Some("meta.k8s.io"), Some("v1" | "v1beta1")) => {
                    return Ok(Output::Table(include));
                }
                (
                    Some("PartialObjectMetadata" | "PartialObjectMetadataList"),
                    Some("meta.k8s.io"),
                    Some("v1" | "v1beta1"),
                ) => return Ok(Output::PartialMetadata),
                _ => continue,
            },
            "application/yaml" if param("as").is_none() => return Ok(Output::Yaml),
            "*/*" | "application/*" => return Ok(Output::Json),
            _ => continue,
        }
    }
    Err(ApiError::not_acceptable(
        "application/json, application/yaml, application/json;as=Table;v=v1;g=meta.k8s.io",
    ))
}

/// Whether the client asked for aggregated discovery.
pub fn wants_aggregated_discovery(headers: &HeaderMap) -> bool {
    let accept = headers
        .get(http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    for range in media_ranges(accept) {
        let param = |k: &str| range.params.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
        if range.essence == "application/json" {
            if param("as") == Some("APIGroupDiscoveryList")
                && param("g") == Some("apidiscovery.k8s.io")
                && param("v") == Some("v2")
            {
                return true;
            }
            if param("as").is_none() {
                return false;
            }
        }
    }
    false
}

/// The media type of a request body, without parameters; `None` if absent.
pub fn content_type(headers: &HeaderMap) -> Option<String> {
    headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
        .filter(|v| !v.is_empty())
}

/// Parses a create/update body: JSON by default (also when the header is
/// missing, as the Python client sends it), or YAML.
pub fn parse_body(headers: &HeaderMap, body: &[u8]) -> ApiResult<serde_json::Value> {
    match content_type(headers).as_deref() {
        None | Some("application/json") => parse_json(body),
        Some("application/yaml") => parse_yaml(body),
        Some(other) => Err(ApiError::unsupported_media_type(
            other,
            &["application/json", "application/yaml"],
        )),
    }
}

pub fn parse_json(body: &[u8]) -> ApiResult<serde_json::Value> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the request body is not valid JSON: {e}")))
}

pub fn parse_yaml(body: &[u8]) -> ApiResult<serde_json::Value> {
    yaml_or_json(body)
        .map_err(|e| ApiError::bad_request(format!("the request body is not valid YAML: {e}")))
}

/// A YAML body, read by the JSON parser when it is JSON (as kube-rs and
/// client-go send apply patches): YAML is a superset of JSON, and the JSON
/// parser is several times faster.
pub fn yaml_or_json(body: &[u8]) -> Result<serde_json::Value, serde_yaml::Error> {
    if body.trim_ascii_start().first() == Some(&b'{')
        && let Ok(value) = serde_json::from_slice(body)
    {
        return Ok(value);
    }
    serde_yaml::from_slice(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_bodies_read_as_json_when_they_are_json() {
        let json = yaml_or_json(br#" {"kind": "ConfigMap", "data": {"a": "1"}}"#).unwrap();
        let yaml = yaml_or_json(b"kind: ConfigMap\ndata:\n  a: \"1\"\n").unwrap();
        assert_eq!(json, yaml);
        // A YAML flow mapping looks like JSON and is not: YAML reads it.
        let flow = yaml_or_json(b"{kind: ConfigMap, data: {a: \"1\"}}").unwrap();
        assert_eq!(flow, yaml);
        assert!(yaml_or_json(b"{kind: [").is_err());
    }

    #[test]
    fn namespaced_and_cluster_paths() {
        let ns = |p: &str| p == "configmaps";
        let p =
            parse_resource_path("", "v1", &["namespaces", "a", "configmaps", "x"], &ns).unwrap();
        assert_eq!(
            (p.namespace.as_deref(), p.plural.as_str(), p.name.as_deref()),
            (Some("a"), "configmaps", Some("x"))
        );
        let p = parse_resource_path("", "v1", &["namespaces", "a", "status"], &ns).unwrap();
        assert_eq!(
            (
                p.plural.as_str(),
                p.name.as_deref(),
                p.subresource.as_deref()
            ),
            ("namespaces", Some("a"), Some("status"))
        );
        let p = parse_resource_path("", "v1", &["configmaps"], &ns).unwrap();
        assert_eq!(p.namespace, None);
    }

    #[test]
    fn query_tolerates_empty_pairs() {
        let q = Query::parse(Some("&limit=500&&watch=1"));
        assert_eq!(q.get("limit"), Some("500"));
        assert!(q.flag("watch"));
        assert_eq!(Query::parse(Some("")).get("x"), None);
    }

    #[test]
    fn negotiation() {
        let mut h = HeaderMap::new();
        h.insert(
            "accept",
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
                .parse()
                .unwrap(),
        );
        assert_eq!(
            negotiate(&h, None).unwrap(),
            Output::Table(IncludeObject::Metadata)
        );
        h.insert(
            "accept",
            "application/vnd.kubernetes.protobuf,application/json"
                .parse()
                .unwrap(),
        );
        assert_eq!(negotiate(&h, None).unwrap(), Output::Json);
        h.insert(
            "accept",
            "application/vnd.kubernetes.protobuf".parse().unwrap(),
        );
        assert!(negotiate(&h, None).is_err());
    }
}
