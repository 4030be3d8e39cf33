//! API errors, rendered as `meta/v1 Status` objects with upstream reasons.

use axum::response::{IntoResponse, Response};
use http::StatusCode;
use serde_json::{Value, json};

use flotilla_store::StoreError;

/// One entry of `details.causes`.
#[derive(Clone, Debug)]
pub struct Cause {
    pub reason: &'static str,
    pub field: String,
    pub message: String,
}

#[derive(Clone, Debug)]
pub struct ApiError {
    pub code: StatusCode,
    pub reason: &'static str,
    pub message: String,
    /// `details`: name, group, kind (resource for NotFound/AlreadyExists, Kind for Invalid).
    pub details: Option<Box<Details>>,
}

#[derive(Clone, Debug, Default)]
pub struct Details {
    pub name: String,
    pub group: String,
    pub kind: String,
    pub causes: Vec<Cause>,
}

pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    pub fn new(code: StatusCode, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    pub fn with_details(mut self, details: Details) -> Self {
        self.details = Some(Box::new(details));
        self
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "BadRequest", message)
    }

    /// An unknown path.
    pub fn path_not_found() -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "NotFound",
            "the server could not find the requested resource",
        )
    }

    /// `<resource>[.<group>] "<name>" not found`.
    pub fn not_found(group: &str, resource: &str, name: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "NotFound",
            format!("{} \"{name}\" not found", qualified(group, resource)),
        )
        .with_details(Details {
            name: name.into(),
            group: group.into(),
            kind: resource.into(),
            causes: vec![],
        })
    }

    pub fn already_exists(group: &str, resource: &str, name: &str) -> Self {
        Self::new(
            StatusCode::CONFLICT,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", qualified(group, resource)),
        )
        .with_details(Details {
            name: name.into(),
            group: group.into(),
            kind: resource.into(),
            causes: vec![],
        })
    }

    /// A failed resourceVersion precondition.
    pub fn conflict(group: &str, resource: &str, name: &str) -> Self {
        Self::new(
            StatusCode::CONFLICT,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                qualified(group, resource)
            ),
        )
        .with_details(Details {
            name: name.into(),
            group: group.into(),
            kind: resource.into(),
            causes: vec![],
        })
    }

    /// `<Kind> "<name>" is invalid: <causes>` with field causes.
    pub fn invalid(group: &str, kind: &str, name: &str, causes: Vec<Cause>) -> Self {
        let summary = causes
            .iter()
            .map(|c| {
                if c.field.is_empty() {
                    c.message.clone()
                } else {
                    format!("{}: {}", c.field, c.message)
                }
            })
            .collect::<Vec<_>>();
        let summary = if summary.len() == 1 {
            summary[0].clone()
        } else {
            format!("[{}]", summary.join(", "))
        };
        let qualified_kind = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        Self::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid",
            format!("{qualified_kind} \"{name}\" is invalid: {summary}"),
        )
        .with_details(Details {
            name: name.into(),
            group: group.into(),
            kind: kind.into(),
            causes,
        })
    }

    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed", message)
    }

    pub fn unsupported_media_type(content_type: &str, accepted: &[&str]) -> Self {
        Self::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format ({content_type}) - accepted media types include: {}",
                accepted.join(", ")
            ),
        )
    }

    pub fn not_acceptable(accepted: &str) -> Self {
        Self::new(
            StatusCode::NOT_ACCEPTABLE,
            "NotAcceptable",
            format!("only the following media types are accepted: {accepted}"),
        )
    }

    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(StatusCode::GONE, "Expired", message)
    }

    pub fn too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "RequestEntityTooLarge",
            format!("the request body is larger than the {limit} byte limit"),
        )
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "Forbidden", message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "InternalError", message)
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            message,
        )
    }

    pub fn to_status(&self) -> Value {
        // Upstream's field order, which clients and tests compare:
        // kind, apiVersion, metadata, status, message, reason, details, code.
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
        });
        if let Some(d) = &self.details {
            let mut details = serde_json::Map::new();
            if !d.name.is_empty() {
                details.insert("name".into(), d.name.clone().into());
            }
            if !d.group.is_empty() {
                details.insert("group".into(), d.group.clone().into());
            }
            if !d.kind.is_empty() {
                details.insert("kind".into(), d.kind.clone().into());
            }
            if !d.causes.is_empty() {
                details.insert(
                    "causes".into(),
                    d.causes
                        .iter()
                        .map(
                            |c| json!({"reason": c.reason, "message": c.message, "field": c.field}),
                        )
                        .collect(),
                );
            }
            status["details"] = Value::Object(details);
        }
        status["code"] = json!(self.code.as_u16());
        status
    }
}

fn qualified(group: &str, resource: &str) -> String {
    if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = serde_json::to_vec(&self.to_status()).unwrap_or_default();
        // As Go's JSON encoder ends what it writes.
        body.push(b'\n');
        (
            self.code,
            [(http::header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response()
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Compacted { requested, oldest } => {
                ApiError::expired(format!("too old resource version: {requested} ({oldest})"))
            }
            StoreError::Closed => ApiError::unavailable("the storage is shutting down"),
            // etcd unreachable or electing a leader: the client may retry.
            e @ (StoreError::Etcd(_) | StoreError::Unavailable(_)) => {
                ApiError::unavailable(e.to_string())
            }
            other => ApiError::internal(other.to_string()),
        }
    }
}
