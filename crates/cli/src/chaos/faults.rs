//! The faults: which component, what happens to it, when. The plan is
//! drawn from the seed alone (no I/O), so a run is replayed by its seed;
//! the injection finds the component's processes by their command lines
//! under the fleet's data dir and signals them.

use std::path::Path;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// A component of the fleet that faults reach.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Target {
    /// `flotilla up` itself (its children stop with it; it is started again).
    Up,
    /// A replica of the control plane, by its data dir's name (`hub`,
    /// `hub-2`, ...).
    Hub(String),
    /// The fleet's etcd (hubs of several replicas).
    Etcd,
    /// A member cluster's process.
    Member(String),
    /// A Pull member's agent.
    Agent(String),
    /// A member's gateways (netns fleets).
    Gateways(String),
    /// The underlay between the gateways (netns fleets).
    Underlay,
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Up => write!(f, "up"),
            Target::Hub(d) if d == "hub" => write!(f, "hub"),
            Target::Hub(d) => write!(f, "hub replica {}", d.trim_start_matches("hub-")),
            Target::Etcd => write!(f, "etcd"),
            Target::Member(m) => write!(f, "member {m}"),
            Target::Agent(m) => write!(f, "agent of {m}"),
            Target::Gateways(m) => write!(f, "gateways of {m}"),
            Target::Underlay => write!(f, "underlay"),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// SIGKILL; `flotilla up` starts the component again (or chaos starts
    /// `up` again).
    Kill,
    /// SIGSTOP, then SIGCONT after the pause.
    Pause(Duration),
    /// The underlay cut, then restored after the outage.
    Cut(Duration),
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Action::Kill => write!(f, "SIGKILL"),
            Action::Pause(d) => write!(f, "SIGSTOP for {:.1}s", d.as_secs_f64()),
            Action::Cut(d) => write!(f, "cut for {:.1}s", d.as_secs_f64()),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Fault {
    /// When, from the start of the faults.
    pub at: Duration,
    pub target: Target,
    pub action: Action,
}

/// The faults of a run of `duration`, about one every `interval`
/// (between half and one and a half of it), over `targets`.
pub fn plan(seed: u64, duration: Duration, interval: Duration, targets: &[Target]) -> Vec<Fault> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut out = Vec::new();
    if targets.is_empty() || interval.is_zero() {
        return out;
    }
    let mut at = Duration::ZERO;
    loop {
        at += interval.mul_f64(rng.random_range(0.5..1.5));
        if at >= duration {
            return out;
        }
        let target = targets[rng.random_range(0..targets.len())].clone();
        let hold = Duration::from_millis(rng.random_range(500..3000));
        let action = match target {
            Target::Underlay => Action::Cut(hold),
            _ if rng.random_bool(0.7) => Action::Kill,
            _ => Action::Pause(hold),
        };
        out.push(Fault { at, target, action });
    }
}

/// The processes of `target` in the fleet at `dir` (not `up`'s own:
/// chaos holds that one).
pub fn pids(dir: &Path, target: &Target) -> Vec<i32> {
    let member_dir = |m: &str| dir.join(m);
    flotilla_host::processes::all()
        .into_iter()
        .filter(|p| p.running && p.names_path_under(dir))
        .filter(|p| {
            let sub = p.subcommand();
            match target {
                Target::Hub(d) => {
                    sub == "controlplane"
                        && p.has_flag("--data-dir", &dir.join(d).display().to_string())
                }
                Target::Etcd => p.is_program("etcd"),
                Target::Member(m) => sub == "member" && p.has_flag("--name", m),
                Target::Agent(m) => sub == "agent" && p.has_flag("--cluster-name", m),
                Target::Gateways(m) => sub == "gateway" && p.names_path_under(&member_dir(m)),
                Target::Up | Target::Underlay => false,
            }
        })
        .map(|p| p.pid)
        .collect()
}

/// Sends `signal` to each of `pids`.
pub fn signal(pids: &[i32], signal: rustix::process::Signal) {
    for &pid in pids {
        if let Some(pid) = rustix::process::Pid::from_raw(pid) {
            let _ = rustix::process::kill_process(pid, signal);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn targets() -> Vec<Target> {
        vec![
            Target::Up,
            Target::Hub("hub".into()),
            Target::Member("member1".into()),
            Target::Agent("member3".into()),
        ]
    }

    #[test]
    fn a_seed_draws_the_same_plan_and_another_seed_another() {
        let d = Duration::from_secs(60);
        let i = Duration::from_secs(3);
        let a = plan(7, d, i, &targets());
        assert_eq!(a, plan(7, d, i, &targets()));
        assert_ne!(a, plan(8, d, i, &targets()));
        assert!(a.len() >= 20 && a.len() <= 60, "{}", a.len());
        assert!(a.windows(2).all(|w| w[0].at < w[1].at));
        assert!(a.iter().all(|f| f.at < d));
        assert!(a.iter().any(|f| f.action == Action::Kill));
        assert!(a.iter().any(|f| matches!(f.action, Action::Pause(_))));
        for t in targets() {
            assert!(a.iter().any(|f| f.target == t), "{t} never hit");
        }
    }

    #[test]
    fn the_underlay_is_cut_not_killed() {
        let p = plan(
            1,
            Duration::from_secs(30),
            Duration::from_secs(1),
            &[Target::Underlay],
        );
        assert!(!p.is_empty());
        assert!(p.iter().all(|f| matches!(f.action, Action::Cut(_))));
    }
}
