//! Clusters as objects: Cluster API's quick-start manifests for the
//! Docker provider, applied verbatim to the control plane, provision a
//! Flotilla member that joins the fleet; it scales, upgrades and goes
//! away again as Cluster API's users expect, and its processes are found
//! again after a restart of the controllers.

mod common;

use std::time::Duration;

use base64::Engine;
use common::lifecycle::{field, members_under, workload};
use common::{Server, assert_has, until};

const WAIT: Duration = Duration::from_secs(90);

fn fixture(name: &str) -> String {
    common::lifecycle::fixture("cluster-api", name)
}

/// The workload cluster's kubeconfig, from its Secret, written to a file.
fn workload_kubeconfig(hub: &Server, cluster: &str) -> std::path::PathBuf {
    let encoded = field(
        hub,
        &[
            "get",
            "secret",
            &format!("{cluster}-kubeconfig"),
            "-o",
            "jsonpath={.data.value}",
        ],
    );
    let text = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .expect("base64 kubeconfig");
    let path = hub.dir.path().join(format!("{cluster}.kubeconfig"));
    std::fs::write(&path, text).expect("write kubeconfig");
    path
}

fn describe(hub: &Server) -> String {
    let out = hub.kubectl(&["get", "cl,kcp,md,ms,ma,dockermachines", "-o", "wide"]);
    let conditions = hub.kubectl(&[
        "get",
        "dockermachines",
        "-o",
        r#"jsonpath={range .items[*]}{.metadata.name}: {range .status.conditions[*]}{.type}={.status} {.reason} {.message}; {end}{"\n"}{end}"#,
    ]);
    format!(
        "{}{}\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&conditions.stdout),
        common::lifecycle::provider_logs(&hub.data_dir())
    )
}

