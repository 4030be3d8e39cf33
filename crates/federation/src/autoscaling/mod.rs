//! Autoscaling across the fleet, as Karmada's `autoscaling.karmada.io`:
//! a FederatedHPA scales a resource template on its pods' usage in the
//! members ([`federated_hpa`]), and a CronFederatedHPA scales a template
//! or moves a FederatedHPA's bounds on a schedule ([`cron`]). The types
//! and CRDs are [`api`], what Karmada's webhooks default and refuse
//! [`admission`]. Where HPAs propagated to the members scale a workload
//! instead, its template is marked so ([`scale_target_marker`]), the
//! members keep their replicas, and a Divided template follows their sum
//! ([`replicas_syncer`]).

pub mod admission;
pub mod api;
pub mod cron;
pub mod federated_hpa;
pub mod replicas_syncer;
pub mod scale_target_marker;

use crate::context::Ctx;

/// The four controllers, until the process stops.
pub async fn run(ctx: Ctx) {
    tokio::join!(
        federated_hpa::run(ctx.clone()),
        cron::run(ctx.clone()),
        scale_target_marker::run(ctx.clone()),
        replicas_syncer::run(ctx),
    );
}
