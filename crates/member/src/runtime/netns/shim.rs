//! The container shim: `flotilla __container-shim LAUNCH.json`, started by
//! the netns runtime for each container process (and each `exec`). While
//! still single-threaded it enters the pod's network namespace, makes a
//! private mount namespace whose root mirrors the host's but for `/tmp`,
//! `/etc/hosts`, `/etc/resolv.conf`, `/etc/hostname` and the pod's
//! volumes, chroots there, drops to the pod's user and execs the command,
//! so the container's process keeps the shim's PID. The host's own files
//! and mounts are never changed: every mount happens in the new namespace.
//!
//! A mount point that does not exist on the host (`/etc/config`, `/data`)
//! is made by shadowing its parent with a tmpfs holding bind mounts of the
//! parent's entries, so the parent looks the same and gains the new entry.

use std::collections::HashSet;
use std::ffi::CString;
use std::fs::File;
use std::os::unix::fs::symlink;
use std::path::{Component, Path, PathBuf};

use nix::mount::{MsFlags, mount};
use nix::sched::{CloneFlags, setns, unshare};
use nix::unistd::{Gid, Uid, chdir, chroot, execve, setgid, setgroups, sethostname, setuid};
use serde::{Deserialize, Serialize};

/// Exit code of a container that could not be started (as containerd's
/// StartError).
pub const START_ERROR: i32 = 128;

/// Everything the shim needs to start one process.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Launch {
    /// The pod's network namespace (`/run/netns/...`).
    pub netns: PathBuf,
    /// For `exec`: join this process's mount and UTS namespaces instead
    /// of building new ones.
    pub join_pid: Option<i32>,
    /// An empty directory the container's root is built on.
    pub root: PathBuf,
    /// The container's private /tmp.
    pub tmp: PathBuf,
    pub hostname: String,
    /// Files and directories bound into the container.
    pub mounts: Vec<Mount>,
    pub uid: u32,
    pub gid: u32,
    pub supplemental_groups: Vec<u32>,
    pub working_dir: Option<String>,
    /// The resolved command and its arguments.
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    /// Whether stdin is a terminal to make the controlling TTY (`exec -t`).
    #[serde(default)]
    pub tty: bool,
    /// `cgroup.procs` files to join before anything else (the container's
    /// limits; an exec joins its container's).
    #[serde(default)]
    pub cgroups: Vec<PathBuf>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Mount {
    pub source: PathBuf,
    /// An absolute path inside the container.
    pub target: String,
    pub read_only: bool,
}

impl Launch {
    /// A launch that runs `argv` inside the running container `pid` was
    /// started from `launch_file` (exec, exec probes): its namespaces, root,
    /// user, environment and cgroups; no terminal unless asked.
    pub fn joining(launch_file: &Path, pid: i32, argv: Vec<String>) -> Option<Launch> {
        let base: Launch = serde_json::from_slice(&std::fs::read(launch_file).ok()?).ok()?;
        Some(Launch {
            join_pid: Some(pid),
            argv,
            mounts: Vec::new(),
            tty: false,
            ..base
        })
    }
}

/// The shim's entry point; never returns when the exec succeeds.
pub fn main(launch_file: &Path) -> i32 {
    let launch = match std::fs::read(launch_file)
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice::<Launch>(&b).map_err(|e| e.to_string()))
    {
        Ok(l) => l,
        Err(e) => {
            eprintln!("container shim: cannot read {}: {e}", launch_file.display());
            return START_ERROR;
        }
    };
    let error = match enter(&launch) {
        Ok(never) => match never {},
        Err(e) => e,
    };
    eprintln!("{error}");
    START_ERROR
}

enum Never {}

