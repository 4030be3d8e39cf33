//! `flotilla chaos`: a fleet (`flotilla up`: a hub on the embedded store,
//! Push and Pull members, and with `--runtime netns` gateways on an
//! underlay) under a steady load (`load`), its components killed with
//! SIGKILL, stopped with SIGSTOP and continued, the underlay cut, at
//! random for a while (`faults`, drawn from the seed); then the faults
//! stop, the fleet is given time to converge, and the invariants are
//! checked (`check`, on what the load was told: `ledger`). With two
//! members or more, the first peers with the second and the load also
//! creates and deletes pods offloaded there (`offload`). It prints the
//! faults, the time to converge after the last one, and each violated
//! invariant; it fails if any is.

mod check;
mod faults;
mod ledger;
mod load;
mod offload;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use parking_lot::Mutex;
use serde_json::json;
use tokio::process::{Child, Command};

use faults::{Action, Fault, Target};

#[derive(clap::Args)]
pub struct ChaosArgs {
    /// How long faults are injected.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// The seed of the faults and the load (a run is replayed with the
    /// same seed) [default: drawn, and printed].
    #[arg(long)]
    seed: Option<u64>,
    /// About how often a fault is injected.
    #[arg(long, default_value = "3s", value_parser = humantime::parse_duration)]
    interval: Duration,
    /// Members of the fleet (every third one in Pull mode).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=26))]
    members: u16,
    /// Replicas of the hub, on a local etcd (from the PATH): the replicas
    /// and the etcd are killed and stopped too.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=3))]
    hub_replicas: u16,
    /// The members' pod runtime: `netns` adds gateways and the underlay to
    /// what faults reach (needs root).
    #[arg(long, default_value = "sim", value_parser = ["sim", "netns"])]
    runtime: String,
    /// How long the fleet may take to converge once the faults stop.
    #[arg(long, default_value = "180s", value_parser = humantime::parse_duration)]
    converge_timeout: Duration,
    /// The fleet's data dir [default: a new temporary one, removed after].
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Leave the fleet running at the end (stop it with Ctrl-C in `flotilla up --data-dir DIR`).
    #[arg(long)]
    keep: bool,
    /// Also write the run's summary as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Print the faults the seed draws for this shape and start nothing.
    #[arg(long)]
    dry_run: bool,
}

pub async fn run(args: ChaosArgs) -> anyhow::Result<()> {
    let seed = args.seed.unwrap_or_else(rand::random);
    if args.dry_run {
        println!("flotilla chaos --seed {seed}: the faults it would inject");
        print_plan(&args, seed);
        return Ok(());
    }
    // A temporary data dir is removed when this ends (dropped last).
    let (dir, _temp) = match &args.data_dir {
        Some(d) => (d.clone(), None),
        None => {
            let t = tempfile::Builder::new()
                .prefix("flotilla-chaos-")
                .tempdir()?;
            (t.path().join("fleet"), Some(t))
        }
    };
    println!(
        "flotilla chaos: seed {seed}, {} of faults about every {}, {} members ({}), fleet in {}",
        humantime::format_duration(args.duration),
        humantime::format_duration(args.interval),
        args.members,
        args.runtime,
        dir.display()
    );
    let mut up = Up::start(&dir, &args).await?;
    let outcome = chaos(&args, seed, &dir, &mut up).await;
    if args.keep {
        println!(
            "the fleet keeps running: flotilla up --data-dir {} resumes it after a Ctrl-C",
            dir.display()
        );
        up.detach();
    } else {
        up.stop().await;
    }
    let outcome = outcome?;
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_vec_pretty(&outcome.json(seed, &args))?)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    if !outcome.violations.is_empty() {
        bail!(
            "{} invariants violated (replay with --seed {seed})",
            outcome.violations.len()
        );
    }
    Ok(())
}

/// What a run found.
struct Outcome {
    faults: Vec<Fault>,
    converged_after: Option<Duration>,
    violations: Vec<String>,
    acknowledged: usize,
    unsure: usize,
    templates: usize,
    offloaded_pods: usize,
}

impl Outcome {
    fn json(&self, seed: u64, args: &ChaosArgs) -> serde_json::Value {
        json!({
            "seed": seed,
            "durationSeconds": args.duration.as_secs_f64(),
            "members": args.members,
            "hubReplicas": args.hub_replicas,
            "runtime": args.runtime,
            "faults": self.faults.iter().map(|f| json!({
                "atSeconds": f.at.as_secs_f64(),
                "target": f.target.to_string(),
                "action": f.action.to_string(),
            })).collect::<Vec<_>>(),
            "acknowledgedWrites": self.acknowledged,
            "unsureWrites": self.unsure,
            "templates": self.templates,
            "offloadedPods": self.offloaded_pods,
            "convergedAfterSeconds": self.converged_after.map(|d| d.as_secs_f64()),
            "violations": self.violations,
        })
    }
}

