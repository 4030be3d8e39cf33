//! `flotilla member --count N`: several full members in one process, each
//! with its own API, store, nodes, kubeconfig and admin endpoint.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::{Running, flotilla, wait_for, which};

const WAIT: Duration = Duration::from_secs(90);

/// kubectl against the member whose kubeconfig is `kubeconfig`.
fn kubectl(kubeconfig: &Path, args: &[&str]) -> Output {
    let kubectl = which("kubectl")
        .expect("kubectl not found: install Debian's kubernetes-client (bash .ci/run does it)");
    let cache = kubeconfig.with_file_name("kube-cache");
    Command::new(kubectl)
        .env("KUBECONFIG", kubeconfig)
        .arg("--cache-dir")
        .arg(cache)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .expect("run kubectl")
}

/// kubectl that must succeed; returns stdout.
#[track_caller]
fn kubectl_ok(kubeconfig: &Path, args: &[&str]) -> String {
    let out = kubectl(kubeconfig, args);
    assert!(
        out.status.success(),
        "kubectl {args:?} against {} failed:\n{}",
        kubeconfig.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `flotilla member fault --data-dir DIR ARGS` that must succeed; returns stdout.
#[track_caller]
fn fault(data_dir: &Path, args: &[&str]) -> String {
    let dir = data_dir.to_string_lossy().into_owned();
    let mut all = vec!["member", "fault", "--data-dir", &dir];
    all.extend_from_slice(args);
    let out = flotilla(&all);
    assert!(
        out.status.success(),
        "flotilla member fault {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Whether something accepts TCP connections at the `https://host:port` URL.
fn accepts(url: &str) -> bool {
    let addr = url.trim_start_matches("https://");
    addr.parse::<std::net::SocketAddr>()
        .ok()
        .and_then(|a| std::net::TcpStream::connect_timeout(&a, Duration::from_millis(500)).ok())
        .is_some()
}

#[test]
fn three_members_in_one_process() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("members");
    let data_arg = data.to_string_lossy().into_owned();
    let mut process = Running::start(&[
        "member",
        "--name",
        "fleet",
        "--count",
        "3",
        "--nodes",
        "2",
        "--listen",
        "127.0.0.1:0",
        "--pod-startup",
        "300ms",
        "--data-dir",
        &data_arg,
    ]);
    process.wait_for_line("3 members fleet-1 .. fleet-3 ready", WAIT);

    // members.json lists every member, in order, where a single member
    // would keep its files.
    let list: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(data.join("members.json")).expect("members.json"),
    )
    .expect("members.json is JSON");
    let members = list["members"].as_array().expect("a members array");
    assert_eq!(members.len(), 3, "{list}");
    let mut servers = Vec::new();
    let mut kubeconfigs: Vec<PathBuf> = Vec::new();
    for (i, m) in members.iter().enumerate() {
        let name = format!("fleet-{}", i + 1);
        assert_eq!(m["name"], name.as_str(), "{list}");
        let own = data.join(&name);
        assert_eq!(m["dataDir"], own.to_string_lossy().as_ref(), "{list}");
        let kubeconfig = own.join("kubeconfig");
        assert_eq!(
            m["kubeconfig"],
            kubeconfig.to_string_lossy().as_ref(),
            "{list}"
        );
        assert!(kubeconfig.exists(), "{} is missing", kubeconfig.display());
        let server = m["server"].as_str().expect("a server URL").to_string();
        assert!(server.starts_with("https://127.0.0.1:"), "{server}");
        servers.push(server);
        kubeconfigs.push(kubeconfig);
    }
    servers.sort();
    servers.dedup();
    assert_eq!(servers.len(), 3, "each member has its own endpoint");

    // Each kubeconfig reaches its own member: its nodes, no other's.
    for (i, kubeconfig) in kubeconfigs.iter().enumerate() {
        let name = format!("fleet-{}", i + 1);
        let nodes = kubectl_ok(kubeconfig, &["get", "nodes", "-o", "name"]);
        let mut nodes: Vec<&str> = nodes.lines().collect();
        nodes.sort();
        assert_eq!(
            nodes,
            vec![
                format!("node/{name}-node-0").as_str(),
                format!("node/{name}-node-1").as_str()
            ],
            "the nodes {} shows",
            kubeconfig.display()
        );
    }

    // A ConfigMap created in one member is in that one only.
    kubectl_ok(
        &kubeconfigs[0],
        &["create", "configmap", "only-in-one", "--from-literal=k=v"],
    );
    kubectl_ok(&kubeconfigs[0], &["get", "configmap", "only-in-one"]);
    for other in &kubeconfigs[1..] {
        let out = kubectl(other, &["get", "configmap", "only-in-one"]);
        assert!(
            !out.status.success(),
            "only-in-one leaked into {}",
            other.display()
        );
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("NotFound"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    // A fault injected into one member through its data dir affects it alone.
    let second = data.join("fleet-2");
    fault(&second, &["unreachable", "--mode", "refuse"]);
    assert!(fault(&second, &["list"]).contains("refuse"));
    assert!(!fault(&data.join("fleet-1"), &["list"]).contains("refuse"));
    wait_for(WAIT, "fleet-2 to refuse connections", || {
        !kubectl(&kubeconfigs[1], &["get", "nodes"]).status.success()
    });
    kubectl_ok(&kubeconfigs[0], &["get", "nodes"]);
    kubectl_ok(&kubeconfigs[2], &["get", "nodes"]);
    fault(&second, &["reachable"]);
    wait_for(WAIT, "fleet-2 to answer again", || {
        kubectl(&kubeconfigs[1], &["get", "nodes"]).status.success()
    });

    // Killing the one process takes every member with it.
    let urls: Vec<String> = members
        .iter()
        .map(|m| m["server"].as_str().unwrap_or_default().to_string())
        .collect();
    assert!(urls.iter().all(|u| accepts(u)));
    drop(process);
    wait_for(WAIT, "every member's endpoint to close", || {
        urls.iter().all(|u| !accepts(u))
    });
}

#[test]
fn count_refuses_what_members_cannot_share() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().to_string_lossy().into_owned();
    let cases: [(&[&str], &str); 4] = [
        (
            &["--listen", "127.0.0.1:7443"],
            "--listen 127.0.0.1:7443 names one port",
        ),
        (
            &["--admin-listen", "127.0.0.1:7444"],
            "--admin-listen 127.0.0.1:7444 names one port",
        ),
        (
            &["--runtime", "netns"],
            "--runtime netns and --underlay run one member per process",
        ),
        (
            &["--write-kubeconfig", "/tmp/k"],
            "--write-kubeconfig names one file",
        ),
    ];
    for (flags, message) in cases {
        let mut args = vec!["member", "--name", "x", "--count", "2", "--data-dir", &data];
        args.extend_from_slice(flags);
        let out = flotilla(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flags:?} was accepted");
        assert!(stderr.contains(message), "{flags:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    }
}
