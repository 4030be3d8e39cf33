//! Clusters as objects in tests: reading a field through kubectl,
//! finding the members a provider started, asking a workload cluster.

use std::path::Path;

use super::Server;

/// A manifest kept in `tests/data/<dir>` (upstream's, verbatim).
pub fn fixture(dir: &str, name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(dir)
        .join(name)
        .display()
        .to_string()
}

/// What `kubectl ARGS` prints, trimmed (nothing when it fails).
pub fn field(hub: &Server, args: &[&str]) -> String {
    let out = hub.kubectl(args);
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The pids of the processes a cluster provider runs under `dir`: its
/// members, control plane endpoints and their etcd.
pub fn members_under(dir: &Path) -> Vec<u32> {
    let dir = dir.display().to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                let args: Vec<String> = c
                    .split(|b| *b == 0)
                    .map(|a| String::from_utf8_lossy(a).into_owned())
                    .collect();
                // A member, a control plane's endpoint, or its etcd.
                let ours = args
                    .iter()
                    .any(|a| a == "member" || a == "__control-plane-endpoint")
                    || args.first().is_some_and(|a| a.ends_with("etcd"));
                ours && args.iter().any(|a| a.starts_with(&dir))
            })
        })
        .collect()
}

/// What `kubectl ARGS` prints against the cluster of `kubeconfig`.
pub fn workload(kubeconfig: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .expect("kubectl");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The last lines of every log the local provider keeps under a control
/// plane's data dir (members, endpoints, etcd), for a failure's message.
pub fn provider_logs(data_dir: &Path) -> String {
    fn walk(dir: &Path, out: &mut String) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "log") {
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                out.push_str(&format!("== {}\n", path.display()));
                for line in &lines[lines.len().saturating_sub(8)..] {
                    out.push_str(line);
                    out.push('\n');
                }
            }
        }
    }
    let mut out = String::new();
    walk(&data_dir.join("clusters"), &mut out);
    out
}
