//! A pod's life in its sandbox: starting containers (init containers
//! first, each to success), restarting them by the restart policy with
//! CrashLoopBackOff's back-off, turning exits into container states
//! (OOMKilled from the cgroup), and stopping everything within the grace
//! period. What this reports is mapped onto PodStatus by the kubelet.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use kube::ResourceExt;
use tracing::warn;

use super::spec;
use super::{
    BACKOFF_MAX, CONFIG_RETRY, ContainerSlot, NetnsRuntime, PodSandbox, cgroup_id, log_path,
    probes, process, sandbox_error, shim, write_private,
};
use crate::podutil;
use crate::runtime::config::{ConfigError, PodIdentity};
use crate::runtime::{ContainerRun, ContainerState, PodPhase, PodRun};
use flotilla_host as host;

/// Which of a sandbox's containers a slot is among.
#[derive(Clone, Copy)]
enum Group {
    Init,
    App,
    Ephemeral,
}

impl PodSandbox {
    fn group_mut(&mut self, group: Group) -> &mut [ContainerSlot] {
        match group {
            Group::Init => &mut self.init,
            Group::App => &mut self.containers,
            Group::Ephemeral => &mut self.ephemeral,
        }
    }

    /// Every container slot, ephemeral ones included.
    fn all_slots(&self) -> impl Iterator<Item = &ContainerSlot> {
        self.init
            .iter()
            .chain(self.containers.iter())
            .chain(self.ephemeral.iter())
    }
}

