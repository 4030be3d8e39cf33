//! A fleet for end-to-end tests: `flotilla controlplane` with short
//! health thresholds and simulated members joined with `flotilla join`.

use std::process::Output;
use std::time::Duration;

use super::{Running, Server, flotilla, wait_for};

const WAIT: Duration = Duration::from_secs(60);

/// The control plane's health thresholds, shortened for tests.
pub const SHORT_THRESHOLDS: [&str; 8] = [
    "--cluster-monitor-grace-period",
    "2s",
    "--cluster-status-update-frequency",
    "500ms",
    "--cluster-failure-threshold",
    "1s",
    "--cluster-success-threshold",
    "1s",
];

/// A control plane with short health thresholds and joined members.
pub struct Fleet {
    pub hub: Server,
    pub members: Vec<(String, Server)>,
}

impl Fleet {
    pub fn new(members: &[(&str, &str)]) -> Fleet {
        Fleet::with_member_args(members, &[])
    }

    /// As `new`, with extra flags for every member.
    pub fn with_member_args(members: &[(&str, &str)], member_args: &[&str]) -> Fleet {
        Fleet::with_args(members, member_args, &[])
    }

    /// As `new`, with extra flags for every member and for the hub (a
    /// threshold among them replaces the short one).
    pub fn with_args(members: &[(&str, &str)], member_args: &[&str], hub_args: &[&str]) -> Fleet {
        Fleet::build(members, member_args, hub_args, &[])
    }

    /// As `new`, every process started so that failpoints can be armed in
    /// it at run time ([`Server::arm_failpoint`]).
    pub fn armable(members: &[(&str, &str)]) -> Fleet {
        Fleet::build(members, &[], &[], &[(super::FAILPOINTS, "")])
    }

    fn build(
        members: &[(&str, &str)],
        member_args: &[&str],
        hub_args: &[&str],
        env: &[(&str, &str)],
    ) -> Fleet {
        let mut args: Vec<&str> = SHORT_THRESHOLDS
            .chunks(2)
            .filter(|flag| !hub_args.contains(&flag[0]))
            .flatten()
            .copied()
            .collect();
        args.extend_from_slice(hub_args);
        let hub = Server::controlplane_with_env(&args, env);
        let mut fleet = Fleet {
            hub,
            members: Vec::new(),
        };
        for (name, region) in members {
            let mut args = vec!["--nodes", "2"];
            args.extend_from_slice(member_args);
            let m = Server::member_with_env(name, &args, env);
            fleet.members.push((name.to_string(), m));
            fleet.join(name, region);
        }
        for (name, _) in members {
            fleet.wait_ready(name);
        }
        fleet
    }

    /// Adds a member reached only by its agent (Pull mode), with a token
    /// the hub issued; returns the agent, which stops when dropped.
    pub fn pull_member(&mut self, name: &str, region: &str, member_args: &[&str]) -> Running {
        let args = self.add_pull_member(name, region, member_args);
        let agent = Running::start(&args.iter().map(String::as_str).collect::<Vec<_>>());
        self.wait_ready(name);
        agent
    }

    /// Adds a member for an agent to register, and says how to run the
    /// agent (its token's kubeconfig is `NAME-agent.kubeconfig` in the
    /// hub's directory).
    pub fn add_pull_member(
        &mut self,
        name: &str,
        region: &str,
        member_args: &[&str],
    ) -> Vec<String> {
        let mut args = vec!["--nodes", "2"];
        args.extend_from_slice(member_args);
        self.members
            .push((name.to_string(), Server::member(name, &args)));
        let member_kubeconfig = self.member(name).kubeconfig.clone();
        let agent_kubeconfig = self.hub.dir.path().join(format!("{name}-agent.kubeconfig"));
        let out = flotilla(&[
            "token",
            "create",
            "--kubeconfig",
            self.hub.kubeconfig.to_str().unwrap(),
            "--cluster",
            name,
            "--write-kubeconfig",
            agent_kubeconfig.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        [
            "agent",
            "--cluster-name",
            name,
            "--kubeconfig",
            agent_kubeconfig.to_str().unwrap(),
            "--cluster-kubeconfig",
            member_kubeconfig.to_str().unwrap(),
            "--region",
            region,
            "--cluster-status-update-frequency",
            "500ms",
            "--cluster-lease-duration",
            "2s",
        ]
        .map(String::from)
        .to_vec()
    }

    pub fn member(&self, name: &str) -> &Server {
        &self
            .members
            .iter()
            .find(|(n, _)| n == name)
            .expect("member")
            .1
    }

    pub fn join(&self, name: &str, region: &str) {
        let m = self.member(name);
        let out = flotilla(&[
            "join",
            name,
            "--kubeconfig",
            self.hub.kubeconfig.to_str().unwrap(),
            "--cluster-kubeconfig",
            m.kubeconfig.to_str().unwrap(),
            "--region",
            region,
            "--labels",
            &format!("region={region}"),
        ]);
        assert!(out.status.success(), "join {name}: {}", stderr(&out));
    }

    pub fn wait_ready(&self, name: &str) {
        wait_for(WAIT, &format!("{name} Ready"), || {
            self.jsonpath_hub(
                &["get", "cluster", name],
                "{.status.conditions[?(@.type==\"Ready\")].status}",
            ) == "True"
        });
    }

    pub fn jsonpath_hub(&self, args: &[&str], path: &str) -> String {
        jsonpath(&self.hub, args, path)
    }

    pub fn apply(&self, yaml: &str) {
        let out = self.hub.kubectl_stdin(&["apply", "-f", "-"], Some(yaml));
        assert!(out.status.success(), "apply: {}", stderr(&out));
    }
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `kubectl get ... -o jsonpath=PATH`, or "" when the object is missing.
pub fn jsonpath(s: &Server, args: &[&str], path: &str) -> String {
    let p = format!("jsonpath={path}");
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["-o", &p]);
    let out = s.kubectl(&all);
    if !out.status.success() {
        return String::new();
    }
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

pub fn exists(s: &Server, args: &[&str]) -> bool {
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["-o", "name"]);
    s.kubectl(&all).status.success()
}

pub fn member_fault(fleet: &Fleet, member: &str, args: &[&str]) {
    let data = fleet.member(member).data_dir();
    let mut all = vec!["member", "fault", "--data-dir", data.to_str().unwrap()];
    all.extend(args);
    let out = flotilla(&all);
    assert!(out.status.success(), "{}", stderr(&out));
}

impl Drop for Fleet {
    fn drop(&mut self) {
        if std::env::var_os("FLOTILLA_TEST_LOGS").is_some() {
            eprintln!("---- hub log ----\n{}", self.hub.log());
        }
    }
}
