//! The probe pods `flotilla network verify` and `benchmark` share: a
//! uniquely named namespace per member (so runs never collide and one
//! delete cleans up), a stand-in server (Deployment, Service and, when
//! asked, ServiceExport), a `sleep` client to exec curl and getent in,
//! readiness waits with deadlines, and cleanup.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use flotilla_core::mcs::{ServiceExport, ServiceImport};
use flotilla_fabric::api::{self as fabric, BROKER_NAMESPACE, Cluster as BrokerCluster, Gateway};
use flotilla_federation::api::Cluster;
use flotilla_federation::members::Members;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, HTTPGetAction, Namespace, Node, Pod, PodSpec, PodTemplateSpec, Probe,
    Service, ServicePort, ServiceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{AttachParams, DeleteParams, ListParams, PostParams};
use kube::{Api, ResourceExt};
use tokio::io::AsyncReadExt;

use super::show;
use crate::inspect::{HubArgs, member_client};

/// The port the stand-in server listens on, and its Service's port.
pub const SERVER_PORT: u16 = 8080;
pub const SERVICE_PORT: u16 = 80;
/// The label the probes are selected by.
const APP_LABEL: &str = "app";

/// One member of the fleet, as the probes reach it.
pub struct Member {
    pub name: String,
    pub cluster: Cluster,
    pub client: kube::Client,
}

/// Where a probe's lines go: stdout as they come (the CLI), or kept
/// for an answer (the hub's NetworkReview).
pub struct Report(Option<parking_lot::Mutex<String>>);

impl Report {
    pub fn stdout() -> Report {
        Report(None)
    }

    pub fn kept() -> Report {
        Report(Some(parking_lot::Mutex::new(String::new())))
    }

    pub fn say(&self, line: impl AsRef<str>) {
        match &self.0 {
            None => println!("{}", line.as_ref()),
            Some(kept) => {
                let mut kept = kept.lock();
                kept.push_str(line.as_ref());
                kept.push('\n');
            }
        }
    }

    /// What was kept.
    pub fn text(&self) -> String {
        self.0
            .as_ref()
            .map(|k| k.lock().clone())
            .unwrap_or_default()
    }
}

/// The hub and the two members a probe runs between.
pub struct Fleet {
    pub hub: kube::Client,
    /// The kubeconfig's contexts reach Pull members (the CLI's); `None`
    /// on the hub itself, which reaches Push members only.
    pub hub_args: Option<HubArgs>,
    pub members: Members,
    pub from: Member,
    pub to: Member,
}

impl Fleet {
    /// Finds `from` and `to` on `hub` and reaches both.
    pub async fn connect(
        hub: kube::Client,
        hub_args: Option<HubArgs>,
        from: &str,
        to: &str,
    ) -> anyhow::Result<Fleet> {
        if from == to {
            bail!("--from and --to are both {from}: name two different clusters");
        }
        let clusters = show::clusters(&hub, &[from.to_string(), to.to_string()]).await?;
        let members = Members::new(hub.clone());
        let from = reach(hub_args.as_ref(), &members, &clusters, from).await?;
        let to = reach(hub_args.as_ref(), &members, &clusters, to).await?;
        Ok(Fleet {
            hub,
            hub_args,
            members,
            from,
            to,
        })
    }

    /// As `connect`, with the kubeconfig of `hub_args` (the CLI's).
    pub async fn from_kubeconfig(
        hub_args: &HubArgs,
        from: &str,
        to: &str,
    ) -> anyhow::Result<Fleet> {
        Fleet::connect(hub_args.client().await?, Some(hub_args.clone()), from, to).await
    }

