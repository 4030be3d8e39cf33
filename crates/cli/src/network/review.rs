//! `NetworkReview` (`inspect.flotilla.io/v1alpha1`, cluster-scoped):
//! `flotilla network verify` asked of the hub itself, so the dashboard can
//! run it. A question, not an object: the POST runs the checks (probe
//! pods in both members, deleted after) and answers with every line the
//! CLI prints; nothing is stored. Every read and write goes through a
//! client impersonating the caller, so only someone who may read the
//! members' credentials on the hub (an administrator) can run it; Pull
//! members cannot be verified from the hub (it does not reach them).
//!
//! ```yaml
//! apiVersion: inspect.flotilla.io/v1alpha1
//! kind: NetworkReview
//! spec: {from: member1, to: member2, timeoutSeconds: 90}
//! # status: {output: "...", passed: 6, failed: 0, skipped: 1}
//! ```

use std::time::Duration;

use flotilla_apiserver::embedded_review::{EmbeddedReview, ReviewKind};
use flotilla_apiserver::error::{ApiError, ApiResult};
use flotilla_apiserver::user::User;
use serde_json::{Value, json};
use tracing::Instrument;

use super::probe_pods::{Fleet, Report};
use super::verify::{Outcome, verify_fleet};
use crate::inspect::review::{AsCaller, GROUP, refusal};

/// The longest a review may wait for its probes (a request, not a job).
const MOST: Duration = Duration::from_secs(300);

/// Answers NetworkReviews through the hub's loopback, as their caller.
pub struct NetworkReviews(pub AsCaller);

fn invalid(field: &str, message: &str) -> ApiError {
    crate::inspect::review::invalid("NetworkReview", field, message)
}

#[async_trait::async_trait]
impl EmbeddedReview for NetworkReviews {
    fn kind(&self) -> ReviewKind {
        ReviewKind {
            group: GROUP,
            version: "v1alpha1",
            plural: "networkreviews",
            kind: "NetworkReview",
            namespaced: false,
        }
    }

    async fn answer(&self, user: &User, _: Option<&str>, spec: &Value) -> ApiResult<Value> {
        let from = spec["from"].as_str().unwrap_or_default();
        let to = spec["to"].as_str().unwrap_or_default();
        if from.is_empty() || to.is_empty() {
            return Err(invalid(
                "spec",
                "Required value: spec.from and spec.to name the two clusters",
            ));
        }
        let timeout = match &spec["timeoutSeconds"] {
            Value::Null => Duration::from_secs(90),
            v => match v.as_u64() {
                Some(s) if s > 0 && Duration::from_secs(s) <= MOST => Duration::from_secs(s),
                _ => {
                    return Err(invalid(
                        "spec.timeoutSeconds",
                        &format!("Invalid value: {v}: between 1 and {}", MOST.as_secs()),
                    ));
                }
            },
        };
        let span = tracing::info_span!("network_review", user = %user.name, from, to);
        let hub = self.0.client(user, "flotilla-network-review");
        async move {
            let report = Report::kept();
            let fleet = Fleet::connect(hub, None, from, to)
                .await
                .map_err(|e| refusal(&e, ""))?;
            let checks = verify_fleet(&fleet, timeout, false, &report)
                .await
                .map_err(|e| refusal(&e, ""))?;
            let count = |o: Outcome| checks.iter().filter(|c| c.outcome == o).count();
            Ok(json!({
                "output": report.text(),
                "passed": count(Outcome::Pass),
                "failed": count(Outcome::Fail),
                "skipped": count(Outcome::Skip),
            }))
        }
        .instrument(span)
        .await
    }
}
