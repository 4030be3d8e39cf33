//! The member-cluster simulator seen through kubectl and kube-rs: nodes,
//! workloads coming up and rolling, scheduling limits, Services and their
//! EndpointSlices, and injected faults.

mod common;

use std::time::{Duration, Instant};

use common::{Server, assert_has, flotilla, kube_client};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(60);

/// Polls `check` every 200 ms until it returns Some, failing after WAIT.
async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn fault(member: &Server, args: &[&str]) -> std::process::Output {
    let data = member.data_dir();
    let mut all = vec![
        "member",
        "fault",
        "--data-dir",
        data.to_str().expect("utf-8 path"),
    ];
    all.extend_from_slice(args);
    flotilla(&all)
}

fn fault_ok(member: &Server, args: &[&str]) {
    let out = fault(member, args);
    assert!(
        out.status.success(),
        "flotilla member fault {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

const WEB: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 3
  progressDeadlineSeconds: 4
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: web
        image: nginx:1.27
        ports: [{name: http, containerPort: 8080}]
        resources: {requests: {cpu: 500m, memory: 128Mi}}
"#;

#[test]
fn deployment_rolls_out_scales_and_reports_what_does_not_fit() {
    // Two nodes of 2 CPUs: room for 8 pods of 500m.
    let member = Server::member("m1", &["--nodes", "2", "--node-cpu", "2"]);
    member.kubectl_stdin(&["apply", "-f", "-"], Some(WEB));
    let status = member.ok(&["rollout", "status", "deployment/web", "--timeout=60s"]);
    assert_has(&status, &["successfully rolled out"]);
    let ready = member.ok(&["get", "deployment", "web", "-o", "jsonpath={.status.readyReplicas}/{.status.availableReplicas}/{.status.updatedReplicas}/{.status.observedGeneration}"]);
    assert_eq!(ready, "3/3/3/1");
    let conditions = member.ok(&[
        "get",
        "deployment",
        "web",
        "-o",
        "jsonpath={range .status.conditions[*]}{.type}={.status}/{.reason} {end}",
    ]);
    assert_has(
        &conditions,
        &[
            "Available=True/MinimumReplicasAvailable",
            "Progressing=True/NewReplicaSetAvailable",
        ],
    );
    let pods = member.ok(&["get", "pods", "-l", "app=web", "-o", "jsonpath={range .items[*]}{.status.phase} {.status.podIP} {.status.hostIP} {.spec.nodeName}{\"\\n\"}{end}"]);
    assert_eq!(pods.lines().count(), 3, "{pods}");
    for line in pods.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        assert_eq!(f[0], "Running", "{line}");
        assert!(
            f[1].starts_with("10.") && f[2].starts_with("172.18.") && f[3].starts_with("m1-node-"),
            "{line}"
        );
    }

    // An image change rolls out through a second ReplicaSet.
    member.ok(&["set", "image", "deployment/web", "web=nginx:1.28"]);
    assert_has(
        &member.ok(&["rollout", "status", "deployment/web", "--timeout=60s"]),
        &["successfully rolled out"],
    );
    let rs = member.ok(&["get", "rs", "-l", "app=web", "-o", "jsonpath={range .items[*]}{.spec.replicas}:{.spec.template.spec.containers[0].image}:{.metadata.annotations.deployment\\.kubernetes\\.io/revision} {end}"]);
    assert_has(&rs, &["3:nginx:1.28:2", "0:nginx:1.27:1"]);
    let images = member.ok(&[
        "get",
        "pods",
        "-l",
        "app=web",
        "-o",
        "jsonpath={.items[*].spec.containers[0].image}",
    ]);
    assert_eq!(images, "nginx:1.28 nginx:1.28 nginx:1.28");

    // Beyond capacity: pods stay Pending as Unschedulable and the
    // Deployment says it is short, then that it stopped progressing.
    member.ok(&["scale", "deployment/web", "--replicas=10"]);
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let client = kube_client(&member.kubeconfig).await;
        let deployments: Api<Deployment> = Api::default_namespaced(client.clone());
        let status = eventually("ProgressDeadlineExceeded", || async {
            let d = deployments.get("web").await.ok()?;
            let s = d.status?;
            let progressing = s
                .conditions
                .as_ref()?
                .iter()
                .find(|c| c.type_ == "Progressing")?
                .clone();
            (progressing.reason.as_deref() == Some("ProgressDeadlineExceeded")).then_some(s)
        })
        .await;
        assert_eq!(status.available_replicas, Some(8));
        assert_eq!(status.unavailable_replicas, Some(2));
        assert_eq!(status.replicas, Some(10));
        let pods: Api<Pod> = Api::default_namespaced(client);
        let pending = pods
            .list(
                &ListParams::default()
                    .labels("app=web")
                    .fields("status.phase=Pending"),
            )
            .await
            .expect("list");
        assert_eq!(pending.items.len(), 2);
        for p in pending.items {
            let c = p.status.and_then(|s| s.conditions).unwrap_or_default();
            let scheduled = c
                .iter()
                .find(|c| c.type_ == "PodScheduled")
                .expect("PodScheduled");
            assert_eq!(scheduled.status, "False");
            assert_eq!(scheduled.reason.as_deref(), Some("Unschedulable"));
            assert!(
                scheduled
                    .message
                    .as_deref()
                    .unwrap_or("")
                    .contains("0/2 nodes are available: 2 Insufficient cpu"),
                "{scheduled:?}"
            );
        }
    });
    // The scheduler says so in Events, as upstream's: where each pod went,
    // and why the last two go nowhere.
    let reasons = member.ok(&[
        "get",
        "events",
        "-o",
        "jsonpath={range .items[*]}{.source.component}/{.reason}: {.message}{\"\\n\"}{end}",
    ]);
    assert!(
        reasons.lines().any(|l| l
            .starts_with("default-scheduler/Scheduled: Successfully assigned default/web-")
            && l.contains(" to m1-node-")),
        "{reasons}"
    );
    assert!(
        reasons.lines().any(|l| l.starts_with(
            "default-scheduler/FailedScheduling: 0/2 nodes are available: 2 Insufficient cpu"
        )),
        "{reasons}"
    );
    // And the controllers, what they made: `kubectl describe` shows these.
    for (who, what) in [
        (
            "deployment-controller/ScalingReplicaSet",
            "Scaled up replica set web-",
        ),
        (
            "replicaset-controller/SuccessfulCreate",
            "Created pod: web-",
        ),
    ] {
        assert!(
            reasons
                .lines()
                .any(|l| l.starts_with(&format!("{who}: {what}"))),
            "no {who} event saying {what:?}:\n{reasons}"
        );
    }
    let out = member.kubectl(&["rollout", "status", "deployment/web", "--timeout=20s"]);
    assert!(!out.status.success());
    assert_has(
        &String::from_utf8_lossy(&out.stderr),
        &["exceeded its progress deadline"],
    );

    // Deleting the Deployment takes its ReplicaSets and pods with it.
    member.ok(&["delete", "deployment", "web"]);
    common::wait_for(WAIT, "pods of the deleted Deployment to go", || {
        member
            .ok(&["get", "pods", "-l", "app=web", "-o", "name"])
            .trim()
            .is_empty()
    });
}