impl NetnsRuntime {
    /// Starts one container of `sb`, or records why not.
    async fn launch(&self, sb: &mut PodSandbox, key: &str, group: Group, index: usize) {
        let launch_started = std::time::Instant::now();
        let host_ip = self
            .config
            .shape
            .node_index(&sb.node.name)
            .and_then(|i| self.config.shape.node_ip(i))
            .unwrap_or(Ipv4Addr::UNSPECIFIED);
        let cluster = self.config.shape.cluster_name.clone();
        let id = PodIdentity {
            pod: &sb.pod,
            ip: sb.ip,
            host_ip,
            node: &sb.node.name,
            cluster: &cluster,
        };
        let prepared = async {
            if sb.volumes.is_none() {
                sb.volumes = Some(
                    self.config
                        .pods
                        .volumes(&id, &sb.dir.join("volumes"))
                        .await?,
                );
            }
            // The field itself, not `group()`: `sb.volumes` is written above.
            let slots = match group {
                Group::Init => &sb.init,
                Group::App => &sb.containers,
                Group::Ephemeral => &sb.ephemeral,
            };
            let c = &slots[index].spec;
            let env = self.config.pods.environment(c, &id).await?;
            let root = sb.dir.join("rootfs").join(&c.name);
            let tmp = sb.dir.join("tmp").join(&c.name);
            for d in [&root, &tmp] {
                std::fs::create_dir_all(d).map_err(|e| sandbox_error(e.to_string()))?;
            }
            // A private /tmp as the host's: anyone may write, sticky.
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777));
            let etc = [
                (sb.dir.join("etc/hosts"), "/etc/hosts"),
                (sb.dir.join("etc/resolv.conf"), "/etc/resolv.conf"),
                (sb.dir.join("etc/hostname"), "/etc/hostname"),
            ];
            let mut launch = spec::launch(
                &id,
                c,
                env,
                sb.volumes.as_ref().unwrap_or(&Default::default()),
                &etc,
                &self.config.helper,
                host::netns_path(&sb.netns),
                root,
                tmp,
            )?;
            launch.launch.cgroups = self
                .cgroups
                .create(&cgroup_id(&sb.netns, &c.name), spec::limits(c));
            let file = sb.dir.join("launch").join(format!("{}.json", c.name));
            write_private(
                &file,
                &serde_json::to_vec(&launch.launch).unwrap_or_default(),
            )
            .map_err(|e| sandbox_error(format!("cannot write {}: {e}", file.display())))?;
            Ok::<PathBuf, ConfigError>(file)
        }
        .await;
        let dir = sb.dir.clone();
        let (netns, node_netns, ip, grace) =
            (sb.netns.clone(), sb.node.netns.clone(), sb.ip, sb.grace);
        let reference = kube::Resource::object_ref(&sb.pod, &());
        let slot = &mut sb.group_mut(group)[index];
        let file = match prepared {
            Ok(f) => f,
            Err(e) if e.reason == "StartError" => {
                // As containerd: the container is created and fails to start.
                self.recorder
                    .emit(&reference, "Failed", format!("Error: {}", e.message));
                let now = podutil::now();
                if slot.runs > 0 {
                    slot.restarts += 1;
                }
                slot.runs += 1;
                record_exit(
                    slot,
                    ContainerState::Terminated {
                        code: shim::START_ERROR,
                        reason: "StartError".into(),
                        message: Some(e.message),
                        started: now.clone(),
                        finished: now,
                    },
                );
                return;
            }
            Err(e) => {
                let reason = if e.reason == "FailedMount" {
                    "FailedMount"
                } else {
                    "Failed"
                };
                self.recorder
                    .emit(&reference, reason, format!("Error: {}", e.message));
                slot.state = ContainerState::Waiting {
                    reason: e.reason.into(),
                    message: Some(e.message),
                };
                return;
            }
        };
        let log = log_path(&dir, &slot.spec.name, slot.runs);
        let events = self.events.clone();
        let pod_key = key.to_string();
        let streams = process::Streams {
            stdin: slot.spec.stdin == Some(true),
            tty: slot.spec.tty == Some(true),
        };
        match process::spawn(&self.config.helper, &file, log, streams, move || {
            events.changed(&pod_key)
        }) {
            Ok(p) => {
                self.config
                    .timings
                    .record(super::timings::Step::ProcessStart, launch_started.elapsed());
                let target = probes::ProbeTarget {
                    netns: netns.clone(),
                    node_netns: node_netns.clone(),
                    ip,
                    pid: p.pid,
                    launch: file.clone(),
                    helper: self.config.helper.clone(),
                    grace,
                };
                let name = slot.spec.name.clone();
                self.recorder
                    .emit(&reference, "Created", format!("Created container {name}"));
                self.recorder
                    .emit(&reference, "Started", format!("Started container {name}"));
                let notify = self.recorder.for_pod(reference.clone());
                let (state, task) = probes::start(
                    &slot.spec,
                    target,
                    &p,
                    self.events.clone(),
                    key.to_string(),
                    notify,
                );
                slot.probes = Some(state);
                slot.prober = task;
                let now = podutil::now();
                if slot.runs > 0 {
                    slot.restarts += 1;
                    slot.last = Some(slot.state.clone());
                }
                slot.runs += 1;
                slot.process = Some(p);
                slot.started = Some(now.clone());
                slot.state = ContainerState::Running { since: now };
            }
            Err(e) => {
                let message = format!("cannot start the container: {e}");
                self.recorder
                    .emit(&reference, "Failed", format!("Error: {message}"));
                slot.state = ContainerState::Waiting {
                    reason: "RunContainerError".into(),
                    message: Some(message),
                };
            }
        }
    }

    /// Drives one pod towards its spec; returns what to report.
    pub(super) async fn drive(&self, sb: &mut PodSandbox, key: &str) -> PodRun {
        let policy = sb
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.restart_policy.clone())
            .unwrap_or_else(|| "Always".into());
        let mut recheck: Option<Duration> = None;
        let mut soonest = |d: Duration| {
            recheck = Some(recheck.map_or(d, |r: Duration| r.min(d)));
        };
        let oom = |c: &ContainerSlot| self.cgroups.oom_killed(&cgroup_id(&sb.netns, &c.spec.name));
        reap(&mut sb.init, &oom);
        reap(&mut sb.containers, &oom);
        reap(&mut sb.ephemeral, &oom);
        // Init containers, one at a time, each to success.
        let mut initialized = true;
        let mut failed_init = false;
        for i in 0..sb.init.len() {
            match &sb.init[i].state {
                ContainerState::Terminated { code: 0, .. } => continue,
                ContainerState::Running { .. } => {}
                ContainerState::Terminated { .. } if policy == "Never" => failed_init = true,
                _ => match ready_to_start(&sb.init[i]) {
                    Ok(()) => self.launch(sb, key, Group::Init, i).await,
                    Err(wait) => soonest(wait),
                },
            }
            initialized = false;
            if matches!(sb.init[i].state, ContainerState::Waiting { .. }) {
                soonest(CONFIG_RETRY);
            }
            break;
        }
        if initialized && !sb.done {
            for i in 0..sb.containers.len() {
                let restart = match &sb.containers[i].state {
                    ContainerState::Running { .. } => false,
                    ContainerState::Waiting { .. } => true,
                    ContainerState::Terminated { code, .. } => {
                        policy == "Always" || (policy == "OnFailure" && *code != 0)
                    }
                };
                if !restart {
                    continue;
                }
                match ready_to_start(&sb.containers[i]) {
                    Ok(()) => self.launch(sb, key, Group::App, i).await,
                    Err(wait) => {
                        self.recorder.emit(
                            &kube::Resource::object_ref(&sb.pod, &()),
                            "BackOff",
                            format!(
                                "Back-off restarting failed container {} in pod {}",
                                sb.containers[i].spec.name,
                                sb.pod.name_any()
                            ),
                        );
                        soonest(wait)
                    }
                }
                if matches!(sb.containers[i].state, ContainerState::Waiting { .. })
                    && sb.containers[i].backoff_until.is_none()
                {
                    soonest(CONFIG_RETRY);
                }
            }
        }
        // Ephemeral containers start once the pod's have, and run once.
        if initialized && !sb.done {
            for i in 0..sb.ephemeral.len() {
                if sb.ephemeral[i].runs == 0
                    && matches!(sb.ephemeral[i].state, ContainerState::Waiting { .. })
                {
                    self.launch(sb, key, Group::Ephemeral, i).await;
                    if matches!(sb.ephemeral[i].state, ContainerState::Waiting { .. }) {
                        soonest(CONFIG_RETRY);
                    }
                }
            }
        }
        // Restarts still to come wake this pod when their back-off ends.
        for c in sb.init.iter().chain(sb.containers.iter()) {
            if let (ContainerState::Terminated { code, .. }, Some(t)) = (&c.state, c.backoff_until)
                && (policy == "Always" || (policy == "OnFailure" && *code != 0))
            {
                soonest(
                    t.saturating_duration_since(Instant::now())
                        .max(Duration::from_millis(10)),
                );
            }
        }
        let all_terminated = sb
            .containers
            .iter()
            .all(|c| matches!(c.state, ContainerState::Terminated { .. }));
        let any_failed = sb
            .containers
            .iter()
            .any(|c| matches!(c.state, ContainerState::Terminated { code, .. } if code != 0));
        let will_restart = |c: &ContainerSlot| match c.state {
            ContainerState::Terminated { code, .. } => {
                policy == "Always" || (policy == "OnFailure" && code != 0)
            }
            _ => true,
        };
        let phase =
            if failed_init {
                PodPhase::Failed
            } else if !initialized {
                PodPhase::Pending
            } else if all_terminated && !sb.containers.iter().any(will_restart) {
                if any_failed {
                    PodPhase::Failed
                } else {
                    PodPhase::Succeeded
                }
            } else if sb.containers.iter().any(|c| {
                c.started.is_some() || matches!(c.state, ContainerState::Terminated { .. })
            }) {
                PodPhase::Running
            } else {
                PodPhase::Pending
            };
        if matches!(phase, PodPhase::Succeeded | PodPhase::Failed) {
            sb.done = true;
        }
        let pod_name = format!(
            "{}_{}({})",
            sb.pod.name_any(),
            sb.pod.namespace().unwrap_or_default(),
            sb.uid
        );
        let done = sb.done;
        // `restarts`: whether the slot is one the restart policy covers
        // (ephemeral containers are not, and are never ready).
        let report = |c: &ContainerSlot, restarts: bool| {
            // Between a crash and its restart: CrashLoopBackOff, as upstream.
            let backing_off = !done
                && restarts
                && will_restart(c)
                && matches!(c.state, ContainerState::Terminated { .. })
                && c.backoff_until.is_some_and(|t| t > Instant::now());
            let (state, last) = if backing_off {
                let wait = c
                    .backoff_until
                    .map(|t| t - Instant::now())
                    .unwrap_or_default();
                (
                    ContainerState::Waiting {
                        reason: "CrashLoopBackOff".into(),
                        message: Some(format!(
                            "back-off {}s restarting failed container={} pod={pod_name}",
                            wait.as_secs().max(1),
                            c.spec.name
                        )),
                    },
                    Some(c.state.clone()),
                )
            } else {
                (c.state.clone(), c.last.clone())
            };
            let running = matches!(state, ContainerState::Running { .. });
            let probed = |f: fn(&probes::ProbeState) -> bool| c.probes.as_ref().is_none_or(f);
            ContainerRun {
                name: c.spec.name.clone(),
                ready: restarts
                    && running
                    && probed(|p| p.ready.load(std::sync::atomic::Ordering::SeqCst)),
                started: running && probed(|p| p.started.load(std::sync::atomic::Ordering::SeqCst)),
                state,
                last,
                restarts: c.restarts,
                id: c
                    .started
                    .as_ref()
                    .map(|_| format!("flotilla://{}/{}-{}", sb.uid, c.spec.name, c.runs)),
            }
        };
        PodRun {
            phase,
            sandbox_ready: !sb.done,
            initialized,
            init_containers: sb.init.iter().map(|c| report(c, true)).collect(),
            containers: sb.containers.iter().map(|c| report(c, true)).collect(),
            ephemeral_containers: sb.ephemeral.iter().map(|c| report(c, false)).collect(),
            recheck,
        }
    }

    pub(super) async fn teardown(&self, sb: &mut PodSandbox) {
        let grace = sb.grace;
        let reference = kube::Resource::object_ref(&sb.pod, &());
        for c in sb.all_slots() {
            if c.process
                .as_ref()
                .is_some_and(|p| p.exit.borrow().is_none())
            {
                self.recorder.emit(
                    &reference,
                    "Killing",
                    format!("Stopping container {}", c.spec.name),
                );
            }
        }
        let stops = sb
            .all_slots()
            .filter_map(|c| c.process.as_ref())
            .map(|p| process::stop(p, grace));
        futures::future::join_all(stops).await;
        for c in sb
            .init
            .iter_mut()
            .chain(sb.containers.iter_mut())
            .chain(sb.ephemeral.iter_mut())
        {
            if let Some(task) = c.prober.take() {
                task.abort();
            }
        }
        self.network.remove_pod(&sb.node, &sb.netns).await;
        for c in sb.all_slots() {
            self.cgroups.remove(&cgroup_id(&sb.netns, &c.spec.name));
        }
        if let Err(error) = std::fs::remove_dir_all(&sb.dir) {
            warn!(%error, dir = %sb.dir.display(), "cannot remove a pod's directory");
        }
    }
}

