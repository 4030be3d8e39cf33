//! `flotilla up`: a local fleet in one command, stopped with Ctrl-C and
//! resumed, as a newcomer would use it.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::up::Up;
use common::{assert_has, flotilla, wait_for};

const WAIT: Duration = Duration::from_secs(120);

fn kubectl(kubeconfig: &Path, args: &[&str]) -> std::process::Output {
    // A discovery cache of the fleet's own: the OS hands ports out again,
    // and kubectl's shared cache would answer for another test's server.
    let cache = kubeconfig.with_file_name("kube-cache");
    Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--cache-dir")
        .arg(cache)
        .args(args)
        .output()
        .expect("run kubectl")
}

fn ok(kubeconfig: &Path, args: &[&str]) -> String {
    let out = kubectl(kubeconfig, args);
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn ready_fleet(up: &mut Up, kubeconfig: &Path) {
    up.wait_ready();
    let clusters = ok(kubeconfig, &["get", "clusters"]);
    for line in ["member1", "member2", "member3"] {
        let row = clusters
            .lines()
            .find(|l| l.starts_with(line))
            .unwrap_or_else(|| panic!("{line} missing:\n{clusters}"));
        assert!(row.contains("True"), "{row}");
    }
    assert_has(&clusters, &["Push", "Pull"]);
}

#[test]
fn up_starts_a_fleet_that_stops_on_ctrl_c_and_resumes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("fleet");
    let kubeconfig = dir.join("kubeconfig");
    let mut up = Up::start(&dir);
    ready_fleet(&mut up, &kubeconfig);
    let output = up.output();
    assert_has(
        &output,
        &[
            "a new fleet",
            "control plane   ready",
            "member3         Ready    Pull mode",
            "export KUBECONFIG=",
        ],
    );
    // One kubeconfig: the hub (current) and a context per member.
    let contexts = ok(&kubeconfig, &["config", "get-contexts", "-o", "name"]);
    assert_eq!(
        contexts.lines().collect::<Vec<_>>(),
        ["flotilla", "member1", "member2", "member3"]
    );
    assert_eq!(
        ok(&kubeconfig, &["config", "current-context"]).trim(),
        "flotilla"
    );
    let regions = ok(
        &kubeconfig,
        &["get", "clusters", "-o", "jsonpath={.items[*].spec.region}"],
    );
    assert_eq!(regions, "us-east eu-west ap-south");
    let nodes = ok(&kubeconfig, &["--context", "member3", "get", "nodes"]);
    assert_has(&nodes, &["member3-node-0", "Ready"]);
    // The seeds' KubeFed manifest applies to the fleet as started.
    let federated = "apiVersion: types.kubefed.io/v1beta1\nkind: FederatedDeployment\nmetadata: {name: payment-api, namespace: default}\nspec:\n  template:\n    metadata: {labels: {app: payment-api}}\n    spec:\n      replicas: 3\n      selector: {matchLabels: {app: payment-api}}\n      template:\n        metadata: {labels: {app: payment-api}}\n        spec: {containers: [{name: payment-api, image: myregistry/payment-api:v2.1.0}]}\n  placement:\n    clusters: [{name: member1}, {name: member2}]\n";
    let fd = tmp.path().join("fd.yaml");
    std::fs::write(&fd, federated).unwrap();
    ok(&kubeconfig, &["apply", "-f", fd.to_str().unwrap()]);
    assert_has(&output, &["front ends: kubefed, argocd"]);
    // Something to find again after the restart.
    let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: kept, namespace: default}\ndata: {a: \"1\"}\n";
    let f = tmp.path().join("cm.yaml");
    std::fs::write(&f, cm).unwrap();
    ok(&kubeconfig, &["apply", "-f", f.to_str().unwrap()]);

    // The ports the OS chose at the first start are kept in fleet.json.
    let servers = ok(
        &kubeconfig,
        &[
            "config",
            "view",
            "-o",
            "jsonpath={.clusters[*].cluster.server}",
        ],
    );
    let shape = std::fs::read_to_string(dir.join("fleet.json")).unwrap();
    for server in servers.split_whitespace() {
        let port = server.rsplit(':').next().unwrap();
        assert!(
            shape.contains(&format!("\"port\": {port}"))
                || shape.contains(&format!("\"hub_port\": {port}")),
            "{server} not kept in:\n{shape}"
        );
    }

    // Ctrl-C: everything stops.
    up.signal("-INT");
    assert!(up.wait().success(), "{}", up.output());
    assert_has(&up.output(), &["stopping the fleet", "stopped"]);
    for context in ["flotilla", "member1", "member3"] {
        let out = kubectl(
            &kubeconfig,
            &["--context", context, "get", "ns", "--request-timeout=2s"],
        );
        assert!(!out.status.success(), "{context} still answers");
    }

    // Again: the same fleet, resumed, its front ends turned off.
    let mut again = Up::start_with(&dir, &["--frontends", "none"]);
    ready_fleet(&mut again, &kubeconfig);
    assert_has(&again.output(), &["resuming the fleet", "front ends: none"]);
    // What they made stays; a new object of theirs says how to turn them on.
    ok(&kubeconfig, &["get", "federateddeployment", "payment-api"]);
    let another = tmp.path().join("another.yaml");
    std::fs::write(&another, federated.replace("payment-api", "checkout")).unwrap();
    let refused = kubectl(&kubeconfig, &["create", "-f", another.to_str().unwrap()]);
    assert!(!refused.status.success());
    assert_has(
        &String::from_utf8_lossy(&refused.stderr),
        &[
            "Forbidden",
            "served by the kubefed front end, which is off",
            "flotilla up --frontends kubefed",
        ],
    );
    assert_has(
        &std::fs::read_to_string(dir.join("fleet.json")).unwrap(),
        &["\"frontends\": []"],
    );
    assert_eq!(
        ok(
            &kubeconfig,
            &[
                "config",
                "view",
                "-o",
                "jsonpath={.clusters[*].cluster.server}"
            ],
        ),
        servers,
        "the servers moved on resume"
    );
    assert_eq!(
        ok(
            &kubeconfig,
            &["get", "configmap", "kept", "-o", "jsonpath={.data.a}"]
        ),
        "1"
    );
    // A fleet of another shape is refused, and the running one is kept.
    let other = flotilla(&["up", "--data-dir", dir.to_str().unwrap(), "--members", "2"]);
    assert!(!other.status.success());
    assert_has(
        &String::from_utf8_lossy(&other.stderr),
        &["has 3 members, not 2", "--data-dir"],
    );
    // Killed outright, `up` takes its processes with it.
    again.signal("-KILL");
    again.wait();
    wait_for(WAIT, "the members to stop with it", || {
        !kubectl(
            &kubeconfig,
            &["--context", "member1", "get", "ns", "--request-timeout=2s"],
        )
        .status
        .success()
    });
}