const WORKLOADS: &str = r#"
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      containers: [{name: agent, image: busybox:1.36}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: batch}
spec:
  completions: 3
  parallelism: 2
  template:
    spec:
      restartPolicy: Never
      containers: [{name: work, image: busybox:1.36}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  serviceName: db
  replicas: 3
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      containers: [{name: db, image: postgres:16}]
"#;

#[test]
fn daemonset_job_and_statefulset() {
    let member = Server::member("m2", &["--nodes", "3"]);
    member.kubectl_stdin(&["apply", "-f", "-"], Some(WORKLOADS));
    assert_has(
        &member.ok(&["rollout", "status", "daemonset/agent", "--timeout=60s"]),
        &["successfully rolled out"],
    );
    assert_has(
        &member.ok(&["rollout", "status", "statefulset/db", "--timeout=60s"]),
        &["roll out complete"],
    );
    member.ok(&[
        "wait",
        "--for=condition=complete",
        "job/batch",
        "--timeout=60s",
    ]);
    common::wait_for(WAIT, "the Job's Completed event", || {
        member
            .ok(&[
                "get",
                "events",
                "--field-selector",
                "involvedObject.kind=Job,involvedObject.name=batch",
                "-o",
                "jsonpath={range .items[*]}{.reason}: {.message}{\"\\n\"}{end}",
            ])
            .contains("Completed: Job completed")
    });

    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let client = kube_client(&member.kubeconfig).await;
        let pods: Api<Pod> = Api::default_namespaced(client.clone());
        // One agent per node.
        let mut agent_nodes: Vec<String> = pods
            .list(&ListParams::default().labels("app=agent"))
            .await
            .expect("list")
            .items
            .iter()
            .filter_map(|p| p.spec.as_ref()?.node_name.clone())
            .collect();
        agent_nodes.sort();
        assert_eq!(agent_nodes, ["m2-node-0", "m2-node-1", "m2-node-2"]);

        // Ordinal names, stable hostnames, started in order.
        let mut db = pods
            .list(&ListParams::default().labels("app=db"))
            .await
            .expect("list")
            .items;
        db.sort_by_key(|p| p.name_any());
        let names: Vec<String> = db.iter().map(|p| p.name_any()).collect();
        assert_eq!(names, ["db-0", "db-1", "db-2"]);
        for pair in db.windows(2) {
            let ready_at = pair[0]
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
                .and_then(|c| c.last_transition_time.clone())
                .expect("ready time");
            let next_created = pair[1]
                .metadata
                .creation_timestamp
                .clone()
                .expect("created");
            assert!(
                next_created >= ready_at,
                "{} created before {} was ready",
                pair[1].name_any(),
                pair[0].name_any()
            );
        }
        assert_eq!(
            db[1]
                .spec
                .as_ref()
                .and_then(|s| s.hostname.clone())
                .as_deref(),
            Some("db-1")
        );
        assert_eq!(
            db[1]
                .spec
                .as_ref()
                .and_then(|s| s.subdomain.clone())
                .as_deref(),
            Some("db")
        );

        let jobs: Api<Job> = Api::default_namespaced(client);
        let job = jobs.get("batch").await.expect("job");
        let status = job.status.expect("status");
        assert_eq!(status.succeeded, Some(3));
        assert!(status.completion_time.is_some() && status.start_time.is_some());
        let complete = status.conditions.unwrap_or_default();
        assert!(
            complete
                .iter()
                .any(|c| c.type_ == "Complete" && c.status == "True")
        );
    });
    let completions = member.ok(&[
        "get",
        "job",
        "batch",
        "-o",
        "jsonpath={.status.succeeded}/{.spec.completions}",
    ]);
    assert_eq!(completions, "3/3");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_get_addresses_and_endpoint_slices_follow_readiness() {
    let member = Server::member("m3", &["--nodes", "2"]);
    let client = kube_client(&member.kubeconfig).await;
    let deployments: Api<Deployment> = Api::default_namespaced(client.clone());
    create_web(&client, |s| s.replicas = Some(2)).await;
    let services: Api<Service> = Api::default_namespaced(client.clone());
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]},
    }))
    .expect("service");
    let created = services
        .create(&PostParams::default(), &svc)
        .await
        .expect("create service");
    let ip: std::net::Ipv4Addr = created
        .spec
        .as_ref()
        .and_then(|s| s.cluster_ip.clone())
        .expect("clusterIP")
        .parse()
        .expect("an IPv4 address");
    assert!(
        ipnet::Ipv4Net::new(ip, 12).expect("net").network()
            == std::net::Ipv4Addr::new(10, 96, 0, 0),
        "{ip}"
    );
    let node_port: Service = serde_json::from_value(json!({
        "metadata": {"name": "web-np"},
        "spec": {"type": "NodePort", "selector": {"app": "web"}, "ports": [{"port": 80}]},
    }))
    .expect("service");
    let np = services
        .create(&PostParams::default(), &node_port)
        .await
        .expect("create NodePort");
    let port = np
        .spec
        .and_then(|s| s.ports)
        .and_then(|p| p[0].node_port)
        .expect("nodePort");
    assert!((30000..=32767).contains(&port), "{port}");

    let slices: Api<EndpointSlice> = Api::default_namespaced(client.clone());
    let ready_states = |want: Vec<bool>| {
        let slices = slices.clone();
        async move {
            let list = slices
                .list(&ListParams::default().labels("kubernetes.io/service-name=web"))
                .await
                .ok()?;
            let slice = list.items.first()?.clone();
            let port = slice
                .ports
                .as_ref()
                .and_then(|p| p.first())
                .and_then(|p| p.port);
            let got: Vec<bool> = slice
                .endpoints
                .iter()
                .map(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(false))
                .collect();
            // Ports resolve through the pods; an empty slice has none.
            (got == want && (want.is_empty() || port == Some(8080))).then_some(slice)
        }
    };
    let slice = eventually("two ready endpoints", || ready_states(vec![true, true])).await;
    assert_eq!(slice.address_type, "IPv4");
    assert_eq!(
        slice
            .metadata
            .owner_references
            .as_ref()
            .map(|o| o[0].name.clone())
            .as_deref(),
        Some("web")
    );

    fault_ok(&member, &["pods-unready", "-l", "app=web"]);
    eventually("endpoints to turn unready", || {
        ready_states(vec![false, false])
    })
    .await;
    fault_ok(&member, &["pods-ready", "-l", "app=web"]);
    eventually("endpoints to be ready again", || {
        ready_states(vec![true, true])
    })
    .await;

    deployments
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"replicas": 0}})),
        )
        .await
        .expect("scale to zero");
    eventually("an empty slice", || ready_states(vec![])).await;

    // The Service's slices go with it.
    services
        .delete("web", &Default::default())
        .await
        .expect("delete service");
    eventually("slices of the deleted Service to go", || {
        let slices = slices.clone();
        async move {
            let list = slices
                .list(&ListParams::default().labels("kubernetes.io/service-name=web"))
                .await
                .ok()?;
            list.items.is_empty().then_some(())
        }
    })
    .await;
}

