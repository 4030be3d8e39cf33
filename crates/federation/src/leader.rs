//! Leader election among control-plane replicas, as kube-controller-manager
//! does it: a `coordination.k8s.io` Lease that one replica holds and renews;
//! the others take it over once it has gone unrenewed for its duration. A
//! record's age is measured on this replica's clock from when it was first
//! seen (client-go's way), so replicas need not agree on the time.

use std::future::Future;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use tracing::{debug, info, warn};

/// kube-controller-manager's flags and defaults.
#[derive(Clone, Debug)]
pub struct Election {
    pub namespace: String,
    pub name: String,
    /// This replica's identity: its host name and a random suffix.
    pub identity: String,
    /// How long a lease is honoured after its last renewal.
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before it gives up.
    pub renew_deadline: Duration,
    /// How often candidates try and the leader renews.
    pub retry_period: Duration,
}

impl Election {
    /// An identity of this host's name and a random suffix, so that a
    /// restarted replica is a new candidate.
    pub fn identity() -> String {
        let host = std::env::var("HOSTNAME")
            .ok()
            .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
            .map(|h| h.trim().to_string())
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "flotilla".into());
        format!("{host}_{}", uuid::Uuid::new_v4())
    }

    pub fn new(identity: String) -> Election {
        Election {
            namespace: "kube-system".into(),
            name: "flotilla-controlplane".into(),
            identity,
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("lost the lease {namespace}/{name}: not renewed for {renew_deadline:?}")]
pub struct LostLease {
    namespace: String,
    name: String,
    renew_deadline: Duration,
}

/// Waits until this replica holds the lease, then runs `lead` while it
/// keeps it. Returns `LostLease` when renewing fails past the deadline:
/// the caller must stop leading at once (kube-controller-manager exits).
pub async fn lead<F: Future<Output = ()>>(
    client: Client,
    e: Election,
    lead: F,
) -> Result<(), LostLease> {
    let api: Api<Lease> = Api::namespaced(client.clone(), &e.namespace);
    if let Err(error) = flotilla_client::namespace::ensure(&client, &e.namespace, &[]).await {
        warn!(%error, namespace = %e.namespace, "cannot create the lease's namespace");
    }
    let mut seen = Observed::default();
    loop {
        match try_acquire_or_renew(&api, &e, &mut seen).await {
            Ok(true) => break,
            Ok(false) => {}
            Err(error) => warn!(%error, lease = %e.name, "cannot read or take the lease"),
        }
        tokio::time::sleep(e.retry_period).await;
    }
    info!(identity = %e.identity, lease = %format!("{}/{}", e.namespace, e.name), "became the leader");
    tokio::select! {
        () = lead => Ok(()),
        lost = keep(&api, &e, &mut seen) => Err(lost),
    }
}

/// Renews every retry period; gives up once no renewal succeeded within
/// the renew deadline.
async fn keep(api: &Api<Lease>, e: &Election, seen: &mut Observed) -> LostLease {
    let mut renewed = Instant::now();
    loop {
        tokio::time::sleep(e.retry_period).await;
        match try_acquire_or_renew(api, e, seen).await {
            Ok(true) => renewed = Instant::now(),
            Ok(false) => {
                warn!(lease = %e.name, "another replica holds the lease");
                break;
            }
            Err(error) => warn!(%error, lease = %e.name, "cannot renew the lease"),
        }
        if renewed.elapsed() > e.renew_deadline {
            break;
        }
    }
    LostLease {
        namespace: e.namespace.clone(),
        name: e.name.clone(),
        renew_deadline: e.renew_deadline,
    }
}

/// The lease record as last seen, and when it was first seen so.
#[derive(Default)]
struct Observed {
    record: Option<(Option<String>, Option<MicroTime>)>,
    since: Option<Instant>,
}

async fn try_acquire_or_renew(
    api: &Api<Lease>,
    e: &Election,
    seen: &mut Observed,
) -> Result<bool, kube::Error> {
    let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
    let seconds = i32::try_from(e.lease_duration.as_secs()).unwrap_or(i32::MAX);
    let Some(mut lease) = api.get_opt(&e.name).await? else {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(e.name.clone()),
                namespace: Some(e.namespace.clone()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(e.identity.clone()),
                lease_duration_seconds: Some(seconds),
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                lease_transitions: Some(0),
                ..Default::default()
            }),
        };
        return match api.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(error) => Err(error),
        };
    };
    let spec = lease.spec.get_or_insert_with(Default::default);
    let record = (spec.holder_identity.clone(), spec.renew_time.clone());
    if seen.record.as_ref() != Some(&record) {
        seen.record = Some(record);
        seen.since = Some(Instant::now());
    }
    let ours = spec.holder_identity.as_deref() == Some(e.identity.as_str());
    let held = spec
        .holder_identity
        .as_deref()
        .is_some_and(|h| !h.is_empty());
    let duration = spec
        .lease_duration_seconds
        .and_then(|s| u64::try_from(s).ok())
        .map_or(e.lease_duration, Duration::from_secs);
    let expired = seen.since.is_none_or(|t| t.elapsed() > duration);
    if !ours && held && !expired {
        debug!(holder = ?spec.holder_identity, "the lease is held");
        return Ok(false);
    }
    if !ours {
        info!(previous = ?spec.holder_identity, identity = %e.identity, "taking over the lease");
        spec.holder_identity = Some(e.identity.clone());
        spec.acquire_time = Some(now.clone());
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
    }
    spec.renew_time = Some(now);
    spec.lease_duration_seconds = Some(seconds);
    // A replace carries the resourceVersion read: of two candidates, one wins.
    match api.replace(&e.name, &PostParams::default(), &lease).await {
        Ok(stored) => {
            if let Some(s) = &stored.spec {
                seen.record = Some((s.holder_identity.clone(), s.renew_time.clone()));
                seen.since = Some(Instant::now());
            }
            Ok(true)
        }
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
        Err(error) => Err(error),
    }
}

/// Runs what `start` makes in a runtime of its own for each term as
/// leader, standing again whenever the lease is lost: the runtime goes
/// with the term, and every task spawned in it, while the caller goes on
/// (serving the API, as kube-controller-manager's replicas keep serving
/// their health checks). Returns when a term's work ends by itself.
pub async fn lead_each_term<F, Fut>(client: Client, election: Election, start: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    loop {
        let runtime = match tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("flotilla-leader")
            .enable_all()
            .build()
        {
            Ok(r) => r,
            Err(error) => {
                tracing::error!(%error, "cannot start the leader's runtime");
                return;
            }
        };
        // Made only once elected, and polled in the term's runtime.
        let handle = runtime.handle().clone();
        let runtime = TermRuntime(Some(runtime));
        let term = lead(client.clone(), election.clone(), async {
            let _ = handle.spawn(start()).await;
        })
        .await;
        drop(runtime);
        match term {
            Ok(()) => return,
            Err(lost) => tracing::error!(%lost, "leadership lost: stopped leading; standing again"),
        }
    }
}

/// A term's runtime, let go of the one way an async context allows
/// (`shutdown_background`: every task stops at its next await), also
/// when the future that holds it is dropped (the process stopping).
struct TermRuntime(Option<tokio::runtime::Runtime>);

impl Drop for TermRuntime {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}
