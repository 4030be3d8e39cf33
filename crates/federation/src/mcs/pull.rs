//! Multi-cluster services for Pull members, which the hub cannot reach.
//! They take part through Works in their execution namespace, the one
//! channel their agent's token allows, as Karmada's agent reports a
//! member's EndpointSlices:
//!
//! - Up: the agent keeps one *report* Work per ServiceExport in its member
//!   (`mcs-export.NS.NAME`), holding the export, its Service and the
//!   Service's EndpointSlices. Reports carry Karmada's
//!   `propagation.karmada.io/instruction: suppressed`, so no execution
//!   controller applies them. The hub reads a Pull member's exports,
//!   Services and slices from them ([`follow_reports`]) as it reads a
//!   Push member's from its API, and writes the export's conditions into
//!   the report's status; the agent copies them onto the member's export.
//! - Down: the hub writes what a consumer gets (the ServiceImport and its
//!   EndpointSlices, or a MultiClusterService's export) as ordinary Works,
//!   which the agent's execution controller applies and removes like any.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Patch, PatchParams};
use kube::runtime::reflector::{self, ObjectRef, Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use super::api::{self, ServiceExport};
use crate::api::{Cluster, WORK_GROUP, Work};
use crate::error::Error;
use crate::queue::WorkQueue;

/// Karmada's label for a Work no execution controller applies.
pub const INSTRUCTION_LABEL: &str = "propagation.karmada.io/instruction";
pub const SUPPRESSED: &str = "suppressed";
/// Marks a Pull member's report of one ServiceExport.
pub const REPORT_LABEL: &str = "mcs.flotilla.io/report";
/// A Pull member's cluster id (KEP-2149), set on its Cluster by its agent.
pub const CLUSTER_ID_ANNOTATION: &str = "mcs.flotilla.io/cluster-id";
/// Report Works' names begin so; the agent may delete only these.
pub const REPORT_PREFIX: &str = "mcs-export.";
const AGENT_MANAGER: &str = "flotilla-agent-mcs";
const RETRY: Duration = Duration::from_secs(5);

/// The Work carrying `role` (`export`, `import`, `front`) of one service.
/// Namespaces and Service names are DNS labels, without dots, so the
/// name is unambiguous.
pub fn work_name(role: &str, ns: &str, name: &str) -> String {
    format!("mcs-{role}.{ns}.{name}")
}

/// The service a report Work is about.
fn reported_service(work: &Work) -> Option<String> {
    let rest = work.metadata.name.as_deref()?.strip_prefix(REPORT_PREFIX)?;
    let (ns, name) = rest.split_once('.')?;
    Some(format!("{ns}/{name}"))
}

pub fn is_suppressed(work: &Work) -> bool {
    work.labels().get(INSTRUCTION_LABEL).map(String::as_str) == Some(SUPPRESSED)
}

/// A Work's body for server-side apply.
pub fn work_body(
    namespace: &str,
    name: &str,
    labels: BTreeMap<&str, &str>,
    manifests: &[Value],
) -> Value {
    json!({
        "apiVersion": format!("{WORK_GROUP}/v1alpha1"),
        "kind": "Work",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"workload": {"manifests": manifests}},
    })
}

/// Whether `have` already carries exactly `manifests`.
pub fn carries(have: Option<&Work>, manifests: &[Value]) -> bool {
    have.is_some_and(|w| w.spec.workload.parsed() == manifests)
}

/// What the hub sees of a Pull member: its reports, and the exports,
/// Services and slices decoded from them, kept current by one task.
pub struct Reports {
    pub works: Store<Work>,
    pub exports: Store<ServiceExport>,
    pub services: Store<Service>,
    pub slices: Store<EndpointSlice>,
    pub task: JoinHandle<()>,
}

