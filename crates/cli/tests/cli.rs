//! The `flotilla apiserver` command-line contract.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::Server;

fn server_address(kubeconfig: &std::path::Path) -> String {
    let text = std::fs::read_to_string(kubeconfig).expect("kubeconfig");
    let file: kube::config::Kubeconfig =
        kube::config::Kubeconfig::from_yaml(&text).expect("kubeconfig parses");
    let cluster = file.clusters[0].cluster.as_ref().expect("cluster");
    cluster
        .server
        .clone()
        .expect("server")
        .trim_start_matches("https://")
        .to_string()
}

#[test]
fn port_zero_is_resolved_and_sigterm_shuts_down_cleanly() {
    let mut s = Server::start();
    let address = server_address(&s.kubeconfig);
    assert!(
        !address.ends_with(":0"),
        "the kubeconfig holds the real port: {address}"
    );

    let mut child = s.child.take().expect("running server");
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    let exit = loop {
        if let Some(exit) = child.try_wait().expect("wait") {
            break exit;
        }
        assert!(Instant::now() < deadline, "still running 20s after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(exit.success(), "exit status after SIGTERM: {exit}");
    assert!(s.log().contains("shut down cleanly"), "{}", s.log());
}

#[test]
fn a_busy_port_is_a_one_line_error() {
    let s = Server::start();
    let address = server_address(&s.kubeconfig);
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(["apiserver", "--listen", &address, "--data-dir"])
        .arg(dir.path().join("data"))
        .arg("--write-kubeconfig")
        .arg(dir.path().join("kubeconfig"))
        .output()
        .expect("run flotilla");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let error = stderr
        .lines()
        .find(|l| l.starts_with("error:"))
        .unwrap_or_default();
    assert!(
        error.contains(&format!("cannot listen on {address}"))
            && error.contains("--listen 127.0.0.1:0"),
        "{stderr}"
    );
    assert!(
        !dir.path().join("kubeconfig").exists(),
        "no kubeconfig for a server that never ran"
    );
}
