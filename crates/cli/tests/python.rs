//! The official Python client (installed by .ci/run) against flotilla.

mod common;

use std::process::Command;

use common::{Server, Store};

// Runs on the embedded store and on etcd.
crate::on_both_stores!(python_client_creates_lists_and_watches);

fn python_client_creates_lists_and_watches(store: Store) {
    let s = Server::start_on(store, &[]);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python_client.py");
    let out = Command::new("python3")
        .arg(script)
        .arg(&s.kubeconfig)
        .output()
        .expect(
            "python3 runs (install the client with: pip install kubernetes, or run bash .ci/run)",
        );
    assert!(
        out.status.success(),
        "python client failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("python client ok"));
}