/// Creates the WEB Deployment through kube-rs, changed by `tweak`.
async fn create_web(
    client: &kube::Client,
    tweak: impl FnOnce(&mut k8s_openapi::api::apps::v1::DeploymentSpec),
) {
    let mut web: Deployment = serde_yaml_from(WEB);
    if let Some(spec) = web.spec.as_mut() {
        tweak(spec);
    }
    Api::<Deployment>::default_namespaced(client.clone())
        .create(&PostParams::default(), &web)
        .await
        .expect("create the web Deployment");
}

fn serde_yaml_from<T: serde::de::DeserializeOwned>(yaml: &str) -> T {
    serde_yaml::from_str(yaml).expect("valid manifest")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_register_heartbeat_and_survive_faults_and_restarts() {
    let mut member = Server::member(
        "m4",
        &[
            "--nodes",
            "3",
            "--node-cpu",
            "8",
            "--node-memory",
            "32Gi",
            "--region",
            "eu-west-1",
            "--zone",
            "eu-west-1a,eu-west-1b",
            "--node-labels",
            "disk=ssd",
            "--node-heartbeat",
            "1s",
        ],
    );
    let client = kube_client(&member.kubeconfig).await;
    let nodes: Api<Node> = Api::all(client.clone());
    let list = nodes.list(&Default::default()).await.expect("nodes").items;
    assert_eq!(list.len(), 3);
    for (i, n) in list.iter().enumerate() {
        let labels = n.labels();
        assert_eq!(labels.get("kubernetes.io/hostname"), Some(&n.name_any()));
        assert_eq!(
            labels
                .get("topology.kubernetes.io/region")
                .map(String::as_str),
            Some("eu-west-1")
        );
        let zone = if i % 2 == 0 {
            "eu-west-1a"
        } else {
            "eu-west-1b"
        };
        assert_eq!(
            labels
                .get("topology.kubernetes.io/zone")
                .map(String::as_str),
            Some(zone)
        );
        assert_eq!(labels.get("disk").map(String::as_str), Some("ssd"));
        assert!(labels.contains_key("node.kubernetes.io/instance-type"));
        let status = n.status.as_ref().expect("status");
        let alloc = status.allocatable.as_ref().expect("allocatable");
        assert_eq!(alloc.get("cpu").map(|q| q.0.as_str()), Some("8"));
        assert_eq!(alloc.get("memory").map(|q| q.0.as_str()), Some("32Gi"));
        assert_eq!(alloc.get("pods").map(|q| q.0.as_str()), Some("110"));
        let ready = status
            .conditions
            .as_ref()
            .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
            .expect("Ready");
        assert_eq!(ready.status, "True");
    }
    // Leases in kube-node-lease are renewed.
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let first = eventually("three leases", || {
        let leases = leases.clone();
        async move {
            let l = leases.list(&Default::default()).await.ok()?.items;
            (l.len() == 3).then(|| l[0].spec.as_ref().and_then(|s| s.renew_time.clone()))
        }
    })
    .await
    .expect("renewTime");
    let name = list[0].name_any();
    eventually("a renewal", || {
        let leases = leases.clone();
        let name = name.clone();
        let first = first.clone();
        async move {
            let l = leases.get(&name).await.ok()?;
            (l.spec?.renew_time? > first).then_some(())
        }
    })
    .await;

    // A pod tolerating a not-ready node for one second is evicted from it
    // and its ReplicaSet replaces it elsewhere.
    create_web(&client, |s| {
        if let Some(t) = s.template.spec.as_mut() {
            t.tolerations = Some(vec![serde_json::from_value(json!({"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 1})).expect("toleration")]);
        }
    })
    .await;
    member.ok(&["rollout", "status", "deployment/web", "--timeout=60s"]);
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let victim = pods
        .list(&ListParams::default().labels("app=web"))
        .await
        .expect("pods")
        .items[0]
        .clone();
    let node = victim
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .expect("bound");
    fault_ok(&member, &["node-not-ready", &node]);
    let tainted = eventually("the node to go NotReady with taints", || {
        let nodes = nodes.clone();
        let node = node.clone();
        async move {
            let n = nodes.get(&node).await.ok()?;
            let ready = n
                .status
                .as_ref()?
                .conditions
                .as_ref()?
                .iter()
                .find(|c| c.type_ == "Ready")?
                .status
                .clone();
            let taints = n.spec.as_ref()?.taints.clone().unwrap_or_default();
            (ready == "False" && taints.len() == 2).then_some(taints)
        }
    })
    .await;
    assert!(
        tainted
            .iter()
            .all(|t| t.key == "node.kubernetes.io/not-ready")
    );
    eventually("the pod to be replaced on another node", || {
        let pods = pods.clone();
        let node = node.clone();
        async move {
            let l = pods
                .list(&ListParams::default().labels("app=web"))
                .await
                .ok()?
                .items;
            let elsewhere = l
                .iter()
                .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) != Some(&node))
                .count();
            (l.len() == 3 && elsewhere == 3).then_some(())
        }
    })
    .await;
    let unknown = fault(&member, &["node-not-ready", "m4-node-7"]);
    assert!(!unknown.status.success());
    assert_has(
        &String::from_utf8_lossy(&unknown.stderr),
        &["not one of this member's nodes"],
    );
    fault_ok(&member, &["node-ready", &node]);

    // Unreachable, both ways, and back with everything in place.
    let configmaps: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "keep"}, "data": {"k": "v"}}))
            .expect("cm");
    configmaps
        .create(&PostParams::default(), &cm)
        .await
        .expect("create");
    fault_ok(&member, &["unreachable", "--mode", "refuse"]);
    let out = member.kubectl(&["get", "configmap", "keep", "--request-timeout=5s"]);
    assert!(!out.status.success());
    assert_has(&String::from_utf8_lossy(&out.stderr), &["refused"]);
    fault_ok(&member, &["unreachable", "--mode", "hang"]);
    let started = Instant::now();
    let out = member.kubectl(&["get", "configmap", "keep", "--request-timeout=2s"]);
    assert!(!out.status.success() && started.elapsed() >= Duration::from_secs(2));
    fault_ok(&member, &["reachable"]);
    assert_eq!(
        member.ok(&["get", "configmap", "keep", "-o", "jsonpath={.data.k}"]),
        "v"
    );
    assert_eq!(
        member.ok(&[
            "get",
            "deployment",
            "web",
            "-o",
            "jsonpath={.status.readyReplicas}"
        ]),
        "3"
    );

    // kill -9 and restart on the same data: the same nodes, the workload
    // still running, no duplicates.
    member.kill9();
    member.spawn();
    let client = kube_client(&member.kubeconfig).await;
    let nodes: Api<Node> = Api::all(client.clone());
    assert_eq!(
        nodes
            .list(&Default::default())
            .await
            .expect("nodes")
            .items
            .len(),
        3
    );
    let deployments: Api<Deployment> = Api::default_namespaced(client.clone());
    eventually("the Deployment to be whole after a restart", || {
        let deployments = deployments.clone();
        async move {
            let s = deployments.get("web").await.ok()?.status?;
            (s.ready_replicas == Some(3) && s.replicas == Some(3)).then_some(())
        }
    })
    .await;
    let pods: Api<Pod> = Api::default_namespaced(client);
    assert_eq!(
        pods.list(&ListParams::default().labels("app=web"))
            .await
            .expect("pods")
            .items
            .len(),
        3
    );
}