fn enter(launch: &Launch) -> Result<Never, String> {
    for procs in &launch.cgroups {
        std::fs::write(procs, std::process::id().to_string())
            .map_err(|e| format!("cannot join {}: {e}", procs.display()))?;
    }
    let ns = |path: &Path, flag: CloneFlags| -> Result<(), String> {
        let file = File::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        setns(&file, flag).map_err(|e| format!("cannot enter {}: {e}", path.display()))
    };
    if launch.tty {
        take_terminal()?;
    }
    ns(&launch.netns, CloneFlags::CLONE_NEWNET)?;
    match launch.join_pid {
        Some(pid) => {
            ns(
                &PathBuf::from(format!("/proc/{pid}/ns/uts")),
                CloneFlags::CLONE_NEWUTS,
            )?;
            ns(
                &PathBuf::from(format!("/proc/{pid}/ns/mnt")),
                CloneFlags::CLONE_NEWNS,
            )?;
        }
        None => {
            unshare(CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWUTS)
                .map_err(|e| format!("cannot make the container's namespaces: {e}"))?;
            sethostname(&launch.hostname).map_err(|e| format!("cannot set the hostname: {e}"))?;
            build_root(launch)?;
        }
    }
    chroot(&launch.root).map_err(|e| format!("cannot enter the container's root: {e}"))?;
    let dir = launch.working_dir.as_deref().unwrap_or("/");
    chdir(dir).map_err(|e| format!("cannot change to the working directory {dir}: {e}"))?;
    let groups: Vec<Gid> = std::iter::once(launch.gid)
        .chain(launch.supplemental_groups.iter().copied())
        .map(Gid::from_raw)
        .collect();
    setgroups(&groups).map_err(|e| format!("cannot set groups: {e}"))?;
    setgid(Gid::from_raw(launch.gid)).map_err(|e| format!("cannot set gid: {e}"))?;
    setuid(Uid::from_raw(launch.uid)).map_err(|e| format!("cannot set uid: {e}"))?;
    let cstr = |s: &str| CString::new(s).map_err(|_| format!("{s:?} contains a NUL byte"));
    let program = launch.argv.first().ok_or("no command to run")?;
    // Looked up inside the container, on its PATH, as a runtime does.
    let path = launch
        .env
        .iter()
        .rev()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_str())
        .unwrap_or(flotilla_host::DEFAULT_PATH);
    let resolved = flotilla_host::which_in(program, path)
        .ok_or_else(|| format!("exec: {program:?}: executable file not found in $PATH"))?;
    let program = &resolved.to_string_lossy().into_owned();
    let argv = launch
        .argv
        .iter()
        .map(|a| cstr(a))
        .collect::<Result<Vec<_>, _>>()?;
    let env = launch
        .env
        .iter()
        .map(|(k, v)| cstr(&format!("{k}={v}")))
        .collect::<Result<Vec<_>, _>>()?;
    let error = execve(&cstr(program)?, &argv, &env).err();
    Err(format!(
        "exec: {program:?}: {}",
        error.map(|e| e.desc()).unwrap_or("failed")
    ))
}

/// Makes the terminal on stdin this process's controlling TTY.
fn take_terminal() -> Result<(), String> {
    rustix::process::setsid().map_err(|e| format!("cannot start a session: {e}"))?;
    rustix::process::ioctl_tiocsctty(std::io::stdin())
        .map_err(|e| format!("cannot take the terminal: {e}"))
}

