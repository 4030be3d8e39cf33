//! Autoscaling across the fleet, as Karmada's `autoscaling.karmada.io`:
//! a FederatedHPA scales a resource template on its pods' usage in the
//! members ([`federated_hpa`]), and a CronFederatedHPA scales a template
//! or moves a FederatedHPA's bounds on a schedule ([`cron`]). The types
//! and CRDs are [`api`], what Karmada's webhooks default and refuse
//! [`admission`].

pub mod admission;
pub mod api;
pub mod cron;
pub mod federated_hpa;
pub mod schedule;

use crate::context::Ctx;

/// Both controllers, until the process stops.
pub async fn run(ctx: Ctx) {
    tokio::join!(federated_hpa::run(ctx.clone()), cron::run(ctx));
}