    /// The broker's record of `member`'s networks (its global CIDR tells
    /// whether it uses Globalnet), if its gateway has published one.
    pub async fn broker_cluster(&self, member: &Member) -> Option<BrokerCluster> {
        Api::<BrokerCluster>::namespaced(self.hub.clone(), BROKER_NAMESPACE)
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|c| c.spec.cluster_id == member.name)
    }

    /// Whether `member` uses Globalnet (its pod IPs are then not
    /// routable from other clusters).
    pub async fn globalnet(&self, member: &Member) -> bool {
        self.broker_cluster(member)
            .await
            .is_some_and(|c| !c.spec.global_cidr.is_empty())
    }

    /// `member`'s Gateway objects, or why they cannot be read.
    pub async fn gateways(&self, member: &Member) -> Result<Vec<Gateway>, String> {
        show::gateways(self.hub_args.as_ref(), &self.members, &member.cluster).await
    }
}

async fn reach(
    hub_args: Option<&HubArgs>,
    members: &Members,
    clusters: &[Cluster],
    name: &str,
) -> anyhow::Result<Member> {
    let Some(cluster) = clusters.iter().find(|c| c.name_any() == name) else {
        bail!("no cluster {name} in the fleet: `flotilla clusters` lists them");
    };
    let client = member_client(hub_args, members, cluster)
        .await
        .map_err(|why| anyhow::anyhow!("cannot reach {name}: {why}"))?;
    Ok(Member {
        name: name.to_string(),
        cluster: cluster.clone(),
        client,
    })
}

/// The node of a member's active gateway (Gateways are named after
/// their node), if it has one.
pub fn active_gateway_node(gateways: &[Gateway]) -> Option<String> {
    gateways
        .iter()
        .find(|g| g.status.ha_status == "active")
        .map(|g| g.name_any())
}

/// A member's nodes, sorted by name.
pub async fn nodes(member: &Member) -> anyhow::Result<Vec<String>> {
    let mut names: Vec<String> = Api::<Node>::all(member.client.clone())
        .list(&ListParams::default())
        .await
        .with_context(|| format!("cannot list {}'s nodes", member.name))?
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    names.sort();
    Ok(names)
}

/// The first of `nodes` not in `avoid`, as subctl puts its probes on
/// non-gateway nodes; None (let the scheduler pick) when every node is.
pub fn node_other_than(nodes: &[String], avoid: &[Option<&str>]) -> Option<String> {
    nodes
        .iter()
        .find(|n| !avoid.contains(&Some(n.as_str())))
        .cloned()
}

/// A DNS-label-safe random suffix: the run's namespaces must not collide
/// with another run's (or a kept one's).
pub fn random_suffix() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    h.write_u32(std::process::id());
    let mut n = h.finish();
    let mut s = String::new();
    for _ in 0..6 {
        s.push(char::from(
            b"0123456789abcdefghijklmnopqrstuvwxyz"[(n % 36) as usize],
        ));
        n /= 36;
    }
    s
}

/// The namespaces a run made, so every exit path can delete them.
/// Shared (behind a lock) so the cleanup guard and the run's body can
/// both hold it.
#[derive(Default)]
pub struct Namespaces {
    made: parking_lot::Mutex<Vec<(String, kube::Client, String)>>,
}