const WALKTHROUGH: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {app: web}
spec:
  replicas: 4
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
        - name: web
          image: nginx:1.27
          resources:
            requests: {cpu: 100m, memory: 64Mi}
---
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata:
  name: web
spec:
  resourceSelectors:
    - {apiVersion: apps/v1, kind: Deployment, name: web}
  placement:
    clusterAffinity:
      clusterNames: [member1, member2, member3]
    replicaScheduling:
      replicaSchedulingType: Divided
      replicaDivisionPreference: Weighted
      weightPreference:
        staticWeightList:
          - {targetCluster: {clusterNames: [member1, member2]}, weight: 1}
          - {targetCluster: {clusterNames: [member3]}, weight: 2}
---
apiVersion: policy.karmada.io/v1alpha1
kind: OverridePolicy
metadata:
  name: eu-mirror
spec:
  resourceSelectors:
    - {apiVersion: apps/v1, kind: Deployment, name: web}
  overrideRules:
    - targetCluster: {clusterNames: [member2]}
      overriders:
        imageOverrider:
          - {component: Registry, operator: replace, value: mirror.eu.example.com}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: us-only
data: {region: us}
---
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata:
  name: us-only
spec:
  resourceSelectors:
    - {apiVersion: v1, kind: ConfigMap, name: us-only}
  placement:
    clusterAffinity:
      fieldSelector:
        matchExpressions:
          - {key: region, operator: In, values: [us-east]}
"#;