/// Follows `cluster`'s reports, queueing the service of each change.
pub fn follow_reports(hub: &Client, cluster: &str, queue: Arc<WorkQueue<String>>) -> Reports {
    let namespace = Cluster::execution_namespace(cluster);
    let api: Api<Work> = Api::namespaced(hub.clone(), &namespace);
    let config = watcher::Config::default().labels(REPORT_LABEL);
    let (works, writer) = reflector::store();
    let mut exports_w: Writer<ServiceExport> = Writer::default();
    let mut services_w: Writer<Service> = Writer::default();
    let mut slices_w: Writer<EndpointSlice> = Writer::default();
    let (exports, services, slices) = (
        exports_w.as_reader(),
        services_w.as_reader(),
        slices_w.as_reader(),
    );
    let reader = works.clone();
    let task = tokio::spawn(async move {
        let events = reflector::reflector(writer, watcher(api, config)).default_backoff();
        let mut events = std::pin::pin!(events);
        let mut listed = false;
        while let Some(event) = events.next().await {
            let touched = match event {
                Ok(watcher::Event::Apply(w) | watcher::Event::Delete(w)) => Some(w),
                Ok(watcher::Event::InitDone) => {
                    listed = true;
                    None
                }
                _ => continue,
            };
            if !listed {
                continue;
            }
            // Reports are few (one per exported service): decode them all.
            let mut exports = Vec::new();
            let mut services = Vec::new();
            let mut slices = Vec::new();
            for w in works.state() {
                decode_report(&w, &mut exports, &mut services, &mut slices);
            }
            replace(&mut exports_w, exports);
            replace(&mut services_w, services);
            replace(&mut slices_w, slices);
            match touched.as_ref().and_then(reported_service) {
                Some(key) => queue.add(key),
                None => queue.add_all(works.state().iter().filter_map(|w| reported_service(w))),
            }
        }
    });
    Reports {
        works: reader,
        exports,
        services,
        slices,
        task,
    }
}

fn replace<K>(writer: &mut Writer<K>, objects: Vec<K>)
where
    K: Resource<DynamicType = ()> + Clone,
{
    writer.apply_watcher_event(&watcher::Event::Init);
    for o in objects {
        writer.apply_watcher_event(&watcher::Event::InitApply(o));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
}

fn decode_report(
    work: &Work,
    exports: &mut Vec<ServiceExport>,
    services: &mut Vec<Service>,
    slices: &mut Vec<EndpointSlice>,
) {
    let conditions = work
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    for m in work.spec.workload.parsed() {
        match m.get("kind").and_then(Value::as_str) {
            Some("ServiceExport") => {
                if let Ok(mut e) = serde_json::from_value::<ServiceExport>(m) {
                    // The conditions the hub last wrote for it.
                    e.status = Some(api::ServiceExportStatus {
                        conditions: conditions.clone(),
                    });
                    exports.push(e);
                }
            }
            Some("Service") => services.extend(serde_json::from_value::<Service>(m).ok()),
            Some("EndpointSlice") => slices.extend(serde_json::from_value::<EndpointSlice>(m).ok()),
            _ => {}
        }
    }
}

/// The hub's side of a Pull member's export status: into its report.
pub async fn write_report_status(
    hub: &Client,
    cluster: &str,
    ns: &str,
    name: &str,
    conditions: &[Condition],
) -> Result<(), Error> {
    let api: Api<Work> = Api::namespaced(hub.clone(), &Cluster::execution_namespace(cluster));
    let patch = json!({"status": {"conditions": conditions}});
    match api
        .patch_status(
            &work_name("export", ns, name),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        // The export went meanwhile; its report with it.
        Err(e) if crate::error::is_not_found(&e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The agent's side: keeps its member's exports reported, and their
/// conditions as the hub decided them, for ever.
pub async fn report(hub: Client, member: Client, cluster: String) {
    loop {
        if let Err(error) = run_reporter(&hub, &member, &cluster).await {
            warn!(%error, %cluster, "cannot report the member's service exports; retrying");
        }
        tokio::time::sleep(RETRY).await;
    }
}

struct Reporter {
    hub: Api<Work>,
    member: Client,
    namespace: String,
    exports: Store<ServiceExport>,
    services: Store<Service>,
    slices: Store<EndpointSlice>,
    reports: Store<Work>,
}

async fn run_reporter(hub: &Client, member: &Client, cluster: &str) -> Result<(), Error> {
    flotilla_client::crd::install(member, api::crds()).await?;
    let id = super::members::cluster_id(member, cluster).await?;
    // The hub names this member's endpoints by its cluster id.
    Api::<Cluster>::all(hub.clone())
        .patch(
            cluster,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {CLUSTER_ID_ANNOTATION: id}}})),
        )
        .await?;
    let queue = WorkQueue::new();
    let namespace = Cluster::execution_namespace(cluster);
    let all = watcher::Config::default;
    let (exports, a) = super::members::follow(
        Api::all(member.clone()),
        all(),
        queue.clone(),
        super::members::key_of,
    );
    let (services, b) = super::members::follow(
        Api::all(member.clone()),
        all(),
        queue.clone(),
        super::members::key_of,
    );
    let (slices, c) = super::members::follow(
        Api::all(member.clone()),
        all(),
        queue.clone(),
        super::members::slice_service_key,
    );
    let (reports, d) = super::members::follow(
        Api::namespaced(hub.clone(), &namespace),
        all().labels(REPORT_LABEL),
        queue.clone(),
        reported_service,
    );
    let tasks = [a, b, c, d];
    let reporter = Arc::new(Reporter {
        hub: Api::namespaced(hub.clone(), &namespace),
        member: member.clone(),
        namespace,
        exports,
        services,
        slices,
        reports,
    });
    info!(%cluster, %id, "reporting the member's service exports to the hub");
    let work = queue.clone().run(2, move |key: String| {
        let reporter = reporter.clone();
        let queue = queue.clone();
        async move {
            if let Err(error) = reporter.sync(&key).await {
                warn!(%error, service = %key, "cannot report the export; retrying");
                queue.add_after(key, Duration::from_secs(2));
            }
        }
    });
    work.await;
    for t in tasks {
        t.abort();
    }
    Err(Error::Mcs("the report queue stopped".into()))
}

