//! `PlacementReview` (`inspect.flotilla.io/v1alpha1`, namespaced): `flotilla
//! describe placement` and `flotilla plan` asked of the hub itself, so the
//! dashboard (or `kubectl create -f`) gets the same explanation the CLI
//! prints. A question, not an object: a POST is answered and nothing is
//! stored. Every read it makes impersonates the caller, so an answer
//! holds only what they may read, and audit names them.
//!
//! ```yaml
//! apiVersion: inspect.flotilla.io/v1alpha1
//! kind: PlacementReview
//! metadata: {namespace: default}
//! spec:
//!   target: deployment/web        # where it went and why, or:
//!   manifests: |                  # where these would go (a dry run)
//!     apiVersion: apps/v1 ...
//! # status: {explanation: "..."}
//! ```

use std::sync::Arc;

use flotilla_apiserver::ApiServer;
use flotilla_apiserver::embedded_review::{EmbeddedReview, ReviewKind};
use flotilla_apiserver::error::{ApiError, ApiResult};
use flotilla_apiserver::user::User;
use serde_json::{Value, json};
use tracing::Instrument;

pub const GROUP: &str = "inspect.flotilla.io";
pub const PLURAL: &str = "placementreviews";
const KIND: &str = "PlacementReview";

/// The hub's loopback, acting for a review's caller: the reviews read
/// and write only what the caller may (and audit names them).
#[derive(Clone)]
pub struct AsCaller {
    api: Arc<ApiServer>,
    /// A token that may impersonate anyone (the hub's admin).
    token: String,
}

impl AsCaller {
    pub fn new(api: Arc<ApiServer>, token: String) -> AsCaller {
        AsCaller { api, token }
    }

    /// A client that impersonates `user`, as `agent`.
    pub fn client(&self, user: &User, agent: &'static str) -> kube::Client {
        flotilla_apiserver::loopback::in_process_as(&self.api, &self.token, agent, user)
    }
}

/// Answers PlacementReviews through the hub's loopback, as their caller.
pub struct PlacementReviews(pub AsCaller);

#[async_trait::async_trait]
impl EmbeddedReview for PlacementReviews {
    fn kind(&self) -> ReviewKind {
        ReviewKind {
            group: GROUP,
            version: "v1alpha1",
            plural: PLURAL,
            kind: KIND,
            namespaced: true,
        }
    }

    async fn answer(&self, user: &User, namespace: Option<&str>, spec: &Value) -> ApiResult<Value> {
        let namespace = namespace.unwrap_or("default");
        let target = spec["target"].as_str().filter(|t| !t.is_empty());
        let manifests = spec["manifests"].as_str().filter(|m| !m.trim().is_empty());
        let span = tracing::info_span!("placement_review", user = %user.name, namespace, target);
        self.explain(user, namespace, target, manifests)
            .instrument(span)
            .await
    }
}

impl PlacementReviews {
    async fn explain(
        &self,
        user: &User,
        namespace: &str,
        target: Option<&str>,
        manifests: Option<&str>,
    ) -> ApiResult<Value> {
        let hub = self.0.client(user, "flotilla-placement-review");
        let mut explanation = String::new();
        let result = match (target, manifests) {
            (Some(target), None) => {
                super::describe::placement(&hub, target, namespace, false, &mut explanation).await
            }
            (None, Some(manifests)) => {
                match super::plan::parse_documents(manifests, "spec.manifests") {
                    Ok(docs) => super::plan::render(&hub, docs, namespace, &mut explanation).await,
                    Err(e) => return Err(invalid(KIND, "spec.manifests", &format!("{e:#}"))),
                }
            }
            _ => {
                return Err(invalid(
                    KIND,
                    "spec",
                    "Required value: exactly one of spec.target (KIND/NAME) or spec.manifests",
                ));
            }
        };
        match result {
            Ok(()) => Ok(json!({"explanation": explanation})),
            Err(e) => Err(refusal(&e, &explanation)),
        }
    }
}

/// A review's `spec` refused: 422 naming the field, as upstream's.
pub fn invalid(kind: &str, field: &str, message: &str) -> ApiError {
    ApiError::invalid(
        GROUP,
        kind,
        "",
        vec![flotilla_apiserver::error::Cause {
            reason: "FieldValueInvalid",
            field: field.into(),
            message: message.into(),
        }],
    )
}

/// The answer to a review that could not be made: the hub's own refusal
/// (403 for what the caller may not read), or 400 with the reason and
/// what had been explained before it.
pub fn refusal(e: &anyhow::Error, partial: &str) -> ApiError {
    let api = e
        .chain()
        .find_map(|c| match c.downcast_ref::<kube::Error>() {
            Some(kube::Error::Api(s)) => Some(s.clone()),
            _ => None,
        });
    match api {
        Some(s) if s.code == 403 => ApiError::forbidden(s.message),
        _ => {
            let mut message = format!("{e:#}");
            if !partial.is_empty() {
                message = format!("{partial}\n{message}");
            }
            ApiError::bad_request(message)
        }
    }
}