fn node(member: &Server, args: &[&str]) -> std::process::Output {
    let data = member.data_dir();
    let mut all = vec![
        "member",
        "node",
        "--data-dir",
        data.to_str().expect("utf-8 path"),
    ];
    all.extend_from_slice(args);
    flotilla(&all)
}

/// Machines join a running simulated member as nodes and leave it, as a
/// kubelet registers with a real cluster: the node keeps the labels,
/// taints, providerID and version it joined with, runs pods, takes them
/// along when it leaves, and the member runs the same nodes after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_join_and_leave_a_running_member() {
    let mut member = Server::member("m9", &["--nodes", "1", "--node-heartbeat", "1s"]);
    let out = node(
        &member,
        &[
            "add",
            "worker-a",
            "--labels",
            "pool=md-0",
            "--taint",
            "dedicated=batch:NoSchedule",
            "--provider-id",
            "docker:////worker-a",
            "--kubelet-version",
            "v1.33.0",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let client = kube_client(&member.kubeconfig).await;
    let nodes: Api<Node> = Api::all(client.clone());
    let joined = eventually("worker-a to register Ready", || {
        let nodes = nodes.clone();
        async move {
            let n = nodes.get("worker-a").await.ok()?;
            let ready = n
                .status
                .as_ref()?
                .conditions
                .as_ref()?
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            ready.then_some(n)
        }
    })
    .await;
    assert_eq!(
        joined.labels().get("pool").map(String::as_str),
        Some("md-0")
    );
    let spec = joined.spec.clone().expect("spec");
    assert_eq!(spec.provider_id.as_deref(), Some("docker:////worker-a"));
    let taints = spec.taints.unwrap_or_default();
    assert!(
        taints
            .iter()
            .any(|t| t.key == "dedicated" && t.effect == "NoSchedule")
    );
    let info = joined.status.and_then(|s| s.node_info).expect("nodeInfo");
    assert_eq!(info.kubelet_version, "v1.33.0");
    // Its pod CIDR is its own.
    let first = nodes.get("m9-node-0").await.expect("m9-node-0");
    assert_ne!(
        first.spec.and_then(|s| s.pod_cidr),
        spec.pod_cidr,
        "two nodes share a pod CIDR"
    );

    // A pod bound to it runs there and goes when the node leaves.
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "on-worker"},
        "spec": {"nodeName": "worker-a", "containers": [{"name": "c", "image": "nginx"}]}
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create pod");
    eventually("the pod to run on worker-a", || {
        let pods = pods.clone();
        async move {
            let p = pods.get("on-worker").await.ok()?;
            (p.status?.phase.as_deref() == Some("Running")).then_some(())
        }
    })
    .await;
    let out = node(&member, &["remove", "worker-a"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eventually("worker-a and its pod to be gone", || {
        let (nodes, pods) = (nodes.clone(), pods.clone());
        async move {
            let node_gone = nodes.get_opt("worker-a").await.ok()?.is_none();
            let pod_gone = pods.get_opt("on-worker").await.ok()?.is_none();
            (node_gone && pod_gone).then_some(())
        }
    })
    .await;

    // Bad input is refused with its cause, and changes nothing.
    let bad = node(&member, &["add", "Not_A_Name"]);
    assert!(!bad.status.success());
    assert_has(
        &String::from_utf8_lossy(&bad.stderr),
        &["not a valid node name"],
    );
    let bad = node(&member, &["add", "w", "--taint", "dedicated=x"]);
    assert!(!bad.status.success());
    assert_has(&String::from_utf8_lossy(&bad.stderr), &["has no effect"]);
    let bad = node(&member, &["remove", "worker-a"]);
    assert!(!bad.status.success());
    assert_has(
        &String::from_utf8_lossy(&bad.stderr),
        &["not one of this member's nodes"],
    );

    // The roster outlives the process: a node added before a kill -9 is
    // there after the restart, and the one removed stays gone.
    let out = node(&member, &["add", "worker-b"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    member.kill9();
    member.spawn();
    let client = kube_client(&member.kubeconfig).await;
    let nodes: Api<Node> = Api::all(client);
    let mut names: Vec<String> = nodes
        .list(&Default::default())
        .await
        .expect("nodes")
        .items
        .iter()
        .map(|n| n.name_any())
        .collect();
    names.sort();
    assert_eq!(names, ["m9-node-0", "worker-b"]);
}

#[test]
fn bad_member_flags_are_explained() {
    let out = flotilla(&["member", "--name", "x", "--node-cpu", "lots"]);
    assert!(!out.status.success());
    assert_has(
        &String::from_utf8_lossy(&out.stderr),
        &["--node-cpu \"lots\" is not a CPU quantity"],
    );
    let out = flotilla(&["member", "--name", "x", "--node-labels", "oops"]);
    assert!(!out.status.success());
    assert_has(&String::from_utf8_lossy(&out.stderr), &["is not key=value"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let out = flotilla(&[
        "member",
        "fault",
        "--data-dir",
        dir.path().to_str().expect("utf-8"),
        "list",
    ]);
    assert!(!out.status.success());
    assert_has(
        &String::from_utf8_lossy(&out.stderr),
        &["is a member running with --data-dir"],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recreate_stops_every_old_pod_before_starting_new_ones() {
    use futures::StreamExt;
    use std::collections::HashMap;

    let member = Server::member("m5", &["--nodes", "2"]);
    let client = kube_client(&member.kubeconfig).await;
    let deployments: Api<Deployment> = Api::default_namespaced(client.clone());
    create_web(&client, |s| {
        s.replicas = Some(2);
        s.strategy = Some(serde_json::from_value(json!({"type": "Recreate"})).expect("strategy"));
    })
    .await;
    member.ok(&["rollout", "status", "deployment/web", "--timeout=60s"]);

    // Follow every pod change from here on: live pods by template hash.
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let list = pods
        .list(&ListParams::default().labels("app=web"))
        .await
        .expect("list");
    let version = list
        .metadata
        .resource_version
        .clone()
        .expect("resourceVersion");
    let mut live: HashMap<String, String> = list
        .items
        .iter()
        .map(|p| (p.name_any(), p.labels()["pod-template-hash"].clone()))
        .collect();
    let mut events = pods
        .watch(
            &kube::api::WatchParams::default().labels("app=web"),
            &version,
        )
        .await
        .expect("watch")
        .boxed();
    member.ok(&["set", "image", "deployment/web", "web=nginx:1.28"]);
    let mut mixed = false;
    let mut hashes_seen = std::collections::HashSet::new();
    let deadline = Instant::now() + WAIT;
    loop {
        let all_new_ready = deployments
            .get("web")
            .await
            .ok()
            .and_then(|d| d.status)
            .is_some_and(|s| {
                s.updated_replicas == Some(2)
                    && s.ready_replicas == Some(2)
                    && s.replicas == Some(2)
            });
        if all_new_ready && hashes_seen.len() == 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for the Recreate rollout"
        );
        let next = tokio::time::timeout(Duration::from_millis(500), events.next()).await;
        let Ok(Some(Ok(event))) = next else {
            continue;
        };
        match event {
            kube::api::WatchEvent::Added(p) | kube::api::WatchEvent::Modified(p) => {
                live.insert(p.name_any(), p.labels()["pod-template-hash"].clone());
            }
            kube::api::WatchEvent::Deleted(p) => {
                live.remove(&p.name_any());
            }
            _ => {}
        }
        let hashes: std::collections::HashSet<&String> = live.values().collect();
        hashes_seen.extend(hashes.iter().map(|h| h.to_string()));
        mixed |= hashes.len() > 1;
    }
    assert!(
        !mixed,
        "old and new pods were alive at the same time under Recreate"
    );
}

/// `kubectl debug` on the simulator: the ephemeral container it adds is
/// reported running with its image, and attaching to it says plainly
/// that no container runtime is behind the pod instead of waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ephemeral_container_is_reported_and_attaching_to_it_ends() {
    let member = Server::member("m6", &["--nodes", "1"]);
    member.ok(&["run", "app", "--image=busybox", "--", "sleep", "3600"]);
    member.ok(&["wait", "--for=condition=Ready", "pod/app", "--timeout=60s"]);
    member.ok(&["debug", "app", "--image=busybox", "--container=dbg"]);
    let pods: Api<Pod> = Api::default_namespaced(kube_client(&member.kubeconfig).await);
    eventually("the debug container's status", || {
        let pods = pods.clone();
        async move {
            let pod = pods.get("app").await.ok()?;
            let statuses = pod.status?.ephemeral_container_statuses?;
            let s = statuses.iter().find(|s| s.name == "dbg")?;
            (s.image == "busybox" && s.state.as_ref()?.running.is_some()).then_some(())
        }
    })
    .await;
    let out = member.kubectl(&["attach", "app", "-c", "dbg"]);
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !out.status.success() && said.contains("no container runtime behind it"),
        "kubectl attach to the debug container: {said}"
    );
    // So does the kubelet's checkpoint API, through the node's proxy.
    let node = member.ok(&["get", "pod", "app", "-o", "jsonpath={.spec.nodeName}"]);
    let out = member.kubectl(&[
        "create",
        "--raw",
        &format!("/api/v1/nodes/{node}/proxy/checkpoint/default/app/app"),
        "-f",
        "/dev/null",
    ]);
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !out.status.success() && said.contains("no container runtime behind it"),
        "checkpoint on a simulated node: {said}"
    );
}

const STORAGE: &str = r#"
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: task-pv-volume, labels: {type: local}}
spec:
  storageClassName: manual
  capacity: {storage: 10Gi}
  accessModes: [ReadWriteOnce]
  hostPath: {path: /mnt/data}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: task-pv-claim}
spec:
  storageClassName: manual
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 3Gi}}
---
apiVersion: v1
kind: Pod
metadata: {name: orphan}
spec:
  volumes: [{name: data, persistentVolumeClaim: {claimName: nowhere}}]
  containers: [{name: c, image: busybox}]