#[test]
fn the_docker_quick_start_provisions_a_member_that_joins_scales_upgrades_and_goes() {
    let mut hub = Server::controlplane(&[]);
    hub.ok(&[
        "apply",
        "-f",
        &fixture("simple-cluster-no-clusterclass.v1.13.5.yaml"),
    ]);
    until(
        WAIT,
        "the Cluster to be Provisioned and Available",
        || {
            field(
                &hub,
                &[
                    "get",
                    "cl",
                    "capi-quickstart",
                    "-o",
                    "jsonpath={.status.phase} {.status.conditions[?(@.type==\"Available\")].status}",
                ],
            ) == "Provisioned True"
        },
        || describe(&hub),
    );
    // kubectl get clusters' and machines' columns, as upstream's.
    let table = hub.ok(&["get", "clusters.cluster.x-k8s.io"]);
    assert_has(
        &table,
        &[
            "CLUSTERCLASS",
            "AVAILABLE",
            "CP DESIRED",
            "CP AVAILABLE",
            "CP UP-TO-DATE",
            "W DESIRED",
            "W AVAILABLE",
            "W UP-TO-DATE",
            "PHASE",
            "AGE",
            "VERSION",
            "Provisioned",
        ],
    );
    let machines = hub.ok(&["get", "ma"]);
    assert_has(
        &machines,
        &[
            "CLUSTER",
            "NODE NAME",
            "READY",
            "AVAILABLE",
            "UP-TO-DATE",
            "PHASE",
            "Running",
            "v1.33.0",
        ],
    );
    assert_has(&hub.ok(&["get", "kcp"]), &["capi-quickstart", "true"]);
    // v1beta1 is served too (Karmada's discovery reads it), in its own
    // shape: references with apiVersion, readiness flags, v1beta2's
    // conditions under status.v1beta2.
    assert_eq!(
        field(
            &hub,
            &[
                "get",
                "clusters.v1beta1.cluster.x-k8s.io",
                "capi-quickstart",
                "-o",
                "jsonpath={.status.phase} {.status.infrastructureReady} {.spec.infrastructureRef.apiVersion} {.status.v1beta2.conditions[?(@.type==\"Available\")].status} {.status.conditions[?(@.type==\"Ready\")].status}"
            ]
        ),
        "Provisioned true infrastructure.cluster.x-k8s.io/v1beta1 True True"
    );

    // The contract's Secrets.
    assert_eq!(
        field(
            &hub,
            &[
                "get",
                "secret",
                "capi-quickstart-kubeconfig",
                "-o",
                "jsonpath={.type} {.metadata.labels.cluster\\.x-k8s\\.io/cluster-name}"
            ]
        ),
        "cluster.x-k8s.io/secret capi-quickstart"
    );
    assert_eq!(
        field(
            &hub,
            &[
                "get",
                "secret",
                "capi-quickstart-ca",
                "-o",
                "go-template={{range $k, $v := .data}}{{$k}} {{end}}"
            ]
        ),
        "tls.crt tls.key"
    );
    // The kubeconfig works: the control plane and the worker are nodes,
    // at the version asked for, with the providerIDs the Machines carry.
    let kubeconfig = workload_kubeconfig(&hub, "capi-quickstart");
    let nodes = workload(
        &kubeconfig,
        &[
            "get",
            "nodes",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name} {.status.nodeInfo.kubeletVersion} {.spec.providerID}{\"\\n\"}{end}",
        ],
    );
    assert_eq!(nodes.lines().count(), 2, "{nodes}");
    assert!(
        nodes
            .lines()
            .all(|l| l.contains(" v1.33.0 docker:////capi-quickstart-")),
        "{nodes}"
    );
    let control_plane = workload(
        &kubeconfig,
        &[
            "get",
            "nodes",
            "-l",
            "node-role.kubernetes.io/control-plane",
            "-o",
            "jsonpath={.items[0].spec.taints[0].key}",
        ],
    );
    assert_eq!(control_plane, "node-role.kubernetes.io/control-plane");
    let refs = field(
        &hub,
        &[
            "get",
            "ma",
            "-o",
            "jsonpath={range .items[*]}{.spec.providerID}={.status.nodeRef.name}{\"\\n\"}{end}",
        ],
    );
    for line in refs.lines() {
        let (provider_id, node) = line.split_once('=').expect("providerID=node");
        assert_eq!(provider_id, format!("docker:////{node}"));
    }
    // The pod and service networks are the Cluster's clusterNetwork.
    let pod_cidr = workload(
        &kubeconfig,
        &["get", "nodes", "-o", "jsonpath={.items[0].spec.podCIDR}"],
    );
    assert!(pod_cidr.starts_with("192.168."), "{pod_cidr}");

    // clusterctl's views: the tree, and the kubeconfig.
    let hub_kubeconfig = hub.kubeconfig.to_str().expect("utf-8").to_string();
    let out = common::flotilla(&[
        "cluster",
        "describe",
        "capi-quickstart",
        "--kubeconfig",
        &hub_kubeconfig,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_has(
        &String::from_utf8_lossy(&out.stdout),
        &[
            "NAME",
            "REPLICAS",
            "UP TO DATE",
            "STATUS",
            "REASON",
            "SINCE",
            "Cluster/capi-quickstart",
            "ClusterInfrastructure - DockerCluster/capi-quickstart",
            "ControlPlane - KubeadmControlPlane/controlplane",
            "MachineDeployment/worker-md-0",
            "Available",
        ],
    );
    let out = common::flotilla(&[
        "cluster",
        "kubeconfig",
        "capi-quickstart",
        "--kubeconfig",
        &hub_kubeconfig,
    ]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        std::fs::read_to_string(&kubeconfig)
            .expect("kubeconfig")
            .trim()
    );

    // Joined to the fleet under its name.
    until(
        WAIT,
        "the Cluster to join the fleet",
        || {
            field(
                &hub,
                &[
                    "get",
                    "clusters.cluster.karmada.io",
                    "capi-quickstart",
                    "-o",
                    "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
                ],
            ) == "True"
        },
        || describe(&hub),
    );
    // OCM's ManagedCluster follows.
    until(
        WAIT,
        "its ManagedCluster",
        || {
            field(
                &hub,
                &[
                    "get",
                    "managedclusters",
                    "capi-quickstart",
                    "-o",
                    "jsonpath={.spec.hubAcceptsClient}",
                ],
            ) == "true"
        },
        || describe(&hub),
    );

    // Scaled up and down.
    hub.ok(&["scale", "md", "worker-md-0", "--replicas=3"]);
    until(
        WAIT,
        "three workers",
        || {
            workload(&kubeconfig, &["get", "nodes", "-o", "name"])
                .lines()
                .count()
                == 4
        },
        || describe(&hub),
    );
    hub.ok(&["scale", "md", "worker-md-0", "--replicas=1"]);
    until(
        WAIT,
        "one worker again",
        || {
            workload(&kubeconfig, &["get", "nodes", "-o", "name"])
                .lines()
                .count()
                == 2
        },
        || describe(&hub),
    );

    // A worker whose node stays NotReady past the health check's timeout
    // is replaced.
    hub.ok_stdin(
        &["apply", "-f", "-"],
        r#"
apiVersion: cluster.x-k8s.io/v1beta2
kind: MachineHealthCheck
metadata: {name: workers, namespace: default}
spec:
  clusterName: capi-quickstart
  selector: {matchLabels: {cluster.x-k8s.io/deployment-name: worker-md-0}}
  checks:
    unhealthyNodeConditions:
    - {type: Ready, status: "False", timeoutSeconds: 2}
"#,
    );
    let worker = workload(
        &kubeconfig,
        &[
            "get",
            "nodes",
            "-l",
            "!node-role.kubernetes.io/control-plane",
            "-o",
            "jsonpath={.items[0].metadata.name}",
        ],
    );
    let member_dir = hub.data_dir().join("clusters/default/capi-quickstart");
    let out = common::flotilla(&[
        "member",
        "fault",
        "--data-dir",
        member_dir.to_str().expect("utf-8"),
        "node-not-ready",
        &worker,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    until(
        WAIT,
        "the unhealthy worker to be replaced by a ready one",
        || {
            let workers = workload(
                &kubeconfig,
                &[
                    "get",
                    "nodes",
                    "-l",
                    "!node-role.kubernetes.io/control-plane",
                    "-o",
                    "jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type==\"Ready\")].status}{\"\\n\"}{end}",
                ],
            );
            let lines: Vec<&str> = workers.lines().collect();
            lines.len() == 1
                && !lines[0].starts_with(&format!("{worker}="))
                && lines[0].ends_with("=True")
        },
        || describe(&hub),
    );
    assert_has(&hub.ok(&["get", "mhc"]), &["workers", "capi-quickstart"]);

    // A new version rolls the workers and the control plane.
    hub.ok(&[
        "patch",
        "md",
        "worker-md-0",
        "--type=merge",
        "-p",
        r#"{"spec":{"template":{"spec":{"version":"v1.34.0"}}}}"#,
    ]);
    hub.ok(&[
        "patch",
        "kcp",
        "controlplane",
        "--type=merge",
        "-p",
        r#"{"spec":{"version":"v1.34.0"}}"#,
    ]);
    until(
        WAIT,
        "every node at v1.34.0",
        || {
            let versions = workload(
                &kubeconfig,
                &[
                    "get",
                    "nodes",
                    "-o",
                    "jsonpath={.items[*].status.nodeInfo.kubeletVersion}",
                ],
            );
            versions == "v1.34.0 v1.34.0"
        },
        || describe(&hub),
    );

    // The controllers killed and started again find the cluster's member
    // rather than starting another.
    let before = members_under(&hub.data_dir());
    assert_eq!(before.len(), 1, "one member process");
    hub.kill9();
    hub.spawn();
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(members_under(&hub.data_dir()), before);
    assert_eq!(
        field(
            &hub,
            &[
                "get",
                "cl",
                "capi-quickstart",
                "-o",
                "jsonpath={.status.phase}"
            ]
        ),
        "Provisioned"
    );

    // Deleted: out of the fleet, machines, control plane, infrastructure,
    // the member process and the Secrets.
    hub.ok(&[
        "delete",
        "clusters.cluster.x-k8s.io",
        "capi-quickstart",
        "--timeout=90s",
    ]);
    assert!(
        hub.kubectl(&["get", "clusters.cluster.karmada.io", "capi-quickstart"])
            .status
            .code()
            != Some(0)
    );
    until(
        WAIT,
        "its ManagedCluster to go",
        || {
            hub.kubectl(&["get", "managedclusters", "capi-quickstart"])
                .status
                .code()
                != Some(0)
        },
        || describe(&hub),
    );
    assert_eq!(
        field(&hub, &["get", "ma,kcp,md,dockerclusters", "-o", "name"]),
        ""
    );
    until(
        WAIT,
        "the member process to stop and the Secrets to go",
        || {
            members_under(&hub.data_dir()).is_empty()
                && field(
                    &hub,
                    &[
                        "get",
                        "secrets",
                        "-l",
                        "cluster.x-k8s.io/cluster-name=capi-quickstart",
                        "-o",
                        "name",
                    ],
                )
                .is_empty()
        },
        || describe(&hub),
    );
}

/// The quick start's default: `clusterctl generate cluster` with the
/// development flavor, a ClusterClass topology (v1.10's v1beta1 manifests,
/// v1.13's Docker kinds and v1.14's Dev kinds), 3 control plane machines
/// and 3 workers.
#[test]
fn the_clusterclass_quick_start_provisions_its_topology() {
    for release in ["v1.10.0-v1beta1", "v1.13.5", "v1.14.0"] {
        let hub = Server::controlplane(&[]);
        hub.ok(&[
            "apply",
            "-f",
            &fixture(&format!("clusterclass-quick-start.{release}.yaml")),
            "-f",
            &fixture(&format!("quickstart-development-cluster.{release}.yaml")),
        ]);
        until(
            WAIT,
            &format!("the {release} topology to be Available with 3 + 3 machines"),
            || {
                field(
                    &hub,
                    &[
                        "get",
                        "cl",
                        "capi-quickstart",
                        "-o",
                        "jsonpath={.status.phase} {.status.conditions[?(@.type==\"Available\")].status} {.status.controlPlane.availableReplicas} {.status.workers.availableReplicas}",
                    ],
                ) == "Provisioned True 3 3"
            },
            || describe(&hub),
        );
        assert_has(&hub.ok(&["get", "cl"]), &["quick-start", "v1.33.0"]);
        // Each version reads its own shape, whichever wrote it.
        for (resource, path) in [
            (
                "clusters.v1beta1.cluster.x-k8s.io",
                "{.spec.topology.class}",
            ),
            (
                "clusters.v1beta2.cluster.x-k8s.io",
                "{.spec.topology.classRef.name}",
            ),
        ] {
            let jsonpath = format!("jsonpath={path}");
            let class = field(&hub, &["get", resource, "capi-quickstart", "-o", &jsonpath]);
            assert_eq!(class, "quick-start", "{resource} {path}");
        }
        // The class too: `ref`s for v1beta1, `templateRef`s for v1beta2.
        for (resource, path) in [
            (
                "clusterclasses.v1beta1.cluster.x-k8s.io",
                "{.spec.workers.machineDeployments[0].template.bootstrap.ref.name}",
            ),
            (
                "clusterclasses.v1beta2.cluster.x-k8s.io",
                "{.spec.workers.machineDeployments[0].bootstrap.templateRef.name}",
            ),
        ] {
            let jsonpath = format!("jsonpath={path}");
            let template = field(&hub, &["get", resource, "quick-start", "-o", &jsonpath]);
            assert_eq!(
                template, "quick-start-default-worker-bootstraptemplate",
                "{resource} {path}"
            );
        }
        // The topology follows the Cluster: fewer workers.
        hub.ok(&["patch", "cl", "capi-quickstart", "--type=json", "-p", r#"[{"op": "replace", "path": "/spec/topology/workers/machineDeployments/0/replicas", "value": 1}]"#]);
        until(
            WAIT,
            "one worker",
            || {
                field(
                    &hub,
                    &[
                        "get",
                        "cl",
                        "capi-quickstart",
                        "-o",
                        "jsonpath={.status.workers.replicas}",
                    ],
                ) == "1"
            },
            || describe(&hub),
        );
        hub.ok(&["delete", "cl", "capi-quickstart", "--timeout=90s"]);
        assert!(members_under(&hub.data_dir()).is_empty());
    }
}

#[test]
fn generated_manifests_provision_and_bad_options_are_explained() {
    let hub = Server::controlplane(&[]);
    let out = common::flotilla(&[
        "cluster",
        "generate",
        "gen",
        "--kubernetes-version",
        "v1.33.0",
        "--control-plane-machine-count",
        "1",
        "--worker-machine-count",
        "2",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    hub.ok_stdin(&["apply", "-f", "-"], &String::from_utf8_lossy(&out.stdout));
    until(
        WAIT,
        "the generated cluster to be Available with three machines",
        || {
            field(
                &hub,
                &[
                    "get",
                    "cl",
                    "gen",
                    "-o",
                    "jsonpath={.status.conditions[?(@.type==\"Available\")].status} {.status.workers.availableReplicas} {.status.controlPlane.availableReplicas}",
                ],
            ) == "True 2 1"
        },
        || describe(&hub),
    );
    let bad = common::flotilla(&[
        "cluster",
        "generate",
        "gen",
        "--kubernetes-version",
        "latest",
    ]);
    assert!(!bad.status.success());
    assert_has(
        &String::from_utf8_lossy(&bad.stderr),
        &["not a semantic version"],
    );
    let bad = common::flotilla(&["cluster", "generate", "gen", "--flavor", "development"]);
    assert!(!bad.status.success());
    assert_has(&String::from_utf8_lossy(&bad.stderr), &["ClusterClass"]);
    let missing = common::flotilla(&[
        "cluster",
        "kubeconfig",
        "nope",
        "--kubeconfig",
        hub.kubeconfig.to_str().expect("utf-8"),
    ]);
    assert!(!missing.status.success());
    assert_has(
        &String::from_utf8_lossy(&missing.stderr),
        &["no Secret default/nope-kubeconfig"],
    );
    // Work propagated to the cluster does not hold up its deletion: the
    // fleet lets it go, and the template stays on the hub.
    hub.ok_stdin(
        &["apply", "-f", "-"],
        r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: for-gen}
data: {where: gen}
---
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata: {name: for-gen}
spec:
  resourceSelectors:
    - {apiVersion: v1, kind: ConfigMap, name: for-gen}
  placement:
    clusterAffinity:
      clusterNames: [gen]
"#,
    );
    let kubeconfig = workload_kubeconfig(&hub, "gen");
    until(
        WAIT,
        "the ConfigMap in the generated cluster",
        || {
            workload(
                &kubeconfig,
                &["get", "cm", "for-gen", "-o", "jsonpath={.data.where}"],
            ) == "gen"
        },
        || describe(&hub),
    );
    hub.ok(&["delete", "cl", "gen", "--timeout=60s"]);
    assert!(members_under(&hub.data_dir()).is_empty());
    assert!(
        !hub.kubectl(&["get", "clusters.cluster.karmada.io", "gen"])
            .status
            .success()
    );
    assert!(
        !hub.kubectl(&["get", "namespace", "karmada-es-gen"])
            .status
            .success()
    );
    assert_eq!(
        field(
            &hub,
            &["get", "cm", "for-gen", "-o", "jsonpath={.data.where}"]
        ),
        "gen"
    );
}

#[test]
fn a_cluster_on_a_provider_not_installed_is_told_so_and_nothing_is_made() {
    let hub = Server::controlplane(&[]);
    hub.ok_stdin(
        &["apply", "-f", "-"],
        r#"
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata: {name: on-aws, namespace: default}
spec:
  clusterNetwork: {pods: {cidrBlocks: ["192.168.0.0/16"]}}
  infrastructureRef: {apiGroup: infrastructure.cluster.x-k8s.io, kind: AWSCluster, name: on-aws}
  controlPlaneRef: {apiGroup: controlplane.cluster.x-k8s.io, kind: KubeadmControlPlane, name: on-aws}
"#,
    );
    until(
        WAIT,
        "InfrastructureReady to name the missing provider",
        || {
            field(
                &hub,
                &[
                    "get",
                    "cl",
                    "on-aws",
                    "-o",
                    "jsonpath={.status.conditions[?(@.type==\"InfrastructureReady\")].message}",
                ],
            )
            .contains("no installed provider serves AWSCluster")
        },
        || describe(&hub),
    );
    assert_eq!(
        field(
            &hub,
            &[
                "get",
                "cl",
                "on-aws",
                "-o",
                "jsonpath={.status.phase} {.status.conditions[?(@.type==\"InfrastructureReady\")].status}"
            ]
        ),
        "Provisioning Unknown"
    );
    // The control plane it names does not exist: said so, and nothing runs.
    assert!(
        field(
            &hub,
            &[
                "get",
                "cl",
                "on-aws",
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"ControlPlaneAvailable\")].message}"
            ]
        )
        .contains("KubeadmControlPlane does not exist")
    );
    assert_eq!(
        field(&hub, &["get", "ma,dockerclusters,secrets", "-o", "name"]),
        ""
    );
    assert!(members_under(&hub.data_dir()).is_empty());
    hub.ok(&["delete", "cl", "on-aws", "--timeout=30s"]);

    // Bad input is refused as upstream's webhooks refuse it, and nothing
    // is written.
    let refused = |manifest: &str, needles: &[&str]| {
        let out = hub.kubectl_stdin(&["apply", "-f", "-"], Some(manifest));
        assert!(!out.status.success(), "accepted:\n{manifest}");
        assert_has(&String::from_utf8_lossy(&out.stderr), needles);
    };
    refused(
        r#"{"apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "KubeadmControlPlane",
            "metadata": {"name": "bad", "namespace": "default"}, "spec": {"replicas": 1, "version": "latest"}}"#,
        &[
            "is invalid",
            "spec.version",
            "must be a valid semantic version",
        ],
    );
    refused(
        r#"{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment",
            "metadata": {"name": "bad", "namespace": "default"},
            "spec": {"clusterName": "x", "template": {"spec": {"clusterName": "x", "version": "v1.33"}}}}"#,
        &["spec.template.spec.version"],
    );
    refused(
        r#"{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "bad", "namespace": "default"},
            "spec": {"clusterNetwork": {"pods": {"cidrBlocks": ["243.0.0.0/20"]}, "services": {"cidrBlocks": ["10.96.0.0/12", "not-a-cidr"]}}}}"#,
        &[
            "spec.clusterNetwork.pods.cidrBlocks[0]",
            "overlaps the hub's ClusterSet IP range",
            "must be a CIDR",
        ],
    );
    assert_eq!(field(&hub, &["get", "cl,kcp,md", "-o", "name"]), "");
}

/// The controllers killed with SIGKILL while a cluster is being made,
/// and started again: it is finished, with one member process and each
/// Machine once (one node each), nothing left over.
#[test]
fn a_cluster_whose_controllers_die_mid_provisioning_is_finished_once() {
    let mut hub = Server::controlplane(&[]);
    let manifests = common::flotilla(&[
        "cluster",
        "generate",
        "mid",
        "--kubernetes-version",
        "v1.33.0",
        "--worker-machine-count",
        "3",
    ]);
    assert!(manifests.status.success());
    hub.ok_stdin(
        &["apply", "-f", "-"],
        &String::from_utf8_lossy(&manifests.stdout),
    );
    // Killed as soon as the control plane's Machine exists: its member is
    // starting, the workers are not made yet.
    until(
        WAIT,
        "the first Machine",
        || !field(&hub, &["get", "ma", "-o", "name"]).is_empty(),
        || describe(&hub),
    );
    hub.kill9();
    hub.spawn();
    until(
        WAIT,
        "the cluster to be Available with 3 workers",
        || {
            field(
                &hub,
                &[
                    "get",
                    "cl",
                    "mid",
                    "-o",
                    "jsonpath={.status.conditions[?(@.type==\"Available\")].status} {.status.workers.availableReplicas}",
                ],
            ) == "True 3"
        },
        || describe(&hub),
    );
    assert_eq!(
        members_under(&hub.data_dir()).len(),
        1,
        "one member process"
    );
    assert_eq!(
        field(&hub, &["get", "ma", "-o", "name"]).lines().count(),
        4,
        "{}",
        describe(&hub)
    );
    let out = common::flotilla(&[
        "cluster",
        "kubeconfig",
        "mid",
        "--kubeconfig",
        hub.kubeconfig.to_str().expect("utf-8"),
    ]);
    let kubeconfig = common::write(
        hub.dir.path(),
        "mid.kubeconfig",
        &String::from_utf8_lossy(&out.stdout),
    );
    // Every node is a Machine's: none doubled, none orphaned.
    let nodes = workload(&kubeconfig, &["get", "nodes", "-o", "name"]);
    let machines = field(
        &hub,
        &[
            "get",
            "ma",
            "-o",
            "jsonpath={range .items[*]}node/{.status.nodeRef.name}{\"\\n\"}{end}",
        ],
    );
    let mut nodes: Vec<&str> = nodes.lines().collect();
    let mut machines: Vec<&str> = machines.lines().collect();
    nodes.sort();
    machines.sort();
    assert_eq!(nodes, machines);
    hub.ok(&["delete", "cl", "mid", "--timeout=60s"]);
    assert!(members_under(&hub.data_dir()).is_empty());
}

/// The namespaces (`ip netns`) whose names start with `prefix`.
fn namespaces_with(prefix: &str) -> Vec<String> {
    std::fs::read_dir("/run/netns")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| n.starts_with(prefix))
                .collect()
        })
        .unwrap_or_default()
}

/// `--runtime netns`: each machine is a node with a network namespace of
/// its own where pods run as processes; a machine scaled away takes its
/// node's network along, and so does the deleted cluster.
#[test]
fn a_netns_cluster_runs_pods_on_its_machines_and_takes_its_network_along() {
    if !common::can_run_netns() {
        return;
    }
    let hub = Server::controlplane(&[]);
    let out = common::flotilla(&[
        "cluster",
        "generate",
        "pods",
        "--runtime",
        "netns",
        "--worker-machine-count",
        "2",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    hub.ok_stdin(&["apply", "-f", "-"], &String::from_utf8_lossy(&out.stdout));
    let available = |workers: u32| format!("True {workers} 1");
    let status = "jsonpath={.status.conditions[?(@.type==\"Available\")].status} {.status.workers.availableReplicas} {.status.controlPlane.availableReplicas}";
    until(
        WAIT,
        "the netns cluster Available with two workers",
        || field(&hub, &["get", "cl", "pods", "-o", status]) == available(2),
        || describe(&hub),
    );
    let prefix = std::fs::read_to_string(hub.data_dir().join("clusters/default/pods/netns-prefix"))
        .expect("the member says which namespaces are its own");
    let prefix = prefix.trim().to_string();
    // The member's own and one per machine.
    assert_eq!(
        namespaces_with(&prefix).len(),
        4,
        "{:?}",
        namespaces_with(&prefix)
    );
    let kubeconfig = workload_kubeconfig(&hub, "pods");
    let apply = std::process::Command::new("kubectl")
        .args(["apply", "-f", "-"])
        .env("KUBECONFIG", &kubeconfig)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin
                .take()
                .expect("stdin")
                .write_all(b"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  replicas: 2\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec:\n      containers: [{name: nginx, image: nginx:1.27, ports: [{containerPort: 80}]}]\n")?;
            c.wait()
        })
        .expect("kubectl apply");
    assert!(apply.success());
    until(
        WAIT,
        "two web pods Running with addresses on the workers",
        || {
            let out = workload(
                &kubeconfig,
                &[
                    "get",
                    "pods",
                    "-l",
                    "app=web",
                    "-o",
                    "jsonpath={range .items[*]}{.status.phase} {.status.podIP}{\"\\n\"}{end}",
                ],
            );
            out.lines()
                .filter(|l| l.starts_with("Running 192.168."))
                .count()
                == 2
        },
        || workload(&kubeconfig, &["get", "pods,nodes", "-o", "wide"]),
    );
    // A pod's process answers on its address, from the node's namespace.
    let ip = workload(
        &kubeconfig,
        &[
            "get",
            "pods",
            "-l",
            "app=web",
            "-o",
            "jsonpath={.items[0].status.podIP}",
        ],
    );
    let node = workload(
        &kubeconfig,
        &[
            "get",
            "pods",
            "-l",
            "app=web",
            "-o",
            "jsonpath={.items[0].spec.nodeName}",
        ],
    );
    assert!(!node.contains("control-plane"), "a worker runs it: {node}");
    let answered = namespaces_with(&prefix).iter().any(|ns| {
        std::process::Command::new("ip")
            .args([
                "netns",
                "exec",
                ns,
                "curl",
                "-s",
                "-m",
                "5",
                &format!("http://{ip}/hello"),
            ])
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("\"pod\":\"web-"))
    });
    assert!(answered, "the pod at {ip} answers");

    hub.ok(&["scale", "md", "pods-md-0", "--replicas", "1"]);
    until(
        WAIT,
        "one worker, its machine's network gone",
        || {
            field(&hub, &["get", "cl", "pods", "-o", status]) == available(1)
                && namespaces_with(&format!("{prefix}-n")).len() == 2
        },
        || format!("{}{:?}", describe(&hub), namespaces_with(&prefix)),
    );
    hub.ok(&["delete", "cl", "pods", "--timeout=60s"]);
    assert!(members_under(&hub.data_dir()).is_empty());
    assert!(
        namespaces_with(&prefix).is_empty(),
        "{:?}",
        namespaces_with(&prefix)
    );
}