async fn chaos(args: &ChaosArgs, seed: u64, dir: &Path, up: &mut Up) -> anyhow::Result<Outcome> {
    let shape: serde_json::Value = serde_json::from_slice(
        &std::fs::read(dir.join("fleet.json")).context("the fleet's fleet.json")?,
    )?;
    let members: Vec<(String, bool)> = shape["members"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| Some((m["name"].as_str()?.to_string(), m["pull"].as_bool()?)))
        .collect();
    let underlay = shape["underlay"].as_str().map(str::to_string);
    let hub_kubeconfig = dir.join("hub").join("kubeconfig");
    let replicas: Vec<String> = std::iter::once("hub".to_string())
        .chain((2..=args.hub_replicas).map(|i| format!("hub-{i}")))
        .collect();

    // The run's namespace and policies.
    let first = members.first().map(|m| m.0.clone()).unwrap_or_default();
    apply(&hub_kubeconfig, &load::policies(&first)).await?;
    // The first member borrows the second's capacity: pods offloaded.
    let peering = offload::peering(dir, &members).map(Arc::new);
    if let Some(p) = &peering {
        offload::setup(p).await?;
        println!(
            "  {} peered with {} ({} offloaded there)",
            p.consumer,
            members[1].0,
            offload::NAMESPACE
        );
    }

    let targets = targets(args, &members, underlay.is_some());
    let plan = faults::plan(seed, args.duration, args.interval, &targets);

    let ledger = Arc::new(Mutex::new(ledger::Ledger::default()));
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let driver = tokio::spawn(load::drive(
        replicas
            .iter()
            .map(|r| dir.join(r).join("kubeconfig"))
            .collect(),
        seed,
        ledger.clone(),
        stopped,
    ));

    let pods_ledger = Arc::new(Mutex::new(ledger::Ledger::default()));
    let pods_driver = peering.clone().map(|p| {
        tokio::spawn(offload::drive(
            p,
            seed,
            pods_ledger.clone(),
            stop.subscribe(),
        ))
    });

    let started = Instant::now();
    let mut last_fault = started;
    for fault in &plan {
        if let Some(wait) = fault.at.checked_sub(started.elapsed()) {
            tokio::time::sleep(wait).await;
        }
        println!(
            "  {:>6.1}s  {:<22} {}",
            fault.at.as_secs_f64(),
            fault.target.to_string(),
            fault.action
        );
        inject(dir, up, fault, underlay.as_deref(), args).await?;
        last_fault = Instant::now();
    }
    if let Some(rest) = args.duration.checked_sub(started.elapsed()) {
        tokio::time::sleep(rest).await;
    }
    let _ = stop.send(true);
    let done = driver.await.unwrap_or_default();
    let pods_done = match pods_driver {
        Some(d) => d.await.unwrap_or_default(),
        None => load::Done::default(),
    };

    // The faults stop: everything runs and is reachable again.
    heal(dir, up, &targets, underlay.as_deref(), args).await?;
    let healed = Instant::now();
    println!(
        "faults stopped: {} injected; {} writes acknowledged, {} unanswered ({} and {} of offloaded pods); converging...",
        plan.len(),
        done.acknowledged,
        done.unsure,
        pods_done.acknowledged,
        pods_done.unsure
    );
    let members: Vec<check::Member> = members
        .iter()
        .map(|(name, _)| check::Member {
            name: name.clone(),
            kubeconfig: dir.join(name).join("kubeconfig"),
        })
        .collect();
    let ledger = ledger.lock().clone();
    let pods_ledger = pods_ledger.lock().clone();
    let mut violations;
    loop {
        let extra = check::Extra {
            fabric: underlay.is_some(),
        };
        violations = check::violations(&hub_kubeconfig, &members, &ledger, extra).await;
        violations.extend(done.vanished.iter().cloned());
        if let Some(p) = &peering {
            violations.extend(offload::violations(p, &pods_ledger).await);
        }
        if violations.is_empty() || healed.elapsed() > args.converge_timeout {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let converged_after = violations.is_empty().then(|| last_fault.elapsed());
    match converged_after {
        Some(d) => println!(
            "converged {:.1}s after the last fault ({:.1}s after the faults stopped): every invariant holds",
            d.as_secs_f64(),
            healed.elapsed().as_secs_f64()
        ),
        None => {
            println!(
                "NOT converged {:.0}s after the faults stopped; {} invariants violated:",
                healed.elapsed().as_secs_f64(),
                violations.len()
            );
            for v in &violations {
                println!("  {v}");
            }
        }
    }
    println!(
        "templates written: {}; offloaded pods: {}; violations: {}",
        ledger.len(),
        pods_ledger.len(),
        violations.len()
    );
    Ok(Outcome {
        faults: plan,
        converged_after,
        violations,
        acknowledged: done.acknowledged + pods_done.acknowledged,
        unsure: done.unsure + pods_done.unsure,
        templates: ledger.len(),
        offloaded_pods: pods_ledger.len(),
    })
}

/// What faults reach in a fleet of this shape.
fn targets(args: &ChaosArgs, members: &[(String, bool)], fabric: bool) -> Vec<Target> {
    let mut targets = vec![Target::Up, Target::Hub("hub".into())];
    targets.extend((2..=args.hub_replicas).map(|i| Target::Hub(format!("hub-{i}"))));
    if args.hub_replicas > 1 {
        targets.push(Target::Etcd);
    }
    for (name, pull) in members {
        targets.push(Target::Member(name.clone()));
        if *pull {
            targets.push(Target::Agent(name.clone()));
        }
        if fabric {
            targets.push(Target::Gateways(name.clone()));
        }
    }
    if fabric {
        targets.push(Target::Underlay);
    }
    targets
}

/// `--dry-run`: the faults the seed draws for a fleet of this shape
/// (members and Pull members named as `flotilla up` names them).
fn print_plan(args: &ChaosArgs, seed: u64) {
    let members: Vec<(String, bool)> = (1..=args.members)
        .map(|i| (format!("member{i}"), i % 3 == 0))
        .collect();
    let targets = targets(args, &members, args.runtime == "netns");
    for f in faults::plan(seed, args.duration, args.interval, &targets) {
        println!(
            "  {:>6.1}s  {:<22} {}",
            f.at.as_secs_f64(),
            f.target.to_string(),
            f.action
        );
    }
}

/// Injects one fault; a pause or a cut is lifted in the background.
async fn inject(
    dir: &Path,
    up: &mut Up,
    fault: &Fault,
    underlay: Option<&str>,
    args: &ChaosArgs,
) -> anyhow::Result<()> {
    use rustix::process::Signal;
    match (&fault.target, &fault.action) {
        (Target::Up, Action::Kill) => {
            up.kill();
            // Its children stop once their stdin closes; `up` resumes the
            // fleet once they have.
            up.restart(dir, args).await?;
        }
        (Target::Up, Action::Pause(d)) => {
            let pid = up.pid();
            faults::signal(&pid, Signal::STOP);
            let d = *d;
            tokio::spawn(async move {
                tokio::time::sleep(d).await;
                faults::signal(&pid, Signal::CONT);
            });
        }
        (Target::Underlay, Action::Cut(d)) => {
            if let Some(u) = underlay {
                let _ = flotilla_fabric::underlay::set_up(u, false).await;
                let (u, d) = (u.to_string(), *d);
                tokio::spawn(async move {
                    tokio::time::sleep(d).await;
                    let _ = flotilla_fabric::underlay::set_up(&u, true).await;
                });
            }
        }
        (target, Action::Kill) => faults::signal(&faults::pids(dir, target), Signal::KILL),
        (target, Action::Pause(d)) => {
            let pids = faults::pids(dir, target);
            faults::signal(&pids, Signal::STOP);
            let d = *d;
            tokio::spawn(async move {
                tokio::time::sleep(d).await;
                faults::signal(&pids, Signal::CONT);
            });
        }
        (_, Action::Cut(_)) => {}
    }
    Ok(())
}

/// Continues whatever is stopped, restores the underlay, and makes sure
/// `up` runs (it starts whatever of the fleet is not running).
async fn heal(
    dir: &Path,
    up: &mut Up,
    targets: &[Target],
    underlay: Option<&str>,
    args: &ChaosArgs,
) -> anyhow::Result<()> {
    use rustix::process::Signal;
    faults::signal(&up.pid(), Signal::CONT);
    for t in targets {
        faults::signal(&faults::pids(dir, t), Signal::CONT);
    }
    if let Some(u) = underlay {
        let _ = flotilla_fabric::underlay::set_up(u, true).await;
    }
    if !up.running() {
        up.restart(dir, args).await?;
    }
    Ok(())
}

/// Applies `yaml` to the hub with server-side apply, retrying while the
/// hub starts.
async fn apply(kubeconfig: &Path, yaml: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let applied = apply_once(kubeconfig, yaml).await;
        match applied {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() > deadline => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

async fn apply_once(kubeconfig: &Path, yaml: &str) -> anyhow::Result<()> {
    use kube::api::{Api, DynamicObject, Patch, PatchParams};
    use kube::discovery::Discovery;
    let client = crate::kubeconfig::client(kubeconfig).await?;
    let discovery = Discovery::new(client.clone()).run().await?;
    for doc in serde_yaml::Deserializer::from_str(yaml) {
        let value: serde_json::Value = serde::Deserialize::deserialize(doc)?;
        if value.is_null() {
            continue;
        }
        let object: DynamicObject = serde_json::from_value(value.clone())?;
        let gvk = kube::api::GroupVersionKind::try_from(
            object
                .types
                .as_ref()
                .context("a manifest without apiVersion and kind")?,
        )?;
        let (resource, caps) = discovery
            .resolve_gvk(&gvk)
            .with_context(|| format!("the hub does not serve {gvk:?}"))?;
        let api: Api<DynamicObject> = match object.metadata.namespace.as_deref() {
            Some(ns) if caps.scope == kube::discovery::Scope::Namespaced => {
                Api::namespaced_with(client.clone(), ns, &resource)
            }
            _ => Api::all_with(client.clone(), &resource),
        };
        let name = object.metadata.name.clone().unwrap_or_default();
        api.patch(
            &name,
            &PatchParams::apply("flotilla-chaos").force(),
            &Patch::Apply(&value),
        )
        .await?;
    }
    Ok(())
}

/// `flotilla up` under chaos: started, killed, started again.
struct Up {
    child: Option<Child>,
    log: PathBuf,
}

impl Up {
    async fn start(dir: &Path, args: &ChaosArgs) -> anyhow::Result<Up> {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot make {}", dir.display()))?;
        let log = dir.with_extension("up.log");
        let mut up = Up { child: None, log };
        up.spawn(dir, args).await?;
        Ok(up)
    }

    async fn spawn(&mut self, dir: &Path, args: &ChaosArgs) -> anyhow::Result<()> {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let mark = std::fs::metadata(&self.log)?.len();
        let mut command = Command::new(std::env::current_exe()?);
        command
            .args(["up", "--data-dir"])
            .arg(dir)
            .args(["--members", &args.members.to_string()])
            .args(["--runtime", &args.runtime])
            .args(["--hub-replicas", &args.hub_replicas.to_string()])
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .kill_on_drop(true);
        #[cfg(unix)]
        command.process_group(0);
        self.child = Some(command.spawn().context("cannot start flotilla up")?);
        // Ready once this start says so.
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            let text = std::fs::read(&self.log).unwrap_or_default();
            let fresh = String::from_utf8_lossy(text.get(mark as usize..).unwrap_or_default());
            if fresh.contains("The fleet is ready") {
                return Ok(());
            }
            if !self.running() || Instant::now() > deadline {
                bail!(
                    "flotilla up did not get the fleet ready; the end of {}:\n{}",
                    self.log.display(),
                    fresh
                        .lines()
                        .rev()
                        .take(20)
                        .collect::<Vec<_>>()
                        .into_iter()
                        .rev()
                        .collect::<Vec<_>>()
                        .join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn pid(&self) -> Vec<i32> {
        self.child
            .as_ref()
            .and_then(Child::id)
            .and_then(|p| i32::try_from(p).ok())
            .into_iter()
            .collect()
    }

    fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    fn kill(&mut self) {
        faults::signal(&self.pid(), rustix::process::Signal::KILL);
    }

    /// Starts `up` again once the fleet it ran has stopped (its children
    /// leave with it; a stopped one is continued so that it can).
    async fn restart(&mut self, dir: &Path, args: &ChaosArgs) -> anyhow::Result<()> {
        if let Some(mut c) = self.child.take() {
            let _ = c.wait().await;
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = fleet_pids(dir);
            if left.is_empty() || Instant::now() > deadline {
                break;
            }
            faults::signal(&left, rustix::process::Signal::CONT);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        self.spawn(dir, args).await
    }

    /// Stops the fleet as Ctrl-C does.
    async fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            faults::signal(
                &c.id()
                    .and_then(|p| i32::try_from(p).ok())
                    .into_iter()
                    .collect::<Vec<_>>(),
                rustix::process::Signal::CONT,
            );
            if let Some(pid) = c.id().and_then(|p| i32::try_from(p).ok()) {
                faults::signal(&[pid], rustix::process::Signal::INT);
            }
            if tokio::time::timeout(Duration::from_secs(60), c.wait())
                .await
                .is_err()
            {
                let _ = c.kill().await;
            }
        }
    }

    /// Leaves `up` running after chaos exits.
    fn detach(&mut self) {
        if let Some(c) = self.child.take() {
            std::mem::forget(c);
        }
    }
}

/// The processes of the fleet at `dir` that still run (any subcommand:
/// those whose command lines name a path under it), but its etcd, which
/// does not stop with `up` (the next `up` ends it).
fn fleet_pids(dir: &Path) -> Vec<i32> {
    flotilla_host::processes::all()
        .into_iter()
        .filter(|p| p.running && !p.is_program("etcd") && p.names_path_under(dir))
        .map(|p| p.pid)
        .collect()
}