"#;

/// Persistent volumes as on kind: a default StorageClass whose
/// provisioner makes a volume for each claim once a pod names it, the
/// binder matching claims to volumes an admin made, claims from a
/// StatefulSet's templates, reclaim by policy, and pods held back by a
/// claim that does not exist.
#[test]
fn claims_bind_to_volumes_provisioned_or_made_by_hand() {
    let member = Server::member("m-pv", &["--nodes", "2"]);
    assert_has(
        &member.ok(&["get", "storageclass"]),
        &[
            "standard (default)",
            "rancher.io/local-path",
            "WaitForFirstConsumer",
        ],
    );
    member.ok_stdin(&["apply", "-f", "-"], common::STATEFUL_WEB);
    member.ok_stdin(&["apply", "-f", "-"], STORAGE);
    member.ok(&["rollout", "status", "statefulset/web", "--timeout=60s"]);
    let claim = |name: &str, path: &str| {
        member.ok(&["get", "pvc", name, "-o", &format!("jsonpath={path}")])
    };
    common::wait_for(WAIT, "the template claims and the manual one bound", || {
        ["www-web-0", "www-web-1", "task-pv-claim"]
            .iter()
            .all(|c| claim(c, "{.status.phase}") == "Bound")
    });
    // Claims of a StatefulSet carry its selector's labels and the default
    // class; each got a volume of its own.
    let listed = member.ok(&["get", "pvc", "-l", "app=nginx", "-o", "name"]);
    assert_eq!(listed.lines().count(), 2, "{listed}");
    assert_eq!(claim("www-web-0", "{.spec.storageClassName}"), "standard");
    let volume = claim("www-web-0", "{.spec.volumeName}");
    assert!(volume.starts_with("pvc-"), "{volume}");
    let pv =
        |name: &str, path: &str| member.ok(&["get", "pv", name, "-o", &format!("jsonpath={path}")]);
    assert_eq!(
        pv(
            &volume,
            "{.spec.claimRef.name} {.spec.persistentVolumeReclaimPolicy} {.status.phase}"
        ),
        "www-web-0 Delete Bound"
    );
    // Made on the node the scheduler chose for web-0 (as local-path's),
    // and tied to it: web-0 comes back there, or waits for it.
    let node = member.ok(&["get", "pod", "web-0", "-o", "jsonpath={.spec.nodeName}"]);
    assert_eq!(
        claim(
            "www-web-0",
            "{.metadata.annotations.volume\\.kubernetes\\.io/selected-node}"
        ),
        node
    );
    assert_eq!(
        pv(
            &volume,
            "{.spec.nodeAffinity.required.nodeSelectorTerms[0].matchExpressions[0].values[0]}"
        ),
        node
    );
    member.ok(&["cordon", &node]);
    member.ok(&["delete", "pod", "web-0"]);
    common::wait_for(WAIT, "web-0 to wait for its volume's node", || {
        member
            .ok(&[
                "get",
                "pod",
                "web-0",
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"PodScheduled\")].message}",
            ])
            .contains("1 node(s) had volume node affinity conflict, 1 node(s) were unschedulable")
    });
    member.ok(&["uncordon", &node]);
    common::wait_for(WAIT, "web-0 back on its volume's node", || {
        member.ok(&[
            "get",
            "pod",
            "web-0",
            "-o",
            "jsonpath={.spec.nodeName} {.status.phase}",
        ]) == format!("{node} Running")
    });
    // The manual claim took the hand-made volume: its class, its size.
    assert_eq!(
        claim("task-pv-claim", "{.spec.volumeName}"),
        "task-pv-volume"
    );
    assert_eq!(claim("task-pv-claim", "{.status.capacity.storage}"), "10Gi");
    assert_has(
        &member.ok(&["get", "pv", "task-pv-volume"]),
        &[
            "10Gi",
            "RWO",
            "Retain",
            "Bound",
            "default/task-pv-claim",
            "manual",
        ],
    );
    let said = member.ok(&[
        "get",
        "events",
        "-o",
        "jsonpath={range .items[*]}{.source.component}/{.reason}: {.message}{\"\\n\"}{end}",
    ]);
    assert_has(
        &said,
        &[
            "statefulset-controller/SuccessfulCreate: create Claim www-web-0 Pod web-0 in StatefulSet web success",
            "statefulset-controller/SuccessfulCreate: create Pod web-0 in StatefulSet web successful",
            "rancher.io/local-path/ProvisioningSucceeded: Successfully provisioned volume pvc-",
        ],
    );
    // A pod naming a claim that does not exist is not scheduled, and says why.
    common::wait_for(WAIT, "the orphan pod to say why it waits", || {
        member
            .ok(&[
                "get",
                "pod",
                "orphan",
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"PodScheduled\")].message}",
            ])
            .contains("persistentvolumeclaim \"nowhere\" not found")
    });
    // Reclaim: a provisioned volume goes with its claim (Delete); the
    // hand-made one is Released and kept (Retain).
    member.ok(&["delete", "pvc", "task-pv-claim"]);
    member.ok(&["delete", "statefulset", "web"]);
    member.ok(&["delete", "pvc", "www-web-0"]);
    common::wait_for(WAIT, "the released and deleted volumes", || {
        let volumes = member.ok(&[
            "get",
            "pv",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name}={.status.phase} {end}",
        ]);
        volumes.contains("task-pv-volume=Released") && !volumes.contains(&volume)
    });
}