impl Namespaces {
    /// Creates `name` in `member` and remembers it for [`Self::delete_all`].
    pub async fn create(&self, member: &Member, name: &str) -> anyhow::Result<()> {
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(labels("flotilla-network-probe")),
                ..Default::default()
            },
            ..Default::default()
        };
        Api::<Namespace>::all(member.client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .with_context(|| format!("cannot create namespace {name} in {}", member.name))?;
        self.made
            .lock()
            .push((member.name.clone(), member.client.clone(), name.into()));
        Ok(())
    }

    /// Deletes every namespace made, reporting each; a failure is
    /// reported, not fatal (the others still go).
    pub async fn delete_all(&self, report: &Report) {
        let made = std::mem::take(&mut *self.made.lock());
        for (member, client, name) in made {
            match Api::<Namespace>::all(client)
                .delete(&name, &DeleteParams::background())
                .await
            {
                Ok(_) => report.say(format!(" ✓ Deleted namespace {name} in {member}")),
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => report.say(format!(
                    " ✗ Cannot delete namespace {name} in {member} ({e}): delete it with `kubectl --context {member} delete namespace {name}`"
                )),
            }
        }
    }

    /// Names what --keep leaves behind.
    pub fn describe(&self) -> String {
        self.made
            .lock()
            .iter()
            .map(|(member, _, name)| format!("{name} in {member}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

fn labels(app: &str) -> BTreeMap<String, String> {
    [(APP_LABEL.to_string(), app.to_string())].into()
}

/// The stand-in server: a Deployment of one replica (the container has
/// no command, so the member runs its stand-in HTTP workload on
/// [`SERVER_PORT`]), its Service on [`SERVICE_PORT`] and, if `export`,
/// its ServiceExport.
pub async fn create_server(
    member: &Member,
    namespace: &str,
    name: &str,
    node: Option<&str>,
    export: bool,
) -> anyhow::Result<()> {
    let client = member.client.clone();
    let health = Probe {
        http_get: Some(HTTPGetAction {
            path: Some("/health".into()),
            port: IntOrString::Int(SERVER_PORT.into()),
            ..Default::default()
        }),
        period_seconds: Some(1),
        ..Default::default()
    };
    let deployment = Deployment {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            ..Default::default()
        },
        spec: Some(DeploymentSpec {
            replicas: Some(1),
            selector: LabelSelector {
                match_labels: Some(labels(name)),
                ..Default::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels(name)),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    node_name: node.map(str::to_string),
                    containers: vec![Container {
                        name: "server".into(),
                        image: Some("flotilla.io/standin".into()),
                        ports: Some(vec![ContainerPort {
                            container_port: SERVER_PORT.into(),
                            ..Default::default()
                        }]),
                        readiness_probe: Some(health),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        ..Default::default()
    };
    Api::<Deployment>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &deployment)
        .await
        .with_context(|| format!("cannot create deployment {name} in {}", member.name))?;
    let service = Service {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            selector: Some(labels(name)),
            ports: Some(vec![ServicePort {
                name: Some("http".into()),
                port: SERVICE_PORT.into(),
                target_port: Some(IntOrString::Int(SERVER_PORT.into())),
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    };
    Api::<Service>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &service)
        .await
        .with_context(|| format!("cannot create service {name} in {}", member.name))?;
    if export {
        let export = ServiceExport {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(namespace.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        match Api::<ServiceExport>::namespaced(client, namespace)
            .create(&PostParams::default(), &export)
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => bail!(
                "{} does not serve ServiceExports: join it to the fleet with `flotilla join`, which installs the MCS API",
                member.name
            ),
            Err(e) => {
                return Err(e).with_context(|| {
                    format!("cannot create serviceexport {name} in {}", member.name)
                });
            }
        }
    }
    Ok(())
}

/// The client: a pod sleeping for ever, to exec curl and getent in.
pub async fn create_client(
    member: &Member,
    namespace: &str,
    name: &str,
    node: Option<&str>,
) -> anyhow::Result<()> {
    let pod = Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            labels: Some(labels(name)),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: node.map(str::to_string),
            termination_grace_period_seconds: Some(0),
            containers: vec![Container {
                name: "client".into(),
                image: Some("flotilla.io/client".into()),
                command: Some(vec!["sleep".into(), "infinity".into()]),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    };
    Api::<Pod>::namespaced(member.client.clone(), namespace)
        .create(&PostParams::default(), &pod)
        .await
        .with_context(|| format!("cannot create pod {name} in {}", member.name))?;
    Ok(())
}

/// A ready pod: its name, node and IP.
#[derive(Clone, Debug)]
pub struct ReadyPod {
    pub name: String,
    pub node: String,
    pub ip: String,
}

/// Waits until a pod labelled `app=<app>` is Running and Ready, with an
/// IP; at `deadline`, fails naming the state it was stuck in.
pub async fn wait_ready(
    member: &Member,
    namespace: &str,
    app: &str,
    deadline: Instant,
) -> anyhow::Result<ReadyPod> {
    let api: Api<Pod> = Api::namespaced(member.client.clone(), namespace);
    let params = ListParams::default().labels(&format!("{APP_LABEL}={app}"));
    let mut last = "no pod yet".to_string();
    loop {
        match api.list(&params).await {
            Ok(list) => {
                for pod in &list.items {
                    if let Some(ready) = ready(pod) {
                        return Ok(ready);
                    }
                }
                if let Some(pod) = list.items.first() {
                    last = pod_state(pod);
                }
            }
            Err(e) => last = format!("cannot list pods: {e}"),
        }
        if Instant::now() >= deadline {
            bail!(
                "{app} in {} was not ready in time ({last}): see `kubectl --context {} -n {namespace} describe pods -l {APP_LABEL}={app}`",
                member.name,
                member.name
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn ready(pod: &Pod) -> Option<ReadyPod> {
    let status = pod.status.as_ref()?;
    let is_ready = status.phase.as_deref() == Some("Running")
        && status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
    let ip = status.pod_ip.clone().filter(|ip| !ip.is_empty())?;
    is_ready.then(|| ReadyPod {
        name: pod.name_any(),
        node: pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default(),
        ip,
    })
}

/// A pod's phase and its first container's waiting or terminated
/// reason: why it is not ready.
fn pod_state(pod: &Pod) -> String {
    let Some(status) = &pod.status else {
        return format!("pod {} has no status yet", pod.name_any());
    };
    let mut s = format!(
        "pod {} is {}",
        pod.name_any(),
        status.phase.as_deref().unwrap_or("Pending")
    );
    let state = status
        .container_statuses
        .iter()
        .flatten()
        .find_map(|c| c.state.as_ref());
    if let Some(w) = state.and_then(|s| s.waiting.as_ref()) {
        s.push_str(&format!(
            ", waiting: {} {}",
            w.reason.as_deref().unwrap_or_default(),
            w.message.as_deref().unwrap_or_default()
        ));
    } else if let Some(t) = state.and_then(|s| s.terminated.as_ref()) {
        s.push_str(&format!(
            ", terminated: {} (exit code {})",
            t.reason.as_deref().unwrap_or_default(),
            t.exit_code
        ));
    }
    s.trim_end().to_string()
}

/// What a command exec'd in a pod printed, and how it exited.
#[derive(Debug, Default, Clone)]
pub struct Exec {
    pub stdout: String,
    pub stderr: String,
    /// The exit code; -1 when the member did not say.
    pub code: i32,
}

/// Runs `argv` in `pod`'s first container, for at most `limit`.
pub async fn exec(
    member: &Member,
    namespace: &str,
    pod: &str,
    argv: &[String],
    limit: Duration,
) -> anyhow::Result<Exec> {
    let api: Api<Pod> = Api::namespaced(member.client.clone(), namespace);
    let run = async {
        let params = AttachParams::default()
            .stdin(false)
            .stdout(true)
            .stderr(true);
        let mut process = api
            .exec(pod, argv.to_vec(), &params)
            .await
            .with_context(|| format!("cannot exec in pod {pod} of {}", member.name))?;
        let (mut out, mut err) = (process.stdout(), process.stderr());
        let status = process.take_status();
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        let read_out = async {
            if let Some(o) = out.as_mut() {
                let _ = o.read_to_end(&mut stdout).await;
            }
        };
        let read_err = async {
            if let Some(e) = err.as_mut() {
                let _ = e.read_to_end(&mut stderr).await;
            }
        };
        tokio::join!(read_out, read_err);
        let status = match status {
            Some(s) => s.await,
            None => None,
        };
        let _ = process.join().await;
        Ok::<_, anyhow::Error>(Exec {
            stdout: String::from_utf8_lossy(&stdout).into_owned(),
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
            code: status.as_ref().map(exit_code).unwrap_or(-1),
        })
    };
    tokio::time::timeout(limit, run).await.with_context(|| {
        format!(
            "`{}` in pod {pod} of {} did not finish in {}s",
            argv.join(" "),
            member.name,
            limit.as_secs()
        )
    })?
}

/// The exit code in an exec's final Status, as the API server reports it
/// (Success, or a NonZeroExitCode with an ExitCode cause).
pub fn exit_code(status: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Status) -> i32 {
    if status.status.as_deref() == Some("Success") {
        return 0;
    }
    status
        .details
        .as_ref()
        .and_then(|d| d.causes.as_ref())
        .and_then(|causes| {
            causes
                .iter()
                .find(|c| c.reason.as_deref() == Some("ExitCode"))
        })
        .and_then(|c| c.message.as_deref())
        .and_then(|m| m.trim().parse().ok())
        .unwrap_or(-1)
}

/// The longest a connection may take: past it the peer is unreachable,
/// however long the transfer may run.
const CONNECT_TIME: Duration = Duration::from_secs(10);

/// `curl` argv: silent but for errors, bounded in time, with any
/// further options before the URL.
pub fn curl(url: &str, max_time: Duration, extra: &[&str]) -> Vec<String> {
    let secs = max_time.as_secs().max(1);
    let mut argv: Vec<String> = vec![
        "curl".into(),
        "-sS".into(),
        "--connect-timeout".into(),
        secs.min(CONNECT_TIME.as_secs()).to_string(),
        "--max-time".into(),
        secs.to_string(),
    ];
    argv.extend(extra.iter().map(|s| s.to_string()));
    argv.push(url.into());
    argv
}

/// The ClusterSetIP of `to`'s export `name`, as the hub imported it into
/// `from`, waiting up to `timeout`; or why there is none.
pub async fn cluster_set_ip(
    from: &Member,
    to: &Member,
    namespace: &str,
    name: &str,
    timeout: Duration,
) -> Result<String, String> {
    let api: Api<ServiceImport> = Api::namespaced(from.client.clone(), namespace);
    let deadline = Instant::now() + timeout;
    let mut seen = false;
    loop {
        if let Ok(Some(import)) = api.get_opt(name).await {
            seen = true;
            if let Some(ip) = import.spec.ips.first() {
                return Ok(ip.clone());
            }
        }
        if Instant::now() >= deadline {
            let secs = timeout.as_secs();
            return Err(if seen {
                format!(
                    "the ServiceImport {name} in {} has no ClusterSetIP yet after {secs}s (is the hub's MCS controller running? does it have a --clusterset-ip-range?)",
                    from.name
                )
            } else {
                format!(
                    "no ServiceImport {name} in {} after {secs}s: the hub did not import {}'s ServiceExport (is the hub's MCS controller running? `kubectl --context {} -n {namespace} get serviceexport {name} -o yaml` shows its conditions)",
                    from.name, to.name, to.name
                )
            });
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The global IP Globalnet allocated to Service `name`, waiting for it
/// until `deadline`.
pub async fn global_ingress_ip(
    member: &Member,
    namespace: &str,
    name: &str,
    deadline: Instant,
) -> anyhow::Result<String> {
    let api: Api<fabric::GlobalIngressIp> = Api::namespaced(member.client.clone(), namespace);
    loop {
        if let Ok(Some(g)) = api.get_opt(name).await
            && let Some(ip) = g.status.map(|s| s.allocated_ip).filter(|ip| !ip.is_empty())
        {
            return Ok(ip);
        }
        if Instant::now() >= deadline {
            bail!(
                "service {name} in {} has no GlobalIngressIP with an allocatedIP: is {}'s active gateway (its Globalnet controller) running? `flotilla network show gateways`",
                member.name,
                member.name
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A Service's ClusterIP.
pub async fn cluster_ip(member: &Member, namespace: &str, name: &str) -> anyhow::Result<String> {
    let service = Api::<Service>::namespaced(member.client.clone(), namespace)
        .get(name)
        .await
        .with_context(|| format!("cannot read service {name} in {}", member.name))?;
    service
        .spec
        .and_then(|s| s.cluster_ip)
        .filter(|ip| !ip.is_empty() && ip != "None")
        .with_context(|| {
            format!(
                "service {name} in {} has no ClusterIP: is {}'s service CIDR set?",
                member.name, member.name
            )
        })
}

/// Runs `body`, then deletes the run's namespaces (unless `keep`), also
/// when `body` fails or the user presses Ctrl-C.
pub async fn with_cleanup<T>(
    namespaces: &Namespaces,
    keep: bool,
    report: &Report,
    body: impl Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    let result = tokio::select! {
        r = body => r,
        _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted (Ctrl-C)")),
    };
    if keep {
        let kept = namespaces.describe();
        if !kept.is_empty() {
            report.say(format!(
                " • Kept namespace(s) {kept} (--keep): delete them when done"
            ));
        }
    } else {
        namespaces.delete_all(report).await;
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Status, StatusCause, StatusDetails};

    #[test]
    fn exit_codes_come_from_the_status() {
        let ok = Status {
            status: Some("Success".into()),
            ..Default::default()
        };
        assert_eq!(exit_code(&ok), 0);
        let failed = Status {
            status: Some("Failure".into()),
            reason: Some("NonZeroExitCode".into()),
            details: Some(StatusDetails {
                causes: Some(vec![StatusCause {
                    reason: Some("ExitCode".into()),
                    message: Some("28".into()),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(exit_code(&failed), 28);
        assert_eq!(exit_code(&Status::default()), -1);
    }

    #[test]
    fn probes_avoid_the_gateway_node() {
        let nodes = vec!["east-n0".to_string(), "east-n1".to_string()];
        assert_eq!(
            node_other_than(&nodes, &[Some("east-n0")]).as_deref(),
            Some("east-n1")
        );
        assert_eq!(node_other_than(&nodes, &[None]).as_deref(), Some("east-n0"));
        assert_eq!(
            node_other_than(&nodes, &[Some("east-n0"), Some("east-n1")]),
            None
        );
    }

    #[test]
    fn suffixes_are_dns_labels_and_differ() {
        let (a, b) = (random_suffix(), random_suffix());
        assert_eq!(a.len(), 6);
        assert!(
            a.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        );
        assert_ne!(a, b);
    }

    #[test]
    fn curl_is_bounded() {
        let argv = curl(
            "http://10.0.0.1:80/",
            Duration::from_secs(5),
            &["-o", "/dev/null"],
        );
        assert_eq!(argv.first().map(String::as_str), Some("curl"));
        assert!(argv.contains(&"--max-time".to_string()));
        assert_eq!(argv.last().map(String::as_str), Some("http://10.0.0.1:80/"));
    }
}

/// The two clusters a probe runs between, and how (shared by `network
/// verify` and `network benchmark`).
#[derive(clap::Args)]
pub struct PairArgs {
    /// The cluster the client runs in.
    #[arg(long)]
    pub from: String,
    /// The cluster the server runs in.
    #[arg(long)]
    pub to: String,
    /// Leave the probe namespaces for inspection.
    #[arg(long)]
    pub keep: bool,
    /// How long each wait may take (the probe pods ready; for verify also
    /// the ServiceImport's ClusterSetIP and DNS).
    #[arg(long, default_value = "90s", value_parser = humantime::parse_duration)]
    pub timeout: std::time::Duration,
    #[command(flatten)]
    pub hub: crate::inspect::HubArgs,
}
