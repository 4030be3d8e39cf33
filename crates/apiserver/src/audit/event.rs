//! `audit.k8s.io/v1` `Event`: what one line of the audit log holds, with
//! upstream's field names and order.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use super::policy::{Level, Stage};

/// `authentication.k8s.io/v1` `UserInfo`: `{}` for a request whose
/// authentication failed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct UserInfo {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub username: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
}

/// The object a resource request is about.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectReference {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub resource: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_group: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub subresource: String,
}

/// One event, as written.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Event<'a> {
    pub kind: &'static str,
    pub api_version: &'static str,
    pub level: Level,
    #[serde(rename = "auditID")]
    pub audit_id: &'a str,
    pub stage: Stage,
    #[serde(rename = "requestURI")]
    pub request_uri: &'a str,
    pub verb: &'a str,
    pub user: &'a UserInfo,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub impersonated_user: Option<&'a UserInfo>,
    #[serde(rename = "sourceIPs", skip_serializing_if = "<[String]>::is_empty")]
    pub source_ips: &'a [String],
    #[serde(skip_serializing_if = "str::is_empty")]
    pub user_agent: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object_ref: Option<&'a ObjectReference>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_status: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_object: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_object: Option<&'a Value>,
    pub request_received_timestamp: &'a str,
    pub stage_timestamp: &'a str,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: &'a BTreeMap<String, String>,
}

impl Event<'_> {
    /// The event as one line of JSON, newline included.
    pub fn to_line(&self) -> Result<Vec<u8>, serde_json::Error> {
        let mut line = serde_json::to_vec(self)?;
        line.push(b'\n');
        Ok(line)
    }
}

/// A `metav1.MicroTime` as upstream writes it: UTC, microseconds.
pub fn micro_time(ts: jiff::Timestamp) -> String {
    jiff::fmt::strtime::format("%Y-%m-%dT%H:%M:%S%.6fZ", ts).unwrap_or_else(|_| ts.to_string())
}

/// `responseStatus`: the code, and for a `Status` answer its bounded
/// fields (status, message, reason, details), as upstream copies them.
pub fn response_status(code: u16, status: Option<&Value>) -> Value {
    let mut out = serde_json::Map::new();
    out.insert("metadata".into(), Value::Object(Default::default()));
    if let Some(Value::Object(s)) = status {
        for key in ["status", "message", "reason", "details"] {
            if let Some(v) = s.get(key) {
                out.insert(key.into(), v.clone());
            }
        }
    }
    out.insert("code".into(), code.into());
    Value::Object(out)
}

/// Drops `metadata.managedFields` from an object, or from each item of a list.
pub fn omit_managed_fields(value: &mut Value) {
    if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
    if let Some(items) = value.get_mut("items").and_then(Value::as_array_mut) {
        for item in items {
            if let Some(meta) = item.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.remove("managedFields");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_has_upstreams_shape() {
        let user = UserInfo {
            username: "alice".into(),
            groups: vec!["system:authenticated".into()],
        };
        let object = ObjectReference {
            resource: "pods".into(),
            namespace: "default".into(),
            api_version: "v1".into(),
            ..Default::default()
        };
        let status = response_status(200, None);
        let annotations = BTreeMap::new();
        let ts = micro_time(
            jiff::Timestamp::from_microsecond(1_700_000_000_123_456).unwrap_or_default(),
        );
        assert_eq!(ts, "2023-11-14T22:13:20.123456Z");
        let event = Event {
            kind: "Event",
            api_version: "audit.k8s.io/v1",
            level: Level::Metadata,
            audit_id: "id",
            stage: Stage::ResponseComplete,
            request_uri: "/api/v1/namespaces/default/pods",
            verb: "list",
            user: &user,
            impersonated_user: None,
            source_ips: &["127.0.0.1".into()],
            user_agent: "kubectl",
            object_ref: Some(&object),
            response_status: Some(&status),
            request_object: None,
            response_object: None,
            request_received_timestamp: &ts,
            stage_timestamp: &ts,
            annotations: &annotations,
        };
        let line = String::from_utf8(event.to_line().unwrap_or_default()).unwrap_or_default();
        assert_eq!(
            line,
            "{\"kind\":\"Event\",\"apiVersion\":\"audit.k8s.io/v1\",\"level\":\"Metadata\",\"auditID\":\"id\",\
             \"stage\":\"ResponseComplete\",\"requestURI\":\"/api/v1/namespaces/default/pods\",\"verb\":\"list\",\
             \"user\":{\"username\":\"alice\",\"groups\":[\"system:authenticated\"]},\"sourceIPs\":[\"127.0.0.1\"],\
             \"userAgent\":\"kubectl\",\"objectRef\":{\"resource\":\"pods\",\"namespace\":\"default\",\"apiVersion\":\"v1\"},\
             \"responseStatus\":{\"metadata\":{},\"code\":200},\
             \"requestReceivedTimestamp\":\"2023-11-14T22:13:20.123456Z\",\"stageTimestamp\":\"2023-11-14T22:13:20.123456Z\"}\n"
        );
    }

    #[test]
    fn a_failure_keeps_the_bounded_fields_of_its_status() {
        let status = serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "pods is forbidden", "reason": "Forbidden", "details": {"kind": "pods"}, "code": 403
        });
        assert_eq!(
            response_status(403, Some(&status)),
            serde_json::json!({"metadata": {}, "status": "Failure", "message": "pods is forbidden",
                "reason": "Forbidden", "details": {"kind": "pods"}, "code": 403})
        );
    }
}