fn bind(source: &Path, target: &Path, read_only: bool) -> Result<(), String> {
    mount(
        Some(source),
        target,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(|e| {
        format!(
            "cannot mount {} at {}: {e}",
            source.display(),
            target.display()
        )
    })?;
    if read_only {
        mount(
            None::<&str>,
            target,
            None::<&str>,
            MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY,
            None::<&str>,
        )
        .map_err(|e| format!("cannot make {} read-only: {e}", target.display()))?;
    }
    Ok(())
}

fn tmpfs(target: &Path) -> Result<(), String> {
    mount(
        Some("tmpfs"),
        target,
        Some("tmpfs"),
        MsFlags::MS_NOSUID,
        Some("mode=755"),
    )
    .map_err(|e| format!("cannot mount a tmpfs at {}: {e}", target.display()))
}

/// The container's root: a tmpfs holding the host's top-level entries.
struct Root {
    dir: PathBuf,
    /// Container paths that are directories of our own tmpfs, where new
    /// entries may be made without touching the host.
    owned: HashSet<PathBuf>,
}

fn build_root(launch: &Launch) -> Result<(), String> {
    // Nothing mounted from here on propagates back to the host.
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(|e| format!("cannot make the mounts private: {e}"))?;
    tmpfs(&launch.root)?;
    let mut root = Root {
        dir: launch.root.clone(),
        owned: HashSet::from([PathBuf::from("/")]),
    };
    root.mirror(Path::new("/"), &["tmp"])?;
    std::fs::create_dir_all(root.dir.join("tmp")).map_err(|e| e.to_string())?;
    bind(&launch.tmp, &root.dir.join("tmp"), false)?;
    for m in &launch.mounts {
        if !Path::new(&m.target).is_absolute() {
            return Err(format!("mountPath {:?} is not absolute", m.target));
        }
        let target = root.resolve(Path::new(&m.target));
        root.make_mount_point(&target, m.source.is_dir())?;
        bind(&m.source, &root.host_path(&target), m.read_only)?;
    }
    if let Some(dir) = &launch.working_dir {
        let dir = root.resolve(Path::new(dir));
        root.make_dir(&dir)?;
    }
    Ok(())
}

impl Root {
    /// `path` with the root's symbolic links followed (`/var/run` is
    /// `/run` on most hosts), as the container will see it.
    fn resolve(&self, path: &Path) -> PathBuf {
        let mut out = PathBuf::from("/");
        let mut rest: std::collections::VecDeque<std::ffi::OsString> = path
            .components()
            .filter_map(|c| match c {
                Component::Normal(n) => Some(n.to_os_string()),
                Component::ParentDir => Some("..".into()),
                _ => None,
            })
            .collect();
        let mut hops = 0;
        while let Some(part) = rest.pop_front() {
            if part == ".." {
                out.pop();
                continue;
            }
            let candidate = out.join(&part);
            let host = self.host_path(&candidate);
            let link = std::fs::symlink_metadata(&host)
                .ok()
                .filter(|m| m.file_type().is_symlink())
                .and_then(|_| std::fs::read_link(&host).ok());
            match link {
                Some(link) if hops < 40 => {
                    hops += 1;
                    if link.is_absolute() {
                        out = PathBuf::from("/");
                    }
                    for c in link.components().rev() {
                        match c {
                            Component::Normal(n) => rest.push_front(n.to_os_string()),
                            Component::ParentDir => rest.push_front("..".into()),
                            _ => {}
                        }
                    }
                }
                _ => out = candidate,
            }
        }
        out
    }

    fn host_path(&self, container_path: &Path) -> PathBuf {
        let rel = container_path.strip_prefix("/").unwrap_or(container_path);
        self.dir.join(rel)
    }

    /// Fills the owned directory `dir` with the host's entries of the same
    /// path (but `skip`): directories and files bound, links copied.
    fn mirror(&mut self, dir: &Path, skip: &[&str]) -> Result<(), String> {
        let entries =
            std::fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
        for entry in entries.flatten() {
            let name = entry.file_name();
            if skip.iter().any(|s| name == *s) {
                continue;
            }
            let source = dir.join(&name);
            let target = self.host_path(&source);
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_symlink() {
                if let Ok(link) = std::fs::read_link(&source) {
                    let _ = symlink(link, &target);
                }
            } else if kind.is_dir() {
                if std::fs::create_dir(&target).is_ok() {
                    bind(&source, &target, false)?;
                }
            } else if File::create(&target).is_ok() {
                // Sockets and devices bind as files do; one that will not
                // is left out rather than failing the container.
                let _ = bind(&source, &target, false);
            }
        }
        Ok(())
    }

    /// Makes `dir` an owned directory, shadowing host directories on the way.
    fn own(&mut self, dir: &Path) -> Result<(), String> {
        if self.owned.contains(dir) {
            return Ok(());
        }
        let parent = dir.parent().unwrap_or(Path::new("/"));
        let target = self.host_path(dir);
        if target.is_dir() {
            // A host directory, bound: cover it with a tmpfs that mirrors it.
            tmpfs(&target)?;
            self.owned.insert(dir.to_path_buf());
            if dir.is_dir() {
                self.mirror(dir, &[])?;
            }
        } else {
            self.own(parent)?;
            std::fs::create_dir(&target)
                .map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
            self.owned.insert(dir.to_path_buf());
        }
        Ok(())
    }

    fn make_dir(&mut self, dir: &Path) -> Result<(), String> {
        if self.host_path(dir).is_dir() {
            return Ok(());
        }
        let normal: PathBuf = dir
            .components()
            .filter(|c| matches!(c, Component::RootDir | Component::Normal(_)))
            .collect();
        self.own(&normal)
    }

    /// Makes sure `target` exists in the root, as a directory or a file.
    fn make_mount_point(&mut self, target: &Path, dir: bool) -> Result<(), String> {
        let path = self.host_path(target);
        if path.exists() {
            return Ok(());
        }
        if dir {
            return self.make_dir(target);
        }
        let parent = target.parent().unwrap_or(Path::new("/"));
        self.make_dir(parent)?;
        if !self.owned.contains(parent) {
            self.own(parent)?;
        }
        File::create(&path)
            .map(|_| ())
            .map_err(|e| format!("cannot make {}: {e}", target.display()))
    }
}