/// `flotilla ARGS` against the fleet's kubeconfig; its stdout, or a
/// failure with its stderr.
fn cli(kubeconfig: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .expect("run flotilla");
    assert!(
        out.status.success(),
        "flotilla {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn cli_fails(kubeconfig: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .expect("run flotilla");
    assert!(!out.status.success(), "flotilla {args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn row<'a>(table: &'a str, starts: &str) -> &'a str {
    table
        .lines()
        .find(|l| l.starts_with(starts))
        .unwrap_or_else(|| panic!("no row {starts:?} in:\n{table}"))
}

#[test]
fn the_readme_walkthrough_plans_places_and_explains() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("fleet");
    let kubeconfig = dir.join("kubeconfig");
    let mut up = Up::start(&dir);
    ready_fleet(&mut up, &kubeconfig);
    let manifests = tmp.path().join("web.yaml");
    std::fs::write(&manifests, WALKTHROUGH).unwrap();
    let file = manifests.to_str().unwrap();

    let clusters = cli(&kubeconfig, &["clusters"]);
    assert!(!clusters.contains('\x1b'), "colours in a pipe");
    let m1 = row(&clusters, "member1 ");
    for field in ["Push", "True", "3/3", "us-east", "us-east-a,us-east-b"] {
        assert!(m1.contains(field), "{field} in {m1}");
    }
    assert!(row(&clusters, "member3 ").contains("Pull"));

    // The plan: where each object would go, and nothing written.
    let plan = cli(&kubeconfig, &["plan", "-f", file]);
    assert_has(
        &plan,
        &[
            "apps/v1 Deployment default/web",
            "PropagationPolicy default/web (in the manifests)",
            "Divided, Weighted by static weights (member1, member2: 1, member3: 2)",
            "member1    1 replica\n",
            "member2    1 replica   overrides: OverridePolicy/eu-mirror",
            "member3    2 replicas",
            "v1 ConfigMap default/us-only",
            "not member2: did not match the placement cluster affinity constraint",
        ],
    );
    assert!(
        !kubectl(&kubeconfig, &["get", "deploy", "web"])
            .status
            .success(),
        "plan wrote the template"
    );

    ok(&kubeconfig, &["apply", "-f", file]);
    wait_for(WAIT, "web running in every member", || {
        let out = Command::new(env!("CARGO_BIN_EXE_flotilla"))
            .args(["get", "deploy", "web"])
            .env("KUBECONFIG", &kubeconfig)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let ready = |cluster: &str| {
            text.lines()
                .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>())
                .find(|cells| cells.first() == Some(&cluster))
                .map(|cells| cells[2].to_string())
        };
        ready("member1").as_deref() == Some("1/1")
            && ready("member2").as_deref() == Some("1/1")
            && ready("member3").as_deref() == Some("2/2")
    });
    let got = cli(&kubeconfig, &["get", "deploy", "-A"]);
    assert_has(
        &got,
        &[
            "CLUSTER   NAMESPACE   NAME",
            "ADOPTION",
            "member3   default     web ",
        ],
    );
    let cms = cli(
        &kubeconfig,
        &["get", "cm", "us-only", "-C", "member1,member2"],
    );
    assert!(row(&cms, "member1 ").ends_with('Y'), "{cms}");
    assert!(!cms.contains("member2"), "{cms}");

    // The hub's view follows the members' reports (member3's through its
    // agent), a moment behind what the members show.
    wait_for(WAIT, "the hub to report member3's replicas ready", || {
        let d = cli(&kubeconfig, &["describe", "placement", "deploy/web"]);
        d.lines()
            .any(|l| l.starts_with("member3 ") && l.contains("2/2 ready"))
    });
    let described = cli(&kubeconfig, &["describe", "placement", "deploy/web"]);
    assert_has(
        &described,
        &[
            "Template:     apps/v1 Deployment default/web",
            "Policy:       PropagationPolicy default/web",
            "Replicas:     4",
            "Scheduled:    True",
        ],
    );
    assert!(row(&described, "member2 ").contains("OverridePolicy/eu-mirror"));
    let us_only = cli(&kubeconfig, &["describe", "placement", "configmap/us-only"]);
    assert_has(
        &us_only,
        &[
            "Not placed in:",
            "did not match the placement cluster affinity constraint",
        ],
    );

    // Mistakes get a cause and a fix.
    assert_has(
        &cli_fails(&kubeconfig, &["get", "frobs"]),
        &["doesn't have a resource type \"frobs\""],
    );
    assert_has(
        &cli_fails(&kubeconfig, &["describe", "placement", "web"]),
        &["not KIND/NAME", "deploy/nginx"],
    );
    assert_has(
        &cli_fails(&kubeconfig, &["describe", "placement", "deploy/nope"]),
        &["deployments \"nope\" not found in namespace default"],
    );
    assert_has(
        &cli_fails(&kubeconfig, &["plan", "-f", "/nonexistent.yaml"]),
        &["cannot read /nonexistent.yaml"],
    );
    assert_has(&cli(&kubeconfig, &["completion", "bash"]), &["_flotilla()"]);
}

