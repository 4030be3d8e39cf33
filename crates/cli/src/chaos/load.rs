//! The steady load: templates (ConfigMaps under the run's
//! PropagationPolicy and OverridePolicy) created, updated and deleted
//! through the hub, each answer written to the ledger, each lost answer
//! written as unsure.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use tokio::sync::watch;

use super::ledger::Ledger;

/// The namespace the load writes in, on the hub and in every member.
pub const NAMESPACE: &str = "chaos";
/// The label of every template of the load.
pub const LABEL: &str = "chaos.flotilla.io/load";
/// The label the run's OverridePolicy adds to the first member's copies.
pub const OVERRIDE_LABEL: &str = "chaos.flotilla.io/overridden";

/// The run's policies: every template to every member; the first member's
/// copies carry [`OVERRIDE_LABEL`].
pub fn policies(first_member: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Namespace
metadata: {{name: {NAMESPACE}}}
---
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata: {{name: load, namespace: {NAMESPACE}}}
spec:
  resourceSelectors:
  - apiVersion: v1
    kind: ConfigMap
    labelSelector: {{matchLabels: {{{LABEL}: "true"}}}}
---
apiVersion: policy.karmada.io/v1alpha1
kind: OverridePolicy
metadata: {{name: load, namespace: {NAMESPACE}}}
spec:
  resourceSelectors:
  - apiVersion: v1
    kind: ConfigMap
    labelSelector: {{matchLabels: {{{LABEL}: "true"}}}}
  overrideRules:
  - targetCluster: {{clusterNames: [{first_member}]}}
    overriders:
      labelsOverrider:
      - operator: add
        value: {{{OVERRIDE_LABEL}: "{first_member}"}}
"#
    )
}

/// What the load did.
#[derive(Clone, Debug, Default)]
pub struct Done {
    pub acknowledged: usize,
    pub unsure: usize,
    /// Acknowledged templates the hub later answered were not there.
    pub vanished: Vec<String>,
}

/// Drives the load until `stop` turns true.
pub async fn drive(
    kubeconfigs: Vec<PathBuf>,
    seed: u64,
    ledger: Arc<Mutex<Ledger>>,
    mut stop: watch::Receiver<bool>,
) -> Done {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x10ad);
    let mut done = Done::default();
    let mut next = 0u64;
    let mut client: Option<kube::Client> = None;
    // A replica that does not answer hands the load to the next one.
    let mut replica = 0;
    while !*stop.borrow() {
        if client.is_none() {
            replica = (replica + 1) % kubeconfigs.len().max(1);
            if let Some(k) = kubeconfigs.get(replica) {
                client = hub_client(k).await;
            }
        }
        let Some(c) = client.clone() else {
            pause(&mut stop, Duration::from_millis(500)).await;
            continue;
        };
        let api: Api<ConfigMap> = Api::namespaced(c, NAMESPACE);
        let existing = ledger.lock().maybe_present();
        next += 1;
        let value = next.to_string();
        let roll: f64 = rng.random();
        let (name, wrote, outcome) = if existing.is_empty() || roll < 0.45 {
            let name = format!("t{next}");
            let cm: ConfigMap = serde_json::from_value(json!({
                "metadata": {"name": name, "labels": {LABEL: "true"}},
                "data": {"v": value}}))
            .unwrap_or_default();
            let r = api.create(&PostParams::default(), &cm).await.map(|_| ());
            (name, Some(value), r)
        } else {
            let name = existing[rng.random_range(0..existing.len())].clone();
            if roll < 0.85 {
                let patch = json!({"data": {"v": value}});
                let r = api
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map(|_| ());
                (name, Some(value), r)
            } else {
                let r = api
                    .delete(&name, &DeleteParams::default())
                    .await
                    .map(|_| ());
                (name, None, r)
            }
        };
        if !record(&ledger, &name, wrote, outcome, &mut done) {
            client = None;
        }
        pause(&mut stop, Duration::from_millis(100)).await;
    }
    done
}

/// Writes a write's outcome to the ledger; false when the server did not
/// answer (its client is made anew).
pub(super) fn record(
    ledger: &Mutex<Ledger>,
    name: &str,
    wrote: Option<String>,
    outcome: Result<(), kube::Error>,
    done: &mut Done,
) -> bool {
    let mut l = ledger.lock();
    match outcome {
        Ok(()) => {
            l.acked(name, wrote);
            done.acknowledged += 1;
        }
        // Answered: it is not there. Acknowledged present with nothing
        // unsure since, it was lost.
        Err(kube::Error::Api(e)) if e.code == 404 => {
            if let Some(Some(v)) = l.known(name) {
                done.vanished.push(format!(
                    "template {name}: acknowledged v={v}, then the hub answered 404"
                ));
            }
            l.acked(name, None);
        }
        // Answered with a refusal (a conflict, the hub not ready yet):
        // nothing written.
        Err(kube::Error::Api(e)) if e.code < 500 || e.code == 503 => {}
        // No answer, or a failure mid-way: it may have been written.
        Err(_) => {
            l.unsure(name, wrote);
            done.unsure += 1;
            return false;
        }
    }
    true
}

async fn pause(stop: &mut watch::Receiver<bool>, d: Duration) {
    let _ = tokio::time::timeout(d, stop.changed()).await;
}

/// A client of the hub that gives up on a stopped hub within seconds.
pub async fn hub_client(kubeconfig: &std::path::Path) -> Option<kube::Client> {
    let file = kube::config::Kubeconfig::read_from(kubeconfig).ok()?;
    let mut config =
        kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
            .await
            .ok()?;
    config.connect_timeout = Some(Duration::from_secs(2));
    config.read_timeout = Some(Duration::from_secs(5));
    config.write_timeout = Some(Duration::from_secs(5));
    kube::Client::try_from(config).ok()
}