/// A Deployment whose pods request CPU and memory, and the pod of the
/// Python client's own metrics test (core-pod.yaml), which requests none.
const MEASURED: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: api}
spec:
  replicas: 2
  selector: {matchLabels: {app: api}}
  template:
    metadata: {labels: {app: api}}
    spec:
      containers:
        - name: api
          image: nginx
          resources: {requests: {cpu: 250m, memory: 64Mi}}
---
apiVersion: v1
kind: Pod
metadata:
  name: myapp-pod
  labels: {app: myapp}
spec:
  containers:
    - name: myapp-container
      image: busybox
      command: ['sh', '-c', 'echo Hello Kubernetes! && sleep 3600']
"#;

#[test]
fn members_serve_the_resource_metrics_api_as_metrics_server_does() {
    let member = Server::member("m1", &["--nodes", "2"]);
    member.kubectl_stdin(&["apply", "-f", "-"], Some(MEASURED));
    member.ok(&["rollout", "status", "deployment/api", "--timeout=60s"]);
    member.ok(&[
        "wait",
        "--for=condition=Ready",
        "pod/myapp-pod",
        "--timeout=60s",
    ]);
    // A simulated container uses what it requests.
    let top = member.ok(&["top", "pod", "-l", "app=api", "--no-headers"]);
    assert_eq!(top.lines().count(), 2, "{top}");
    for line in top.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(&f[1..], ["250m", "64Mi"], "{top}");
    }
    let containers = member.ok(&["top", "pod", "myapp-pod", "--containers", "--no-headers"]);
    assert_has(&containers, &["myapp-pod", "myapp-container", "0m"]);
    // Nodes: the sum of their pods, with upstream's columns.
    let nodes = member.ok(&["top", "node"]);
    assert_has(
        &nodes,
        &[
            "CPU(cores)",
            "CPU(%)",
            "MEMORY(bytes)",
            "m1-node-0",
            "m1-node-1",
        ],
    );
    let total: u32 = member
        .ok(&["top", "node", "--no-headers"])
        .lines()
        .filter_map(|l| {
            l.split_whitespace()
                .nth(1)?
                .strip_suffix('m')?
                .parse::<u32>()
                .ok()
        })
        .sum();
    assert_eq!(total, 500, "{nodes}");
    // The objects as metrics-server writes them.
    let raw = member.ok(&[
        "get",
        "--raw",
        "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/myapp-pod",
    ]);
    let pod: serde_json::Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(pod["kind"], "PodMetrics");
    assert_eq!(pod["metadata"]["labels"]["app"], "myapp");
    assert_eq!(pod["containers"][0]["name"], "myapp-container");
    assert!(pod["window"].as_str().unwrap().ends_with('s'), "{raw}");
    let missing = member.kubectl(&["top", "pod", "nope"]);
    assert_has(
        &String::from_utf8_lossy(&missing.stderr),
        &["pods.metrics.k8s.io \"nope\" not found"],
    );
    let watch = member.kubectl(&[
        "get",
        "--raw",
        "/apis/metrics.k8s.io/v1beta1/pods?watch=true",
    ]);
    assert!(!watch.status.success(), "metrics are not watched");

    // The official Python client's metrics utilities, as its own e2e
    // test calls them.
    let script = r#"
