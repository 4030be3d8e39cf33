//! The Kubernetes version Flotilla reports: within one minor of kubectl 1.32
//! and matching the k8s-openapi schemas it serves.

use serde_json::{Value, json};

pub const MAJOR: &str = "1";
pub const MINOR: &str = "33";
pub const GIT_VERSION: &str = "v1.33.0-flotilla";

pub fn info() -> Value {
    json!({
        "major": MAJOR,
        "minor": MINOR,
        "gitVersion": GIT_VERSION,
        "gitCommit": env!("CARGO_PKG_VERSION"),
        "gitTreeState": "clean",
        "buildDate": "1970-01-01T00:00:00Z",
        "goVersion": "rust",
        "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, match std::env::consts::ARCH { "x86_64" => "amd64", "aarch64" => "arm64", a => a }),
    })
}