impl Reporter {
    async fn sync(&self, key: &str) -> Result<(), Error> {
        let Some((ns, name)) = key.split_once('/') else {
            return Ok(());
        };
        let work_name = work_name("export", ns, name);
        let report = self
            .reports
            .get(&ObjectRef::new(&work_name).within(&self.namespace));
        let export = self
            .exports
            .get(&ObjectRef::new(name).within(ns))
            .filter(|e| e.metadata.deletion_timestamp.is_none());
        let Some(export) = export else {
            if report.is_some() {
                super::delete(&self.hub, &work_name).await?;
                info!(service = %key, "export gone: report withdrawn");
            }
            return Ok(());
        };
        let mut manifests = vec![strip(serde_json::to_value(&*export)?, "ServiceExport")];
        if let Some(s) = self.services.get(&ObjectRef::new(name).within(ns)) {
            manifests.push(strip(serde_json::to_value(&*s)?, "Service"));
        }
        let mut own: Vec<Value> = super::imports::own_slices(&self.slices, ns, name)
            .iter()
            .filter_map(|s| serde_json::to_value(&**s).ok())
            .map(|v| strip(v, "EndpointSlice"))
            .collect();
        own.sort_by_key(|v| v["metadata"]["name"].as_str().map(str::to_string));
        manifests.extend(own);
        if !carries(report.as_deref(), &manifests) {
            let labels = BTreeMap::from([(INSTRUCTION_LABEL, SUPPRESSED), (REPORT_LABEL, "true")]);
            let body = work_body(&self.namespace, &work_name, labels, &manifests);
            self.hub
                .patch(
                    &work_name,
                    &PatchParams::apply(AGENT_MANAGER).force(),
                    &Patch::Apply(&body),
                )
                .await?;
            debug!(service = %key, "export reported");
        }
        // The hub's verdict on the export, copied onto it.
        let decided = report
            .and_then(|r| r.status.as_ref().map(|s| s.conditions.clone()))
            .unwrap_or_default();
        let have = export
            .status
            .as_ref()
            .map(|s| s.conditions.clone())
            .unwrap_or_default();
        if !decided.is_empty() && decided != have {
            Api::<ServiceExport>::namespaced(self.member.clone(), ns)
                .patch_status(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(&json!({"status": {"conditions": decided}})),
                )
                .await?;
        }
        Ok(())
    }
}