import sys
from kubernetes import client, config, utils
config.load_kube_config(config_file=sys.argv[1])
api = client.ApiClient()
nodes = utils.get_nodes_metrics(api)
assert len(nodes['items']) == 2 and 'usage' in nodes['items'][0], nodes
pods = utils.get_pods_metrics(api, 'default')
assert 'myapp-pod' in [i['metadata']['name'] for i in pods['items']], pods
one = utils.get_pods_metrics(api, 'default', 'app=myapp')
assert [i['metadata']['name'] for i in one['items']] == ['myapp-pod'], one
every = utils.get_pods_metrics_in_all_namespaces(api, ['default', 'kube-system'])
assert 'error' not in every['default'], every
print('metrics ok')
"#;
    let out = std::process::Command::new("python3")
        .args(["-c", script])
        .arg(&member.kubeconfig)
        .output()
        .expect(
            "python3 runs (install the client with: pip install kubernetes, or run bash .ci/run)",
        );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("metrics ok"),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // A server with nothing that measures pods (the control plane) does
    // not serve the group, as a cluster without metrics-server.
    let hub = Server::start();
    let top = hub.kubectl(&["top", "pod"]);
    assert_has(
        &String::from_utf8_lossy(&top.stderr),
        &["Metrics API not available"],
    );
}

/// The HorizontalPodAutoscaler walkthrough's php-apache (its pods request
/// 200m and, simulated, use it: 100% of the request), one Deployment of
/// 4 pods using half of an HPA's 200% target, and one without requests.
const AUTOSCALED: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: php-apache}
spec:
  selector: {matchLabels: {run: php-apache}}
  template:
    metadata: {labels: {run: php-apache}}
    spec:
      containers:
      - name: php-apache
        image: registry.k8s.io/hpa-example
        ports: [{containerPort: 80}]
        resources: {limits: {cpu: 500m}, requests: {cpu: 200m}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: quiet}
spec:
  replicas: 4
  selector: {matchLabels: {app: quiet}}
  template:
    metadata: {labels: {app: quiet}}
    spec:
      containers: [{name: quiet, image: nginx, resources: {requests: {cpu: 100m}}}]
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: quiet}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: quiet}
  minReplicas: 1
  maxReplicas: 6
  metrics:
  - type: Resource
    resource: {name: cpu, target: {type: Utilization, averageUtilization: 200}}
  behavior:
    scaleDown: {stabilizationWindowSeconds: 0}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: unmeasured}
spec:
  selector: {matchLabels: {app: unmeasured}}
  template:
    metadata: {labels: {app: unmeasured}}
    spec:
      containers: [{name: app, image: nginx}]
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: unmeasured}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: unmeasured}
  maxReplicas: 3
"#;

