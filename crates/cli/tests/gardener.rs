//! Gardener Shoots on the Cluster API machinery: provider-local's example
//! manifests, applied verbatim, make a Shoot whose cluster is a Flotilla
//! member that joins the fleet. Gardener's users see its last operation
//! and health in `kubectl get shoots`, fetch its admin kubeconfig through
//! `shoots/adminkubeconfig`, hibernate and wake it, scale its pool and
//! delete it; what Gardener's admission refuses is refused.

mod common;

use std::path::Path;
use std::time::Duration;

use base64::Engine;
use common::lifecycle::{field, members_under, workload};
use common::{Server, assert_has, until};

const WAIT: Duration = Duration::from_secs(90);
const NS: &str = "garden-local";
const ADMIN_KUBECONFIG: &str =
    "/apis/core.gardener.cloud/v1beta1/namespaces/garden-local/shoots/local/adminkubeconfig";

fn fixture(name: &str) -> String {
    common::lifecycle::fixture("gardener", name)
}

fn describe(hub: &Server) -> String {
    let out = hub.kubectl(&["get", "shoots,cl,md,ma", "-n", NS, "-o", "wide"]);
    let yaml = hub.kubectl(&["get", "shoot", "local", "-n", NS, "-o", "yaml"]);
    format!(
        "{}{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&yaml.stdout)
    )
}

fn shoot_field(hub: &Server, path: &str) -> String {
    field(
        hub,
        &[
            "get",
            "shoot",
            "local",
            "-n",
            NS,
            "-o",
            &format!("jsonpath={path}"),
        ],
    )
}

/// Waits for the Shoot's last operation to read `operation` ("Create
/// Succeeded 100").
fn until_operation(hub: &Server, operation: &str) {
    until(
        WAIT,
        &format!("the Shoot's last operation to be {operation}"),
        || {
            shoot_field(
                hub,
                "{.status.lastOperation.type} {.status.lastOperation.state} {.status.lastOperation.progress}",
            ) == operation
        },
        || describe(hub),
    );
}

/// POSTs `request` to the Shoot's `subresource` (`adminkubeconfig`,
/// `viewerkubeconfig`): the answer, and its kubeconfig written to a file.
fn request_kubeconfig(
    hub: &Server,
    subresource: &str,
    request: &str,
) -> (serde_json::Value, std::path::PathBuf) {
    let path = ADMIN_KUBECONFIG.replace("adminkubeconfig", subresource);
    let answer: serde_json::Value =
        serde_json::from_str(&hub.ok(&["create", "--raw", &path, "-f", request]))
            .expect("a kubeconfig request's answer");
    let text = base64::engine::general_purpose::STANDARD
        .decode(answer["status"]["kubeconfig"].as_str().expect("kubeconfig"))
        .expect("base64");
    let file = common::write(
        hub.dir.path(),
        &format!("{subresource}.yaml"),
        &String::from_utf8(text).expect("utf-8"),
    );
    (answer, file)
}

/// The Shoot's nodes, through its admin kubeconfig.
fn nodes(kubeconfig: &Path) -> usize {
    workload(kubeconfig, &["get", "nodes", "-o", "name"])
        .lines()
        .count()
}