/// Whether a container may start now, or how long its back-off lasts.
fn ready_to_start(c: &ContainerSlot) -> Result<(), Duration> {
    match c.backoff_until {
        Some(t) if t > Instant::now() => Err(t - Instant::now()),
        _ => Ok(()),
    }
}

/// Turns exited processes into Terminated states.
fn reap(slots: &mut [ContainerSlot], oom_killed: &dyn Fn(&ContainerSlot) -> bool) {
    for c in slots {
        let Some(code) = c.process.as_ref().and_then(|p| *p.exit.borrow()) else {
            continue;
        };
        c.process = None;
        if let Some(task) = c.prober.take() {
            task.abort();
        }
        let killed = c
            .probes
            .as_ref()
            .and_then(|p| p.killed_because.lock().take());
        let started = c.started.clone().unwrap_or_else(podutil::now);
        // SIGKILL with the group's OOM count up: the memory limit did it.
        let reason = match code {
            0 => "Completed",
            137 if oom_killed(c) => "OOMKilled",
            _ => "Error",
        };
        record_exit(
            c,
            ContainerState::Terminated {
                code,
                reason: reason.into(),
                message: killed,
                started,
                finished: podutil::now(),
            },
        );
    }
}

/// Records an exit and schedules the restart back-off, should it restart.
fn record_exit(c: &mut ContainerSlot, state: ContainerState) {
    c.state = state;
    // The first restart is at once; then 10 s, 20 s, ... up to 5 min.
    let delay = if c.runs <= 1 {
        Duration::ZERO
    } else {
        let d = c.backoff;
        c.backoff = (c.backoff * 2).min(BACKOFF_MAX);
        d
    };
    c.backoff_until = Some(Instant::now() + delay);
}
