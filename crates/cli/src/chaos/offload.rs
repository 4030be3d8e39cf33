//! Offloaded pods under chaos: the first member peers with the second
//! (Liqo's model: the second lends its capacity through a virtual node),
//! a namespace of the first is offloaded there, and the load creates and
//! deletes pods in it through the first member's API. Once converged,
//! every acknowledged pod runs, once: one ShadowPod and one pod in the
//! provider's twin namespace each, none for a pod that is gone.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::{Client, ResourceExt};
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use tokio::sync::watch;

use flotilla_peering::api::{OFFLOADING_GROUP, ShadowPod};

use super::ledger::{Ledger, Value};
use super::load::{Done, record};

/// The consumer's offloaded namespace.
pub const NAMESPACE: &str = "chaos-offload";
const PRESENT: &str = "present";

/// The two members of the peering.
pub struct Peering {
    pub consumer: String,
    pub consumer_kubeconfig: PathBuf,
    pub provider_kubeconfig: PathBuf,
}

impl Peering {
    /// The provider's twin of [`NAMESPACE`] (Liqo's DefaultName: the
    /// namespace and the consumer's cluster ID).
    fn twin(&self) -> String {
        format!("{NAMESPACE}-{}", self.consumer)
    }
}

/// Peers the two members and offloads [`NAMESPACE`] (pods Remote).
pub async fn setup(p: &Peering) -> anyhow::Result<()> {
    let out = tokio::process::Command::new(std::env::current_exe()?)
        .arg("peer")
        .arg("--kubeconfig")
        .arg(&p.consumer_kubeconfig)
        .arg("--remote-kubeconfig")
        .arg(&p.provider_kubeconfig)
        .args(["--timeout", "60s"])
        .output()
        .await
        .context("cannot run flotilla peer")?;
    if !out.status.success() {
        bail!(
            "flotilla peer failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let manifests = format!(
        r#"
apiVersion: v1
kind: Namespace
metadata: {{name: {NAMESPACE}}}
---
apiVersion: offloading.liqo.io/v1beta1
kind: NamespaceOffloading
metadata: {{name: offloading, namespace: {NAMESPACE}}}
spec:
  namespaceMappingStrategy: DefaultName
  podOffloadingStrategy: Remote
  clusterSelector: {{nodeSelectorTerms: []}}
"#
    );
    super::apply(&p.consumer_kubeconfig, &manifests).await?;
    let client = crate::kubeconfig::client(&p.consumer_kubeconfig).await?;
    let offloading = flotilla_peering::consumer::offloading::resource(OFFLOADING_GROUP);
    let api: Api<DynamicObject> = Api::namespaced_with(client, NAMESPACE, &offloading);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let phase = api
            .get_opt("offloading")
            .await
            .ok()
            .flatten()
            .and_then(|o| {
                o.data["status"]["offloadingPhase"]
                    .as_str()
                    .map(str::to_string)
            });
        if phase.as_deref() == Some("Ready") {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("namespace {NAMESPACE} was not offloaded within 60 s (phase {phase:?})");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Creates and deletes pods in the offloaded namespace until `stop`.
pub async fn drive(
    p: Arc<Peering>,
    seed: u64,
    ledger: Arc<Mutex<Ledger>>,
    mut stop: watch::Receiver<bool>,
) -> Done {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x0ff1);
    let mut done = Done::default();
    let mut next = 0u64;
    while !*stop.borrow() {
        let Some(client) = super::load::hub_client(&p.consumer_kubeconfig).await else {
            let _ = tokio::time::timeout(Duration::from_millis(500), stop.changed()).await;
            continue;
        };
        let api: Api<Pod> = Api::namespaced(client, NAMESPACE);
        let present = ledger.lock().maybe_present();
        next += 1;
        let (name, wrote, outcome): (String, Value, Result<(), kube::Error>) =
            if present.len() < 3 || (present.len() < 12 && rng.random_bool(0.6)) {
                let name = format!("p{next}");
                let pod: Pod = serde_json::from_value(json!({
                    "metadata": {"name": name},
                    "spec": {"containers": [{"name": "c", "image": "busybox",
                        "command": ["sleep", "3600"]}]}}))
                .unwrap_or_default();
                let r = api.create(&PostParams::default(), &pod).await.map(|_| ());
                (name, Some(PRESENT.to_string()), r)
            } else {
                let name = present[rng.random_range(0..present.len())].clone();
                let r = api
                    .delete(&name, &DeleteParams::default())
                    .await
                    .map(|_| ());
                (name, None, r)
            };
        record(&ledger, &name, wrote, outcome, &mut done);
        let _ = tokio::time::timeout(Duration::from_millis(700), stop.changed()).await;
    }
    done
}

/// The invariants of the offloaded pods: each as the ledger allows,
/// Running, with one ShadowPod and one pod in the provider; none there
/// for a pod that is gone.
pub async fn violations(p: &Peering, ledger: &Ledger) -> Vec<String> {
    let mut out = Vec::new();
    let (Some(consumer), Some(provider)) = (
        super::load::hub_client(&p.consumer_kubeconfig).await,
        super::load::hub_client(&p.provider_kubeconfig).await,
    ) else {
        return vec!["the peered members' kubeconfigs cannot be read".into()];
    };
    let local = match pods(&consumer, NAMESPACE).await {
        Ok(l) => l,
        Err(e) => return vec![format!("{}: does not answer: {e}", p.consumer)],
    };
    // A pod being deleted is gone as far as the ledger goes.
    let present: BTreeMap<String, String> = local
        .iter()
        .filter(|(_, (_, deleting))| !deleting)
        .map(|(n, _)| (n.clone(), PRESENT.to_string()))
        .collect();
    for v in super::ledger::templates_violations(ledger, &present) {
        out.push(format!("offloaded {}", v.trim_start_matches("template ")));
    }
    for (name, (phase, deleting)) in &local {
        if *deleting {
            out.push(format!("offloaded pod {name}: still being deleted"));
        } else if phase != "Running" {
            out.push(format!("offloaded pod {name}: {phase}, not Running"));
        }
    }
    let twin = p.twin();
    let remote = match pods(&provider, &twin).await {
        Ok(r) => r,
        Err(e) => return [out, vec![format!("the provider does not answer: {e}")]].concat(),
    };
    let shadows = match shadow_pods(&provider, &twin).await {
        Ok(s) => s,
        Err(e) => return [out, vec![format!("the provider does not answer: {e}")]].concat(),
    };
    for name in present.keys() {
        if !remote.contains_key(name) {
            out.push(format!(
                "offloaded pod {name}: no pod in the provider's {twin}"
            ));
        }
        if !shadows.contains(name) {
            out.push(format!(
                "offloaded pod {name}: no ShadowPod in the provider's {twin}"
            ));
        }
    }
    for name in remote.keys() {
        if !present.contains_key(name) {
            out.push(format!(
                "provider's {twin}: pod {name} left for a pod that is gone"
            ));
        }
    }
    for name in &shadows {
        if !present.contains_key(name) {
            out.push(format!(
                "provider's {twin}: ShadowPod {name} left for a pod that is gone"
            ));
        }
    }
    out
}

/// Pods of `ns`: name → (phase, being deleted).
async fn pods(client: &Client, ns: &str) -> Result<BTreeMap<String, (String, bool)>, kube::Error> {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    Ok(api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .map(|p| {
            let phase = p
                .status
                .as_ref()
                .and_then(|s| s.phase.clone())
                .unwrap_or_default();
            let deleting = p.metadata.deletion_timestamp.is_some();
            (p.name_any(), (phase, deleting))
        })
        .collect())
}

async fn shadow_pods(client: &Client, ns: &str) -> Result<Vec<String>, kube::Error> {
    let api: Api<ShadowPod> = Api::namespaced(client.clone(), ns);
    Ok(api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .map(|s| s.name_any())
        .collect())
}

/// Where the peering's members' kubeconfigs are.
pub fn peering(dir: &Path, members: &[(String, bool)]) -> Option<Peering> {
    let consumer = members.first()?;
    let provider = members.get(1)?;
    Some(Peering {
        consumer: consumer.0.clone(),
        consumer_kubeconfig: dir.join(&consumer.0).join("kubeconfig"),
        provider_kubeconfig: dir.join(&provider.0).join("kubeconfig"),
    })
}
