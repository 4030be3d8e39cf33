//! The kubelet's checkpoint API for netns pods: a container's processes
//! would be checkpointed by CRIU. What the host allows is found once
//! (`criu check`) and the answer says plainly why no checkpoint is made:
//! CRIU missing, the kernel refusing what CRIU needs (as sandboxed
//! kernels do, whose vDSO CRIU cannot read), or, where CRIU works, that
//! the runtime does not drive it yet.

use std::sync::OnceLock;

/// Why a container on this host cannot be checkpointed, found once.
pub fn why_not() -> &'static str {
    static WHY: OnceLock<String> = OnceLock::new();
    WHY.get_or_init(probe)
}

fn probe() -> String {
    let found = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join("criu"))
            .find(|p| p.is_file())
    });
    let Some(criu) = found else {
        return "CRIU is not installed on this host: checkpoints need it (on Debian: apt install criu)"
            .into();
    };
    let out = match std::process::Command::new(&criu).arg("check").output() {
        Ok(out) => out,
        Err(e) => return format!("CRIU ({}) cannot be run: {e}", criu.display()),
    };
    if !out.status.success() {
        let text = String::from_utf8_lossy(&out.stderr);
        let last = text
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("criu check failed");
        return format!(
            "CRIU cannot checkpoint on this host's kernel (`criu check`: {})",
            last.trim()
        );
    }
    "CRIU works on this host, but Flotilla's netns runtime does not drive it yet".into()
}
