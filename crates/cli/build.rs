//! Embeds the git commit the binary is built from, for `flotilla
//! --version` and the benchmarks' JSON: $FLOTILLA_GIT_COMMIT when set (a
//! build from a source tarball), else `git rev-parse --short HEAD` when
//! the source is a git checkout and git is installed, else "unknown".
//! A checkout whose code differs from that commit (tracked files under
//! `crates/`, the workspace's manifest and lock file) adds `-dirty`, as
//! `git describe --dirty` does: a benchmark of uncommitted code says so.
//! Nothing here fails the build. It also passes the binary's linker
//! options ([`link_options`]).

use std::path::{Path, PathBuf};
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    git_in(Path::new(env!("CARGO_MANIFEST_DIR")), args)
}

/// `git ARGS` run in `dir`: its output, trimmed, if it succeeded and
/// printed something.
fn git_in(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!text.is_empty()).then_some(text)
}

/// A path git printed, relative to the manifest directory (where it ran).
fn git_path(args: &[&str]) -> Option<PathBuf> {
    let path = PathBuf::from(git(args)?);
    Some(if path.is_absolute() {
        path
    } else {
        Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
    })
}

/// Whether tracked code of the workspace differs from HEAD; a `git
/// status` that fails says clean. Run again whenever a file under the
/// workspace's `crates/` changes (cargo compares the files' times there,
/// untracked ones too: an editor's swap file reruns this, harmlessly).
fn code_changed() -> bool {
    const CODE: [&str; 3] = ["crates", "Cargo.toml", "Cargo.lock"];
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for watched in CODE {
        let path = workspace.join(watched);
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    // No optional locks: a status during a build must not take the index
    // lock from the developer's own git commands.
    let mut args = vec![
        "--no-optional-locks",
        "status",
        "--porcelain",
        "--untracked-files=no",
        "--",
    ];
    args.extend(CODE);
    git_in(&workspace, &args).is_some()
}

/// Linker options for the binary on x86_64 Linux with glibc, where Rust
/// links with its own lld: relative relocations packed as DT_RELR
/// (glibc 2.36 and later read them), which takes the relocation table
/// from 3.4 MB to a few KB (docs/benchmarks.md, "Build").
fn link_options() {
    let target = |key: &str| std::env::var(key).unwrap_or_default();
    if target("CARGO_CFG_TARGET_OS") == "linux"
        && target("CARGO_CFG_TARGET_ENV") == "gnu"
        && target("CARGO_CFG_TARGET_ARCH") == "x86_64"
    {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    link_options();
    println!("cargo:rerun-if-env-changed=FLOTILLA_GIT_COMMIT");
    let commit = std::env::var("FLOTILLA_GIT_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .or_else(|| {
            let head = git(&["rev-parse", "--short", "HEAD"])?;
            Some(if code_changed() {
                format!("{head}-dirty")
            } else {
                head
            })
        });
    // Run again when HEAD moves: a commit appends to the reflog and
    // rewrites the branch's ref; a checkout rewrites HEAD. Only files that
    // exist are named (cargo reruns on every build for a missing one).
    if let Some(git_dir) = git_path(&["rev-parse", "--git-dir"]) {
        let common = git_path(&["rev-parse", "--git-common-dir"]).unwrap_or(git_dir.clone());
        let mut watched = vec![
            git_dir.join("HEAD"),
            git_dir.join("logs").join("HEAD"),
            common.join("packed-refs"),
        ];
        if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
            watched.push(common.join(branch));
        }
        for path in watched.into_iter().filter(|p| p.exists()) {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    let version = env!("CARGO_PKG_VERSION");
    match commit {
        Some(commit) => {
            println!("cargo:rustc-env=FLOTILLA_BUILD_COMMIT={commit}");
            println!("cargo:rustc-env=FLOTILLA_VERSION={version} ({commit})");
        }
        None => {
            println!("cargo:rustc-env=FLOTILLA_BUILD_COMMIT=unknown");
            println!("cargo:rustc-env=FLOTILLA_VERSION={version}");
        }
    }
}