#[test]
fn provider_locals_shoot_is_provisioned_reported_hibernated_and_deleted() {
    let hub = Server::controlplane(&[]);
    hub.ok(&["create", "namespace", "garden"]);
    for f in [
        "project.yaml",
        "cloudprofile.yaml",
        "seed.yaml",
        "secretbinding.yaml",
        "credentialsbinding.yaml",
    ] {
        hub.ok(&["apply", "-f", &fixture(f)]);
    }

    // The Project is Ready with its namespace; one that names none gets
    // Gardener's `garden-<name>`.
    until(
        WAIT,
        "the Project to be Ready",
        || {
            field(
                &hub,
                &["get", "project", "local", "-o", "jsonpath={.status.phase}"],
            ) == "Ready"
        },
        || hub.ok(&["get", "projects", "-o", "yaml"]),
    );
    hub.ok_stdin(
        &["apply", "-f", "-"],
        "apiVersion: core.gardener.cloud/v1beta1\nkind: Project\nmetadata: {name: dev}\nspec: {}\n",
    );
    until(
        WAIT,
        "the dev project's namespace",
        || {
            field(
                &hub,
                &[
                    "get",
                    "project",
                    "dev",
                    "-o",
                    "jsonpath={.spec.namespace} {.status.phase}",
                ],
            ) == "garden-dev Ready"
                && field(
                    &hub,
                    &[
                        "get",
                        "namespace",
                        "garden-dev",
                        "-o",
                        "jsonpath={.metadata.labels.project\\.gardener\\.cloud/name}",
                    ],
                ) == "dev"
        },
        || hub.ok(&["get", "projects", "-o", "yaml"]),
    );

    // What Gardener's admission refuses, refused before anything is made.
    let shoot = std::fs::read_to_string(fixture("shoot.yaml")).expect("shoot.yaml");
    for (from, to, why) in [
        (
            "    name: local\n  secretBindingName",
            "    name: nowhere\n  secretBindingName",
            "could not find referenced cloud profile",
        ),
        (
            "  kubernetes:\n",
            "  kubernetes:\n    version: 1.99.0\n",
            "spec.kubernetes.version: Unsupported value: \"1.99.0\": supported values: \"1.32.0\"",
        ),
        (
            "  kubernetes:\n",
            "  hibernation:\n    schedules:\n    - start: \"every evening\"\n  kubernetes:\n",
            "spec.hibernation.schedules[0].start: Invalid value",
        ),
    ] {
        let refused = hub.kubectl_stdin(&["apply", "-f", "-"], Some(&shoot.replace(from, to)));
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(!refused.status.success(), "{to}");
        assert!(stderr.contains(why), "{stderr}");
    }
    assert!(hub.ok(&["get", "shoots", "-A"]).is_empty());

    // The example Shoot, as it is: scheduled to the Seed, its version the
    // profile's newest, its networks the Seed's defaults.
    hub.ok(&["apply", "-f", &fixture("shoot.yaml")]);
    until_operation(&hub, "Create Succeeded 100");
    assert_eq!(
        shoot_field(
            &hub,
            "{.spec.seedName} {.spec.kubernetes.version} {.spec.networking.pods} {.spec.networking.services} {.status.technicalID}"
        ),
        "local 1.32.0 10.3.0.0/16 10.4.0.0/16 shoot--local--local"
    );
    assert_eq!(
        shoot_field(&hub, "{range .status.conditions[*]}{.type}={.status} {end}"),
        "APIServerAvailable=True ControlPlaneHealthy=True ObservabilityComponentsHealthy=True EveryNodeReady=True SystemComponentsHealthy=True"
    );
    until(
        WAIT,
        "the health label",
        || shoot_field(&hub, "{.metadata.labels.shoot\\.gardener\\.cloud/status}") == "healthy",
        || describe(&hub),
    );
    let table = hub.ok(&["get", "shoots", "-n", NS]);
    assert_has(
        &table,
        &[
            "CLOUDPROFILE",
            "PROVIDER",
            "REGION",
            "K8S VERSION",
            "HIBERNATION",
            "LAST OPERATION",
            "STATUS",
            "AGE",
            "Awake",
            "Create Succeeded (100%)",
            "healthy",
        ],
    );
    assert_has(
        &hub.ok(&["get", "shoots", "-n", NS, "-o", "wide"]),
        &["SEED", "APISERVER", "CONTROL", "NODES", "SYSTEM"],
    );
    // Its cluster joined the fleet under the Shoot's name.
    hub.ok(&["get", "clusters.cluster.karmada.io", "local"]);

    // Discovery lists the kubeconfig subresources as Gardener's API server
    // does (`kubectl api-resources`, clients that check before they ask).
    let discovery: serde_json::Value =
        serde_json::from_str(&hub.ok(&["get", "--raw", "/apis/core.gardener.cloud/v1beta1"]))
            .expect("an APIResourceList");
    for (name, kind) in [
        ("shoots/adminkubeconfig", "AdminKubeconfigRequest"),
        ("shoots/viewerkubeconfig", "ViewerKubeconfigRequest"),
    ] {
        let listed = discovery["resources"]
            .as_array()
            .and_then(|l| l.iter().find(|r| r["name"] == name))
            .unwrap_or_else(|| panic!("{name} is not in discovery: {discovery}"));
        assert_eq!(listed["kind"], kind);
        assert_eq!(listed["group"], "authentication.gardener.cloud");
        assert_eq!(listed["verbs"], serde_json::json!(["create"]));
    }

    // The admin kubeconfig, as Gardener's users fetch it.
    let request = common::write(
        hub.dir.path(),
        "request.json",
        r#"{"apiVersion": "authentication.gardener.cloud/v1alpha1", "kind": "AdminKubeconfigRequest", "spec": {"expirationSeconds": 1000}}"#,
    );
    let request = request.display().to_string();
    let (answer, kubeconfig) = request_kubeconfig(&hub, "adminkubeconfig", &request);
    assert_eq!(answer["kind"], "AdminKubeconfigRequest");
    let expires: jiff::Timestamp = answer["status"]["expirationTimestamp"]
        .as_str()
        .expect("expirationTimestamp")
        .parse()
        .expect("a time");
    let left = expires.as_second() - jiff::Timestamp::now().as_second();
    assert!((900..=1000).contains(&left), "expires in {left} s");
    assert_eq!(nodes(&kubeconfig), 2, "a control plane node and a worker");
    // A viewer's kubeconfig reads but does not write.
    let (viewer, viewer_kubeconfig) = request_kubeconfig(&hub, "viewerkubeconfig", &request);
    assert_eq!(viewer["kind"], "ViewerKubeconfigRequest");
    until(
        WAIT,
        "the viewer to read the shoot's nodes",
        || nodes(&viewer_kubeconfig) == 2,
        || describe(&hub),
    );
    let write = std::process::Command::new("kubectl")
        .args(["create", "namespace", "by-a-viewer"])
        .env("KUBECONFIG", &viewer_kubeconfig)
        .output()
        .expect("kubectl");
    assert!(!write.status.success());
    assert_has(&String::from_utf8_lossy(&write.stderr), &["forbidden"]);

    // Too short a life, and a user who may not ask, are refused.
    let short = common::write(
        hub.dir.path(),
        "short.json",
        r#"{"spec": {"expirationSeconds": 599}}"#,
    );
    let out = hub.kubectl(&[
        "create",
        "--raw",
        ADMIN_KUBECONFIG,
        "-f",
        &short.display().to_string(),
    ]);
    assert_has(
        &String::from_utf8_lossy(&out.stderr),
        &[
            "spec.expirationSeconds",
            "may not specify a duration less than 10 minutes",
        ],
    );
    let out = hub.kubectl(&[
        "create",
        "--raw",
        ADMIN_KUBECONFIG,
        "-f",
        &request,
        "--as",
        "jane",
    ]);
    assert_has(&String::from_utf8_lossy(&out.stderr), &["Forbidden"]);

    // The pool follows its minimum.
    hub.ok(&[
        "patch",
        "shoot",
        "local",
        "-n",
        NS,
        "--type",
        "json",
        "-p",
        r#"[{"op": "replace", "path": "/spec/provider/workers/0/minimum", "value": 2}]"#,
    ]);
    until_operation(&hub, "Reconcile Succeeded 100");
    assert_eq!(nodes(&kubeconfig), 3);

    // Hibernation takes the workers away and brings them back.
    let hibernate = |on: bool| {
        hub.ok(&[
            "patch",
            "shoot",
            "local",
            "-n",
            NS,
            "--type",
            "merge",
            "-p",
            &format!(r#"{{"spec": {{"hibernation": {{"enabled": {on}}}}}}}"#),
        ]);
    };
    hibernate(true);
    until(
        WAIT,
        "the Shoot to be hibernated",
        || {
            shoot_field(&hub, "{.status.hibernated} {.status.lastOperation.state}")
                == "true Succeeded"
        },
        || describe(&hub),
    );
    assert_has(&hub.ok(&["get", "shoots", "-n", NS]), &["Hibernated"]);
    assert_eq!(nodes(&kubeconfig), 1, "only the control plane");
    hibernate(false);
    until(
        WAIT,
        "the Shoot to wake up",
        || {
            shoot_field(&hub, "{.status.hibernated} {.status.lastOperation.state}")
                == "false Succeeded"
                && nodes(&kubeconfig) == 3
        },
        || describe(&hub),
    );
    assert_has(&hub.ok(&["get", "shoots", "-n", NS]), &["Awake"]);

    // Deleted: the cluster, its member processes and its fleet entry go.
    // Not without Gardener's confirmation.
    assert!(!members_under(&hub.data_dir()).is_empty());
    let refused = hub.kubectl(&["delete", "shoot", "local", "-n", NS]);
    assert!(!refused.status.success());
    assert_has(
        &String::from_utf8_lossy(&refused.stderr),
        &[
            "Forbidden",
            "must have a \"confirmation.gardener.cloud/deletion\" annotation to delete",
        ],
    );
    assert_eq!(shoot_field(&hub, "{.metadata.name}"), "local");
    hub.ok(&[
        "annotate",
        "shoot",
        "local",
        "-n",
        NS,
        "confirmation.gardener.cloud/deletion=true",
    ]);
    hub.ok(&["delete", "shoot", "local", "-n", NS, "--timeout", "90s"]);
    assert!(hub.ok(&["get", "cl,ma,md", "-n", NS]).is_empty());
    until(
        WAIT,
        "the cluster to leave the fleet and its processes to stop",
        || {
            !hub.kubectl(&["get", "clusters.cluster.karmada.io", "local"])
                .status
                .success()
                && members_under(&hub.data_dir()).is_empty()
        },
        || describe(&hub),
    );
}
