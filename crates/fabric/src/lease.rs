//! Leader election over a `coordination.k8s.io/v1` Lease, as client-go's
//! leaderelection does: the holder renews `renewTime`; anyone may take a
//! Lease whose renewal is older than its `leaseDurationSeconds`; every
//! write is guarded by the resourceVersion read, so two candidates never
//! both win.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};

pub struct Election {
    api: Api<Lease>,
    name: String,
    identity: String,
    duration: Duration,
}

/// Whether this candidate holds the Lease after a try.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum Role {
    Leader,
    Follower,
}

impl Election {
    pub fn new(
        client: Client,
        namespace: &str,
        name: &str,
        identity: &str,
        duration: Duration,
    ) -> Self {
        Election {
            api: Api::namespaced(client, namespace),
            name: name.into(),
            identity: identity.into(),
            duration,
        }
    }

    fn spec(&self, transitions: i32, acquired: Option<MicroTime>) -> LeaseSpec {
        let now = MicroTime(jiff::Timestamp::now());
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(self.duration.as_secs() as i32),
            acquire_time: Some(acquired.unwrap_or_else(|| now.clone())),
            renew_time: Some(now),
            lease_transitions: Some(transitions),
            ..Default::default()
        }
    }

    /// Takes or renews the Lease once. A Lease another candidate let
    /// lapse is taken only with `takeover`.
    pub async fn try_acquire(&self, takeover: bool) -> Result<Role, kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..Default::default()
                },
                spec: Some(self.spec(0, None)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(Role::Leader),
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(Role::Follower),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let mine = spec.holder_identity.as_deref() == Some(&self.identity);
        let expired = match (&spec.renew_time, spec.lease_duration_seconds) {
            (Some(renewed), Some(secs)) => {
                let age = jiff::Timestamp::now().duration_since(renewed.0);
                age.as_secs_f64() > f64::from(secs)
            }
            _ => true,
        };
        let free = spec.holder_identity.as_deref().is_none_or(str::is_empty);
        if !mine && !free && (!expired || !takeover) {
            return Ok(Role::Follower);
        }
        let transitions = spec.lease_transitions.unwrap_or(0) + i32::from(!mine);
        let acquired = if mine {
            spec.acquire_time.clone()
        } else {
            None
        };
        lease.spec = Some(self.spec(transitions, acquired));
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(Role::Leader),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(Role::Follower),
            Err(e) => Err(e),
        }
    }

    /// Gives the Lease up, so a standby takes over at once.
    pub async fn release(&self) {
        if let Ok(Some(mut lease)) = self.api.get_opt(&self.name).await
            && lease
                .spec
                .as_ref()
                .and_then(|s| s.holder_identity.as_deref())
                == Some(&self.identity)
        {
            if let Some(spec) = lease.spec.as_mut() {
                spec.holder_identity = None;
                spec.renew_time = None;
            }
            let _ = self
                .api
                .replace(&self.name, &PostParams::default(), &lease)
                .await;
        }
    }

    /// Who holds the Lease, if anyone does and it is live.
    pub async fn holder(&self) -> Option<String> {
        let lease = self.api.get_opt(&self.name).await.ok()??;
        let spec = lease.spec?;
        spec.holder_identity.filter(|h| !h.is_empty())
    }
}