/// A member that cannot start is said on its DockerMachine, as CAPD says
/// a container that would not start, and is tried again until it does.
#[test]
fn a_member_that_cannot_start_is_told_and_tried_again() {
    let hub = Server::controlplane(&[]);
    // The endpoint the user chose is taken by someone else.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("addr").port();
    let out = common::flotilla(&["cluster", "generate", "busy", "--worker-machine-count", "0"]);
    assert!(out.status.success());
    let manifests = String::from_utf8_lossy(&out.stdout).replace(
        "kind: DockerCluster\nmetadata:\n  name: busy\n  namespace: default\n",
        &format!("kind: DockerCluster\nmetadata:\n  name: busy\n  namespace: default\nspec:\n  controlPlaneEndpoint: {{host: 127.0.0.1, port: {port}}}\n"),
    );
    assert!(manifests.contains(&format!("port: {port}")), "{manifests}");
    hub.ok_stdin(&["apply", "-f", "-"], &manifests);
    let reason = "jsonpath={.items[0].status.conditions[?(@.type==\"Ready\")].reason}: {.items[0].status.conditions[?(@.type==\"Ready\")].message}";
    until(
        WAIT,
        "the DockerMachine to say why its member exited",
        || {
            let said = field(&hub, &["get", "dockermachines", "-o", reason]);
            said.starts_with("ContainerProvisioningFailed: the cluster's member exited:")
                && said.contains(&port.to_string())
        },
        || describe(&hub),
    );
    drop(taken);
    until(
        WAIT,
        "the cluster Available once the port is free",
        || {
            field(
                &hub,
                &[
                    "get",
                    "cl",
                    "busy",
                    "-o",
                    "jsonpath={.status.conditions[?(@.type==\"Available\")].status}",
                ],
            ) == "True"
        },
        || describe(&hub),
    );
    hub.ok(&["delete", "cl", "busy", "--timeout=60s"]);
    assert!(members_under(&hub.data_dir()).is_empty());
}