/// Polls `done` every 500 ms for 90 s (an HPA syncs every 15 s); fails
/// with what `kubectl describe hpa NAME` says.
fn until_hpa(member: &Server, name: &str, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(90);
    while !done() {
        assert!(
            Instant::now() < deadline,
            "HPA {name} never reached {what}:\n{}",
            member.ok(&["describe", "hpa", name])
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn horizontal_pod_autoscalers_scale_on_the_pods_cpu() {
    let member = Server::member("m1", &["--nodes", "3"]);
    member.kubectl_stdin(&["apply", "-f", "-"], Some(AUTOSCALED));
    member.ok(&[
        "rollout",
        "status",
        "deployment/php-apache",
        "--timeout=60s",
    ]);
    // The walkthrough's command, verbatim.
    member.ok(&[
        "autoscale",
        "deployment",
        "php-apache",
        "--cpu-percent=50",
        "--min=1",
        "--max=4",
    ]);
    let hpa = |name: &str, path: &str| {
        member.ok(&["get", "hpa", name, "-o", &format!("jsonpath={path}")])
    };
    // 100% against 50%: twice the pods each sync (upstream's default
    // scale-up: 4 pods or 100% per 15 s), up to the maximum.
    until_hpa(&member, "php-apache", "4 replicas", || {
        hpa("php-apache", "{.status.desiredReplicas}") == "4"
    });
    member.ok(&[
        "rollout",
        "status",
        "deployment/php-apache",
        "--timeout=60s",
    ]);
    let table = member.ok(&["get", "hpa", "php-apache", "--no-headers"]);
    assert_has(
        &table,
        &["Deployment/php-apache", "cpu: 100%/50%", "1", "4"],
    );
    let described = member.ok(&["describe", "hpa", "php-apache"]);
    assert_has(
        &described,
        &[
            "New size: 2; reason: cpu resource utilization (percentage of request) above target",
            "New size: 4; reason: cpu resource utilization (percentage of request) above target",
            "ValidMetricFound",
        ],
    );
    assert_eq!(
        hpa(
            "php-apache",
            "{.status.currentMetrics[0].resource.current.averageValue}"
        ),
        "200m"
    );

    // 50% against 200%: halved, and halved again, no stabilization
    // window asked for scaling down; never under the minimum.
    until_hpa(&member, "quiet", "1 replica", || {
        member.ok(&["get", "deploy", "quiet", "-o", "jsonpath={.spec.replicas}"]) == "1"
    });
    assert_has(
        &member.ok(&["describe", "hpa", "quiet"]),
        &[
            "New size: 2; reason: All metrics below target",
            "New size: 1; reason: All metrics below target",
        ],
    );

    // No CPU request to measure against: the HPA says so and scales
    // nothing (the API defaulted its metric to 80% of the CPU request).
    until_hpa(&member, "unmeasured", "FailedGetResourceMetric", || {
        hpa(
            "unmeasured",
            "{.status.conditions[?(@.type==\"ScalingActive\")].reason}",
        ) == "FailedGetResourceMetric"
    });
    assert_has(
        &hpa(
            "unmeasured",
            "{.status.conditions[?(@.type==\"ScalingActive\")].message}",
        ),
        &["missing request for cpu in container app of Pod unmeasured-"],
    );
    assert_eq!(
        hpa(
            "unmeasured",
            "{.spec.metrics[0].resource.target.averageUtilization}"
        ),
        "80"
    );
    assert_eq!(
        member.ok(&[
            "get",
            "deploy",
            "unmeasured",
            "-o",
            "jsonpath={.spec.replicas}"
        ]),
        "1"
    );
}

/// The Kubernetes tutorial "Running Automated Tasks with a CronJob",
/// verbatim.
const HELLO_CRONJOB: &str = r#"
apiVersion: batch/v1
kind: CronJob
metadata:
  name: hello
spec:
  schedule: "* * * * *"
  jobTemplate:
    spec:
      template:
        spec:
          containers:
          - name: hello
            image: busybox:1.28
            imagePullPolicy: IfNotPresent
            command:
            - /bin/sh
            - -c
            - date; echo Hello from the Kubernetes cluster
          restartPolicy: OnFailure
"#;

#[test]
fn cronjobs_create_jobs_on_schedule() {
    let member = Server::member("m3", &["--nodes", "1"]);
    member.ok_stdin(&["apply", "-f", "-"], HELLO_CRONJOB);
    let cron =
        |path: &str| member.ok(&["get", "cronjob", "hello", "-o", &format!("jsonpath={path}")]);
    // The next minute: one Job, owned by the CronJob, named after the
    // scheduled minute, run to completion.
    let deadline = Instant::now() + Duration::from_secs(90);
    let job = loop {
        let jobs = member.ok(&[
            "get",
            "jobs",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name} {.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name}{\"\\n\"}{end}",
        ]);
        if let Some(line) = jobs.lines().find(|l| l.starts_with("hello-")) {
            break line.to_string();
        }
        assert!(
            Instant::now() < deadline,
            "no Job within a minute and a half:\n{}",
            member.ok(&["describe", "cronjob", "hello"])
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    let (name, owner) = job.split_once(' ').unwrap_or_default();
    assert_eq!(owner, "CronJob/hello");
    let minutes: i64 = name.trim_start_matches("hello-").parse().unwrap_or(0);
    let scheduled = member.ok(&[
        "get",
        "job",
        name,
        "-o",
        "jsonpath={.metadata.annotations.batch\\.kubernetes\\.io/cronjob-scheduled-timestamp}",
    ]);
    let at: k8s_openapi::jiff::Timestamp = scheduled.trim().parse().expect("a timestamp");
    assert_eq!(at.as_second(), minutes * 60, "{scheduled}");
    member.ok(&[
        "wait",
        "--for=condition=complete",
        &format!("job/{name}"),
        "--timeout=60s",
    ]);
    // The last scheduled time is this Job's, or a later minute's.
    let last: k8s_openapi::jiff::Timestamp = cron("{.status.lastScheduleTime}")
        .trim()
        .parse()
        .expect("a last schedule time");
    assert!(last >= at, "{last} before {at}");
    common::wait_for(WAIT, "the last successful time and no active Job", || {
        !cron("{.status.lastSuccessfulTime}").is_empty() && cron("{.status.active}").is_empty()
    });
    // Events are written by the recorder's own task: waited for.
    let events = || {
        member.ok(&[
            "get",
            "events",
            "--field-selector",
            "involvedObject.kind=CronJob,involvedObject.name=hello",
            "-o",
            "jsonpath={range .items[*]}{.reason}: {.message}{\"\\n\"}{end}",
        ])
    };
    common::wait_for(WAIT, "the CronJob's Events", || {
        let e = events();
        e.contains(&format!("SuccessfulCreate: Created job {name}"))
            && e.contains(&format!(
                "SawCompletedJob: Saw completed job: {name}, condition: Complete"
            ))
    });
    // kubectl's own columns.
    assert_has(
        &member.ok(&["get", "cronjob", "hello"]),
        &["SCHEDULE", "* * * * *", "SUSPEND", "False"],
    );
    // A schedule the controller could not run is refused.
    let bad = member.kubectl(&[
        "create",
        "cronjob",
        "bad",
        "--image=busybox",
        "--schedule=every minute",
    ]);
    assert!(!bad.status.success());
    assert_has(
        &String::from_utf8_lossy(&bad.stderr),
        &["spec.schedule: Invalid value: \"every minute\""],
    );
}