/// `flotilla up`'s stderr and whether it failed, for inputs it must refuse
/// before starting anything.
fn up_refuses(dir: &Path) -> String {
    let out = flotilla(&["up", "--data-dir", dir.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "flotilla up started: {err}");
    err
}

#[test]
fn up_says_which_port_or_data_dir_is_unavailable_and_how_to_choose_another() {
    let tmp = tempfile::tempdir().unwrap();

    // A data dir that is a file.
    let file = tmp.path().join("not-a-dir");
    std::fs::write(&file, "x").unwrap();
    let err = up_refuses(&file);
    assert_has(
        &err,
        &[
            &format!("cannot use {} as the fleet's data dir", file.display()),
            "--data-dir",
        ],
    );

    // A fleet whose control-plane port another process holds now.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let fleet = tmp.path().join("fleet");
    std::fs::create_dir_all(&fleet).unwrap();
    std::fs::write(
        fleet.join("fleet.json"),
        format!(
            r#"{{"hub_port": {port}, "members": [{{"name": "member1", "region": "us-east", "pull": false, "port": 1}}]}}"#
        ),
    )
    .unwrap();
    let err = up_refuses(&fleet);
    assert_has(
        &err,
        &[
            &format!("port 127.0.0.1:{port} of the control plane"),
            "is unavailable",
            "--data-dir",
        ],
    );
    // Nothing was started or written on the way.
    assert!(!fleet.join("hub").exists(), "a half-made fleet");
    drop(taken);

    // A fleet written by a newer Flotilla.
    let newer = tmp.path().join("newer");
    std::fs::create_dir_all(&newer).unwrap();
    std::fs::write(
        newer.join("fleet.json"),
        r#"{"format": 99, "hub_port": 1, "members": []}"#,
    )
    .unwrap();
    assert_has(
        &up_refuses(&newer),
        &["written by a newer Flotilla (fleet format 99", "--data-dir"],
    );
}

/// A store written by a newer Flotilla is refused, untouched; one from
/// before the format was recorded opens and is stamped.
#[test]
fn a_store_in_an_unknown_format_is_refused_and_left_untouched() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let db = dir.join("flotilla.db");
    let set_version = |v: u32| {
        let status = Command::new("python3")
            .args([
                "-c",
                "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute('CREATE TABLE IF NOT EXISTS log (revision INTEGER PRIMARY KEY, key TEXT NOT NULL, deleted INTEGER NOT NULL, create_revision INTEGER NOT NULL, prev_revision INTEGER, value BLOB NOT NULL)'); c.execute('CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL)'); c.execute('PRAGMA user_version=%d' % int(sys.argv[2])); c.commit()",
                db.to_str().unwrap(),
                &v.to_string(),
            ])
            .status()
            .expect("python3");
        assert!(status.success());
    };
    let version = || {
        let out = Command::new("python3")
            .args([
                "-c",
                "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('PRAGMA user_version').fetchone()[0])",
                db.to_str().unwrap(),
            ])
            .output()
            .expect("python3");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    std::fs::create_dir_all(&dir).unwrap();
    set_version(99);
    let out = flotilla(&[
        "apiserver",
        "--data-dir",
        dir.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert_has(
        &err,
        &["written by a newer Flotilla (store format 99", "--data-dir"],
    );
    assert_eq!(version(), "99", "the refused store was changed");

    // Format 0: a store from before the format was recorded.
    set_version(0);
    let mut server = Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(["apiserver", "--data-dir", dir.to_str().unwrap()])
        .args(["--listen", "127.0.0.1:0", "--write-kubeconfig"])
        .arg(tmp.path().join("kubeconfig"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(Duration::from_secs(60), "the server to answer", || {
        tmp.path().join("kubeconfig").exists()
    });
    let _ = server.kill();
    let _ = server.wait();
    assert_eq!(version(), "2");
}

/// `flotilla up --runtime netns`: the fleet's pods run, and Ctrl-C leaves
/// no namespace behind. Needs root, as the netns runtime does (CI has it;
/// FLOTILLA_SKIP_NETNS_AS_ROOT=1 skips it elsewhere).
#[test]
fn up_with_the_netns_runtime_runs_pods_that_answer() {
    if std::env::var("FLOTILLA_SKIP_NETNS_AS_ROOT").as_deref() == Ok("1") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("fleet");
    let mut up = Up::start_with(&dir, &["--runtime", "netns", "--members", "2"]);
    up.wait_ready();
    let kubeconfig = dir.join("kubeconfig");
    ok(
        &kubeconfig,
        &[
            "--context",
            "member2",
            "create",
            "deployment",
            "web",
            "--image=nginx:1.27",
            "--port=80",
        ],
    );
    ok(
        &kubeconfig,
        &[
            "--context",
            "member2",
            "expose",
            "deployment",
            "web",
            "--port=80",
        ],
    );
    ok(
        &kubeconfig,
        &[
            "--context",
            "member2",
            "run",
            "client",
            "--image=busybox",
            "--command",
            "--",
            "sleep",
            "3600",
        ],
    );
    ok(
        &kubeconfig,
        &[
            "--context",
            "member2",
            "rollout",
            "status",
            "deployment/web",
            "--timeout=60s",
        ],
    );
    ok(
        &kubeconfig,
        &[
            "--context",
            "member2",
            "wait",
            "--for=condition=Ready",
            "pod/client",
            "--timeout=60s",
        ],
    );
    let answer = ok(
        &kubeconfig,
        &[
            "--context",
            "member2",
            "exec",
            "client",
            "--",
            "curl",
            "-s",
            "-m",
            "5",
            "web/",
        ],
    );
    assert_has(&answer, &["\"cluster\":\"member2\"", "\"pod\":\"web-"]);
    // The members are connected: a pod of member1 reaches member2's
    // Service by its ClusterIP, through the gateways' tunnel.
    let web_ip = ok(
        &kubeconfig,
        &[
            "--context",
            "member2",
            "get",
            "svc",
            "web",
            "-o=jsonpath={.spec.clusterIP}",
        ],
    );
    ok(
        &kubeconfig,
        &[
            "--context",
            "member1",
            "run",
            "client",
            "--image=busybox",
            "--command",
            "--",
            "sleep",
            "3600",
        ],
    );
    let mut across = String::new();
    wait_for(WAIT, "member1's pod reaching member2's Service", || {
        let out = kubectl(
            &kubeconfig,
            &[
                "--context",
                "member1",
                "exec",
                "client",
                "--",
                "curl",
                "-s",
                "-m",
                "3",
                &format!("http://{web_ip}/"),
            ],
        );
        across = String::from_utf8_lossy(&out.stdout).into_owned();
        across.contains("\"cluster\":\"member2\"")
    });
    let mut shown = String::new();
    wait_for(WAIT, "`flotilla network show` saying connected", || {
        let out = Command::new(env!("CARGO_BIN_EXE_flotilla"))
            .args(["network", "show", "connections", "--kubeconfig"])
            .arg(&kubeconfig)
            .output()
            .expect("flotilla network show");
        shown = String::from_utf8_lossy(&out.stdout).into_owned();
        shown.matches("connected").count() >= 2
    });
    assert_has(&shown, &["Cluster \"member1\"", "member2", "wireguard"]);
    let underlay = std::fs::read_to_string(dir.join("fleet.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| v["underlay"].as_str().map(str::to_string))
        .expect("fleet.json names the underlay");
    assert!(std::path::Path::new("/run/netns").join(&underlay).exists());
    // Members' pod networks do not collide: their pod CIDRs differ.
    let cidr = |m: &str| {
        ok(
            &kubeconfig,
            &[
                "--context",
                m,
                "get",
                "node",
                &format!("{m}-node-0"),
                "-o=jsonpath={.spec.podCIDR}",
            ],
        )
    };
    assert_ne!(cidr("member1"), cidr("member2"));
    let prefixes: Vec<String> = ["member1", "member2"]
        .iter()
        .map(|m| std::fs::read_to_string(dir.join(m).join("netns-prefix")).unwrap())
        .collect();
    up.signal("-INT");
    assert!(up.wait().success(), "{}", up.output());
    let left: Vec<String> = std::fs::read_dir("/run/netns")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| prefixes.iter().any(|p| n.starts_with(p.as_str())))
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(
        left,
        Vec::<String>::new(),
        "Ctrl-C removes the members' namespaces"
    );
    assert!(
        !std::path::Path::new("/run/netns").join(&underlay).exists(),
        "Ctrl-C removes the underlay"
    );
}

/// The processes whose command lines name `dir`, with their first
/// argument (the subcommand).
fn processes_naming(dir: &Path) -> Vec<(i32, String)> {
    flotilla_host::processes::all()
        .into_iter()
        .filter(|p| {
            p.running
                && p.args
                    .iter()
                    .any(|a| a.contains(&dir.display().to_string()))
        })
        .map(|p| (p.pid, p.subcommand().to_string()))
        .collect()
}

fn namespaces_starting(prefixes: &[String]) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir("/run/netns")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| prefixes.iter().any(|p| n.starts_with(p.as_str())))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// A netns fleet killed with SIGKILL (`up`, the hub, the members, all at
/// once) whose data dir is then deleted: `flotilla cleanup --dry-run`
/// lists what it left (the members' namespaces, the underlay, the pods'
/// processes) and removes nothing; `flotilla cleanup` removes all of it;
/// a second cleanup finds nothing of it.
#[test]
fn a_fleet_killed_with_sigkill_and_its_data_dir_deleted_leaves_nothing_after_cleanup() {
    if std::env::var("FLOTILLA_SKIP_NETNS_AS_ROOT").as_deref() == Ok("1") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("fleet");
    let mut up = Up::start_with(&dir, &["--runtime", "netns", "--members", "2"]);
    up.wait_ready();
    let kubeconfig = dir.join("kubeconfig");
    ok(
        &kubeconfig,
        &[
            "--context",
            "member1",
            "run",
            "sleeper",
            "--image=busybox",
            "--command",
            "--",
            "sleep",
            "3600",
        ],
    );
    ok(
        &kubeconfig,
        &[
            "--context",
            "member1",
            "wait",
            "--for=condition=Ready",
            "pod/sleeper",
            "--timeout=60s",
        ],
    );
    let mut prefixes: Vec<String> = ["member1", "member2"]
        .iter()
        .map(|m| std::fs::read_to_string(dir.join(m).join("netns-prefix")).unwrap())
        .collect();
    let underlay = std::fs::read_to_string(dir.join("fleet.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| v["underlay"].as_str().map(str::to_string))
        .expect("fleet.json names the underlay");
    prefixes.push(underlay.clone());
    let made = namespaces_starting(&prefixes);
    assert!(
        made.iter().filter(|n| n.contains("-p")).count() >= 1,
        "the pod has its namespace: {made:?}"
    );
    // Every Flotilla component at once, as a power cut of the processes
    // would: what they started (the pods' processes) is left running.
    let components = ["up", "controlplane", "member", "agent"];
    for (pid, sub) in processes_naming(&dir) {
        if components.contains(&sub.as_str()) {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
    }
    let _ = up.wait();
    // The members' gateways stop by themselves once their member is gone
    // (their stdin closes); the pods' processes stay.
    wait_for(
        WAIT,
        "the killed components and their gateways to be gone",
        || {
            !processes_naming(&dir)
                .iter()
                .any(|(_, sub)| components.contains(&sub.as_str()) || sub == "gateway")
        },
    );
    std::fs::remove_dir_all(&dir).unwrap();
    let left_running: Vec<(i32, String)> = processes_naming(&dir);

    let dry = flotilla(&["cleanup", "--dry-run"]);
    assert!(
        dry.status.success(),
        "{}",
        String::from_utf8_lossy(&dry.stderr)
    );
    let listed = String::from_utf8_lossy(&dry.stdout).into_owned();
    for ns in &made {
        assert!(
            listed.contains(ns.as_str()),
            "--dry-run lists {ns}:\n{listed}"
        );
    }
    for (pid, _) in &left_running {
        assert!(
            listed.contains(&format!("process {pid}")),
            "--dry-run lists the pod process {pid}:\n{listed}"
        );
    }
    assert_eq!(
        namespaces_starting(&prefixes),
        made,
        "--dry-run removes nothing"
    );

    let cleaned = flotilla(&["cleanup"]);
    let said = String::from_utf8_lossy(&cleaned.stdout).into_owned();
    assert!(
        cleaned.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&cleaned.stderr)
    );
    assert_eq!(
        namespaces_starting(&prefixes),
        Vec::<String>::new(),
        "cleanup removes every namespace the fleet made:\n{said}"
    );
    assert_eq!(
        processes_naming(&dir),
        Vec::new(),
        "cleanup stops every process the fleet started:\n{said}"
    );
    for p in &prefixes {
        for root in ["", "memory/", "cpu/"] {
            let cgroup = format!("/sys/fs/cgroup/{root}flotilla-{p}");
            assert!(
                !Path::new(&cgroup).exists(),
                "cleanup removes the cgroup {cgroup}"
            );
        }
    }
    let again = flotilla(&["cleanup", "--dry-run"]);
    let again = String::from_utf8_lossy(&again.stdout).into_owned();
    for p in &prefixes {
        assert!(
            !again.contains(p.as_str()),
            "nothing of {p} is left:\n{again}"
        );
    }
}