/// The pids of the control plane members of several machines under `dir`
/// (they stand for the lease), each with the machine its data dir names.
fn replicas_under(dir: &std::path::Path) -> Vec<(u32, String)> {
    members_under(dir)
        .into_iter()
        .filter_map(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let args: Vec<String> = cmdline
                .split(|b| *b == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            if !args.iter().any(|a| a == "--leader-elect") {
                return None;
            }
            let at = args.iter().position(|a| a == "--data-dir")?;
            let machine = std::path::Path::new(args.get(at + 1)?)
                .file_name()?
                .to_string_lossy()
                .into_owned();
            Some((pid, machine))
        })
        .collect()
}

#[test]
fn a_control_plane_of_three_machines_serves_from_each_and_outlives_its_leader() {
    let hub = Server::controlplane(&[]);
    // clusterctl's development flavour: three control plane machines.
    hub.ok(&[
        "apply",
        "-f",
        &fixture("clusterclass-quick-start.v1.13.5.yaml"),
        "-f",
        &fixture("quickstart-development-cluster.v1.13.5.yaml"),
    ]);
    let available = |control_plane: &str| {
        field(
            &hub,
            &[
                "get",
                "cl",
                "capi-quickstart",
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Available\")].status} {.status.controlPlane.availableReplicas}",
            ],
        ) == format!("True {control_plane}")
    };
    until(
        WAIT,
        "three control plane machines Available",
        || available("3"),
        || describe(&hub),
    );
    // One API server per control plane machine, on one etcd.
    let replicas = replicas_under(&hub.data_dir());
    assert_eq!(replicas.len(), 3, "{replicas:?}\n{}", describe(&hub));
    let kubeconfig = workload_kubeconfig(&hub, "capi-quickstart");
    let control_plane_nodes = workload(
        &kubeconfig,
        &[
            "get",
            "nodes",
            "-l",
            "node-role.kubernetes.io/control-plane",
            "-o",
            "name",
        ],
    );
    for (_, machine) in &replicas {
        assert_has(&control_plane_nodes, &[&format!("node/{machine}")]);
    }
    // Whichever holds kube-controller-manager's lease runs the nodes and
    // controllers; the endpoint passes requests to any.
    let holder = || {
        workload(
            &kubeconfig,
            &[
                "get",
                "lease",
                "-n",
                "kube-system",
                "kube-controller-manager",
                "-o",
                "jsonpath={.spec.holderIdentity}",
            ],
        )
    };
    let mut leader = String::new();
    until(
        WAIT,
        "a leader",
        || {
            leader = holder();
            !leader.is_empty()
        },
        || describe(&hub),
    );
    let leader_machine = leader.split('_').next().unwrap_or_default().to_string();
    let (leader_pid, _) = replicas
        .iter()
        .find(|(_, m)| *m == leader_machine)
        .unwrap_or_else(|| {
            panic!("the lease holder {leader} is a control plane machine of {replicas:?}")
        })
        .clone();

    // The leader is killed: another takes over, and the cluster goes on
    // doing its work through the same endpoint.
    let killed = std::process::Command::new("kill")
        .args(["-9", &leader_pid.to_string()])
        .status()
        .expect("kill");
    assert!(killed.success(), "kill -9 {leader_pid}");
    workload(
        &kubeconfig,
        &[
            "create",
            "deployment",
            "web",
            "--image=nginx",
            "--replicas=2",
        ],
    );
    until(
        WAIT,
        "the Deployment's pods Running after the leader died",
        || {
            workload(
                &kubeconfig,
                &[
                    "get",
                    "deployment",
                    "web",
                    "-o",
                    "jsonpath={.status.readyReplicas}",
                ],
            ) == "2"
        },
        || format!("lease: {}\n{}", holder(), describe(&hub)),
    );
    let successor = holder();
    assert_ne!(successor, leader, "the lease moved");
    // The dead member is started again, as CAPD restarts its container.
    until(
        WAIT,
        "three control plane members again",
        || {
            let now = replicas_under(&hub.data_dir());
            now.len() == 3 && now.iter().all(|(pid, _)| *pid != leader_pid)
        },
        || describe(&hub),
    );

    // One machine fewer: its member goes with it.
    hub.ok(&[
        "patch",
        "cl",
        "capi-quickstart",
        "--type=json",
        "-p",
        r#"[{"op": "replace", "path": "/spec/topology/controlPlane/replicas", "value": 1}]"#,
    ]);
    until(
        WAIT,
        "one control plane member",
        || replicas_under(&hub.data_dir()).len() == 1 && available("1"),
        || describe(&hub),
    );
    assert_eq!(
        workload(
            &kubeconfig,
            &[
                "get",
                "deployment",
                "web",
                "-o",
                "jsonpath={.status.readyReplicas}"
            ]
        ),
        "2"
    );
    hub.ok(&["delete", "cl", "capi-quickstart", "--timeout=90s"]);
    assert!(
        members_under(&hub.data_dir()).is_empty(),
        "members, endpoint or etcd left: {:?}",
        members_under(&hub.data_dir())
    );
}