/// What the hub needs of a member object: no status (it decides the
/// export's), no bookkeeping that changes on every write.
fn strip(mut v: Value, kind: &str) -> Value {
    if let Some(o) = v.as_object_mut() {
        o.insert("kind".into(), kind.into());
        o.insert(
            "apiVersion".into(),
            match kind {
                "ServiceExport" => format!("{}/v1alpha1", api::GROUP).into(),
                "EndpointSlice" => "discovery.k8s.io/v1".into(),
                _ => "v1".into(),
            },
        );
        if kind != "EndpointSlice" {
            o.remove("status");
        }
        if let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) {
            for field in ["managedFields", "resourceVersion", "generation"] {
                m.remove(field);
            }
        }
    }
    v
}

use super::imports::{import_manifest, wanted_slices};
use super::{MANAGER, Mcs, Member, delete, merge};
use crate::mcs::api::{MANAGED_BY, MANAGED_BY_LABEL, ServiceImportSpec};

impl Mcs {
    /// A Pull consumer's import and slices, as one Work its agent applies.
    /// Its slices carry no owner: the Work's removal takes them.
    pub(super) async fn write_pull_import(
        &self,
        m: &Member,
        ns: &str,
        name: &str,
        spec: &ServiceImportSpec,
        import: &merge::Import,
        sources: &BTreeMap<&str, &Member>,
    ) -> Result<(), Error> {
        let mut manifests = vec![import_manifest(ns, name, spec, import)];
        for slice in wanted_slices(ns, name, sources, Some(&m.id), None) {
            let mut body = serde_json::to_value(&slice)?;
            body["apiVersion"] = "discovery.k8s.io/v1".into();
            body["kind"] = "EndpointSlice".into();
            manifests.push(body);
        }
        self.write_pull_work(&m.name, work_name("import", ns, name), &manifests)
            .await
    }

    /// Writes a Work for a Pull member unless it already says `manifests`.
    pub(super) async fn write_pull_work(
        &self,
        cluster: &str,
        work: String,
        manifests: &[serde_json::Value],
    ) -> Result<(), Error> {
        let namespace = Cluster::execution_namespace(cluster);
        let have = self
            .ctx
            .works
            .get(&ObjectRef::new(&work).within(&namespace));
        if carries(have.as_deref(), manifests) {
            return Ok(());
        }
        let labels = BTreeMap::from([(MANAGED_BY_LABEL, MANAGED_BY)]);
        let body = work_body(&namespace, &work, labels, manifests);
        Api::<Work>::namespaced(self.ctx.hub.clone(), &namespace)
            .patch(
                &work,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(&body),
            )
            .await?;
        Ok(())
    }

    /// Removes a Pull member's Work, if there is one.
    pub(super) async fn delete_pull_work(&self, cluster: &str, work: &str) -> Result<(), Error> {
        let namespace = Cluster::execution_namespace(cluster);
        if self
            .ctx
            .works
            .get(&ObjectRef::new(work).within(&namespace))
            .is_none()
        {
            return Ok(());
        }
        delete(
            &Api::<Work>::namespaced(self.ctx.hub.clone(), &namespace),
            work,
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_names_round_trip_and_do_not_collide() {
        let w = |ns: &str, name: &str| {
            let mut work = Work::new(&work_name("export", ns, name), Default::default());
            work.metadata.namespace = Some("karmada-es-m".into());
            reported_service(&work)
        };
        assert_eq!(w("a-b", "c").as_deref(), Some("a-b/c"));
        assert_eq!(w("a", "b-c").as_deref(), Some("a/b-c"));
        assert_ne!(
            work_name("export", "a-b", "c"),
            work_name("export", "a", "b-c")
        );
        assert!(work_name("export", "ns", "svc").starts_with(REPORT_PREFIX));
    }
}
