//! The README, run as written: every command of its fenced `sh` blocks, in
//! order, in one shell, as a user pasting them would.
//!
//! What differs from a user's terminal, and why:
//! - `cargo` is a shell function: `cargo build --release` does nothing
//!   (the test's own build of `flotilla` stands at `target/release`), and
//!   `cargo run --release -- ARGS` runs that binary with ARGS. `cargo test`
//!   (the README's test command) is this suite, so it is skipped.
//! - `cargo run --release -- up` (the Run section) runs in the background,
//!   as "in another terminal" says, and the walkthrough starts once it
//!   prints that the fleet is ready.
//! - A command that fails is tried again, for up to 90 s, as a user waits
//!   for a fleet to converge; some commands must also print what their
//!   comment promises (the table `EXPECTED`).
//! - It all runs in private mount, network and PID namespaces (root, as in
//!   CI): a tmpfs over /tmp, a HOME of its own, loopback of its own for
//!   the fixed ports the README uses, and every process it started ends
//!   with it. Nothing on the machine is touched. Only the README, the
//!   binary and the example manifests it applies (`tests/data/gardener`)
//!   are in its working directory.

mod common;

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};

/// One command of a block: its section and its text (continuation lines
/// and heredocs included).
#[derive(Debug)]
struct Step {
    section: String,
    text: String,
}

/// The commands of README.md's `sh` blocks, in order.
fn steps(readme: &str) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut section = String::new();
    let mut lines = readme.lines();
    while let Some(line) = lines.next() {
        if let Some(heading) = line.strip_prefix('#').map(|h| h.trim_start_matches('#')) {
            section = heading.trim().to_string();
            continue;
        }
        if line.trim() != "```sh" {
            continue;
        }
        let mut block: Vec<&str> = Vec::new();
        for line in lines.by_ref() {
            if line.trim() == "```" {
                break;
            }
            block.push(line);
        }
        let mut i = 0;
        while i < block.len() {
            let line = block[i];
            i += 1;
            // Blank lines, and comments on lines of their own.
            if line.trim().is_empty() || line.trim_start().starts_with('#') {
                continue;
            }
            let mut text = line.to_string();
            let mut last = line;
            // A line continues after a backslash, and after a pipe or
            // `&&` that wait for their right-hand side, as bash reads it.
            let continues = |l: &str| {
                let l = l.trim_end();
                l.ends_with('\\') || l.ends_with('|') || l.ends_with("&&")
            };
            while continues(last) && i < block.len() {
                last = block[i];
                i += 1;
                text.push('\n');
                text.push_str(last);
            }
            if let Some(end) = heredoc_end(&text) {
                while i < block.len() {
                    let body = block[i];
                    i += 1;
                    text.push('\n');
                    text.push_str(body);
                    if body.trim_end() == end {
                        break;
                    }
                }
            }
            steps.push(Step {
                section: section.clone(),
                text,
            });
        }
    }
    steps
}

/// The terminator of a heredoc the command opens (`<<'YAML'` → `YAML`).
fn heredoc_end(text: &str) -> Option<String> {
    let (_, rest) = text.split_once("<<")?;
    let word = rest.split_whitespace().next()?;
    Some(word.trim_matches(|c| c == '\'' || c == '"').to_string())
}

/// What a command must print, beyond succeeding, as its comment in the
/// README says: (how the command starts, what its output contains, each).
/// Every figure a comment states is among them
/// (`every_figure_the_readme_states_is_checked`).
const EXPECTED: &[(&str, &[&str])] = &[
    (
        "kubectl --kubeconfig alice.kubeconfig auth whoami",
        &["alice"],
    ),
    ("flotilla get deploy api -n team-a", &["1/1"]),
    ("kubectl --kubeconfig alice.kubeconfig auth can-i", &["no"]),
    ("flotilla clusters", &["member3"]),
    ("flotilla chaos --seed 1", &["violations: 0"]),
    (
        "flotilla plan -f web.yaml",
        &[
            "member1    1 replica",
            "member2    1 replica   overrides: OverridePolicy/eu-mirror",
            "member3    2 replicas",
        ],
    ),
    ("flotilla get deploy web", &["1/1", "2/2"]),
    // The FederatedHPA's decision (before "kubectl get deploy web ").
    (
        "kubectl get deploy web -o jsonpath='{.spec.replicas}'",
        &["12"],
    ),
    ("kubectl get deploy web ", &["4/4"]),
    (
        "flotilla describe placement deploy/web",
        &["PropagationPolicy default/web"],
    ),
    (
        "kubectl --context member2 get deploy web -o jsonpath",
        &["mirror.eu.example.com/nginx:1.27"],
    ),
    ("kubectl scale deploy web --replicas=8", &["scaled"]),
    ("kubectl get fhpa web", &["REFERENCE-KIND"]),
    ("flotilla get deployments web", &["3/3", "6/6"]),
    ("kubectl delete fhpa web", &["scaled"]),
    ("kubectl get cl dev", &["Provisioned"]),
    (
        "flotilla cluster describe dev",
        &["MachineDeployment/dev-md-0"],
    ),
    (
        "kubectl --kubeconfig dev.kubeconfig get nodes",
        &["dev-md-0-"],
    ),
    (
        "kubectl get shoots -n garden-local",
        &["Create Succeeded (100%)", "healthy"],
    ),
    (
        "kubectl --kubeconfig local.kubeconfig get nodes",
        &["local-control-plane-", "local-local-"],
    ),
    (
        "kubectl --context member1 get serviceexport web",
        &["Ready"],
    ),
    (
        "kubectl --context member2 get serviceimport web",
        &["ClusterSetIP"],
    ),
    ("kubectl --context member2 get endpointslices", &["web-"]),
    (
        "kubectl --context member3 get serviceimport web",
        &["ClusterSetIP"],
    ),
    ("dig @127.0.0.1 -p 5353 +short web.default", &["243.0."]),
    (
        "dig @127.0.0.1 -p 5353 +short SRV",
        &["web.default.svc.clusterset.local"],
    ),
    ("kubectl get namespaces", &["kube-node-lease"]),
    (
        "kubectl explain deployment.spec.strategy",
        &["rollingUpdate"],
    ),
    (
        "kubectl --kubeconfig /tmp/hub-b/kubeconfig -n kube-system get lease",
        &["flotilla-controlplane"],
    ),
    ("kubectl get nodes", &["member1-"]),
    (
        "kubectl rollout status deployment/web",
        &["successfully rolled out"],
    ),
    ("kubectl get pods -o wide", &["Running"]),
    ("kubectl top pod -l app=payment-api", &["payment-api-"]),
    ("kubectl top pod ", &["500m"]),
    ("kubectl get hpa web", &["100%/50%"]),
    (
        "kubectl exec client -- curl -s payment-api/",
        &["\"cluster\":\"east\""],
    ),
    (
        "kubectl exec client -- cat /etc/resolv.conf",
        &["nameserver 10.96.0.10"],
    ),
    (
        "kubectl logs deployment/payment-api",
        &["serving HTTP on :8080"],
    ),
    ("flotilla network show connections", &["connected"]),
    (
        "kubectl exec client -- curl -s http://payment-api.production.svc.clusterset.local",
        &["ok"],
    ),
    ("flotilla network verify", &["passed"]),
    (
        "flotilla peer --kubeconfig",
        &["virtual node liqo-milan Ready"],
    ),
    ("kubectl get node liqo-milan", &["milan"]),
    ("kubectl get pods -n production -o wide", &["liqo-milan"]),
    (
        "kubectl --kubeconfig /tmp/peering/milan/kubeconfig get pods",
        &["Running"],
    ),
    (
        "flotilla peering info",
        &["Virtual node liqo-milan: Healthy"],
    ),
    ("flotilla unpeer", &["unpeered"]),
];

fn expected(command: &str) -> &'static [&'static str] {
    EXPECTED
        .iter()
        .find(|(start, _)| command.starts_with(start))
        .map_or(&[], |(_, out)| out)
}

/// The example manifests of the checkout that the README applies.
fn examples_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/gardener")
}

/// Single-quoted for bash.
fn quoted(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The script that runs `steps` inside the namespaces.
fn script(steps: &[Step], binary: &Path, readme: &Path) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        r#"ip link set lo up
# The binary and the README on a tmpfs of their own, before /tmp is
# replaced: the checkout itself may live under /tmp.
mount -t tmpfs tmpfs /mnt
mkdir -p /mnt/work/target/release /mnt/home
cp {readme} /mnt/work/README.md
# The example manifests the README applies from the checkout.
mkdir -p /mnt/work/crates/cli/tests/data
cp -r {examples} /mnt/work/crates/cli/tests/data/
touch /mnt/work/target/release/flotilla
mount --bind {binary} /mnt/work/target/release/flotilla
mount -t tmpfs tmpfs /tmp
# Named network namespaces (a netns member's) are files here.
mkdir -p /run/netns && mount -t tmpfs tmpfs /run/netns
[ -d /etc/bash_completion.d ] && mount -t tmpfs tmpfs /etc/bash_completion.d
export HOME=/mnt/home
unset KUBECONFIG XDG_DATA_HOME XDG_CONFIG_HOME
cd /mnt/work

cargo() {{
  case "$*" in
    "build --release") return 0 ;;
    "run --release -- "*) shift 3; "$PWD/target/release/flotilla" "$@" ;;
    *) echo "the README test maps only cargo build/run --release: $*" >&2; return 2 ;;
  esac
}}

# Runs the command read from stdin until it succeeds and prints each of
# $2..., for up to 90 s.
step() {{
  local section="$1" cmd out status missing want
  shift
  cmd=$(cat)
  local deadline=$((SECONDS + 90))
  while :; do
    # In this shell, so that what a command exports stays for the next.
    eval "$cmd" >/tmp/step.out 2>&1 </dev/null; status=$?
    out=$(cat /tmp/step.out)
    missing=""
    for want in "$@"; do
      grep -qF -- "$want" <<<"$out" || missing="$want"
    done
    if [ $status -eq 0 ] && [ -z "$missing" ]; then
      printf 'ok   [%s] %s\n' "$section" "$(head -n1 <<<"$cmd")"
      return 0
    fi
    if [ $SECONDS -ge $deadline ]; then
      printf 'FAIL [%s]\n%s\n--- exit %s, wanted %q; output:\n%s\n' "$section" "$cmd" "$status" "$missing" "$out"
      exit 1
    fi
    sleep 1
  done
}}

# Background commands (servers) are started as they are, once.
background() {{
  local section="$1" cmd
  cmd=$(cat)
  eval "$cmd" >>/tmp/background.log 2>&1 </dev/null
  printf 'ok   [%s] %s\n' "$section" "$(head -n1 <<<"$cmd")"
}}
"#,
        readme = quoted(&readme.display().to_string()),
        binary = quoted(&binary.display().to_string()),
        examples = quoted(&examples_dir().display().to_string()),
    ));
    for step in steps {
        let command = step.text.trim();
        if command.starts_with("cargo test") {
            continue;
        }
        if command == "cargo run --release -- up" {
            s.push_str(
                r#"cargo run --release -- up > /tmp/up.log 2>&1 </dev/null &
deadline=$((SECONDS + 180))
until grep -q "The fleet is ready" /tmp/up.log; do
  if [ $SECONDS -ge $deadline ]; then echo "FAIL [Run] the fleet did not start:"; cat /tmp/up.log; exit 1; fi
  sleep 1
done
echo "ok   [Run] cargo run --release -- up"
"#,
            );
            continue;
        }
        let runs_in_background = command.lines().next().is_some_and(|first| {
            first
                .split('#')
                .next()
                .unwrap_or("")
                .trim_end()
                .ends_with('&')
        });
        let runner = if runs_in_background {
            "background"
        } else {
            "step"
        };
        let wants: Vec<String> = if runs_in_background {
            Vec::new()
        } else {
            expected(command).iter().map(|w| quoted(w)).collect()
        };
        let section = quoted(&step.section);
        if runs_in_background {
            s.push_str(&format!(
                "{runner} {section} <<'__README_STEP__'\n{command}\n__README_STEP__\n"
            ));
        } else {
            s.push_str(&format!(
                "{runner} {section} {} <<'__README_STEP__'\n{command}\n__README_STEP__\n",
                wants.join(" ")
            ));
        }
    }
    s.push_str("echo 'README: every command ran as written'\n");
    s
}

#[test]
fn the_readme_parses_into_the_commands_a_user_runs() {
    let readme = include_str!("../../../README.md");
    let steps = steps(readme);
    let texts: Vec<&str> = steps.iter().map(|s| s.text.as_str()).collect();
    assert!(texts.contains(&"cargo run --release -- up"), "{texts:#?}");
    assert!(texts.contains(&"cargo test --workspace --locked"));
    // A heredoc is one command, up to its terminator.
    let web = texts
        .iter()
        .find(|t| t.starts_with("cat > web.yaml"))
        .expect("the walkthrough's manifests");
    assert!(web.ends_with("YAML") && web.contains("kind: OverridePolicy"));
    // Continuation lines stay with their command.
    assert!(
        texts
            .iter()
            .any(|t| t.contains("--data-dir /tmp/hub-b --listen"))
    );
    // So do the lines of a pipeline broken after its `|`.
    assert!(
        texts
            .iter()
            .any(|t| t.contains("/adminkubeconfig |\n") && t.ends_with("> local.kubeconfig"))
    );
    assert_eq!(
        heredoc_end("kubectl apply -f - <<'YAML'   # x"),
        Some("YAML".into())
    );
}

/// Units that make a number in the README's prose a measurement, which
/// drifts as the code changes: such figures belong in docs/benchmarks.md,
/// with the command that measures them.
const MEASURED: &[&str] = &[
    "B", "kB", "KB", "MB", "GB", "KiB", "MiB", "GiB", "ms", "s", "seconds", "minutes", "min",
    "hours", "%",
];

/// The figures a text states: its words that start with a digit (one
/// that merely holds a digit, `member1` or `nginx:1.27`, is a name).
fn figures(text: &str) -> Vec<&str> {
    text.split(|c: char| c.is_whitespace() || ",;()\"'".contains(c))
        .map(|w| w.trim_end_matches([':', '.']))
        .filter(|w| w.starts_with(|c: char| c.is_ascii_digit()))
        .collect()
}

/// The measurements the README's prose states ("about 70 MB", "50%").
fn measurements(prose: &str) -> Vec<String> {
    let words: Vec<&str> = prose.split_whitespace().collect();
    let mut found = Vec::new();
    for (i, word) in words.iter().enumerate() {
        let Some(figure) = figures(word).first().copied() else {
            continue;
        };
        let digits = figure.len()
            - figure
                .trim_start_matches(|c: char| c.is_ascii_digit() || c == '.')
                .len();
        let (number, glued) = figure.split_at(digits);
        let next = words
            .get(i + 1)
            .map(|w| w.trim_end_matches(|c: char| c.is_ascii_punctuation() && c != '%'));
        let unit = if glued.is_empty() {
            next.unwrap_or_default()
        } else {
            glued
        };
        if MEASURED.contains(&unit) {
            found.push(format!("{number} {unit}"));
        }
    }
    found
}

#[test]
fn every_figure_the_readme_states_is_checked() {
    let readme = include_str!("../../../README.md");
    let mut in_block = false;
    let prose: Vec<&str> = readme
        .lines()
        .filter(|line| {
            if line.trim_start().starts_with("```") {
                in_block = !in_block;
                return false;
            }
            !in_block
        })
        .collect();
    let stated = measurements(&prose.join("\n"));
    assert!(
        stated.is_empty(),
        "the README's prose states {stated:?}: a test cannot see these; record them in \
         docs/benchmarks.md with the command that measures them, and link there"
    );
    assert_eq!(
        measurements("a binary of about 70 MB, 13 minutes to build, 50% idle"),
        ["70 MB", "13 minutes", "50 %"]
    );
    // What a command's comment promises, the test sees in its output.
    for step in steps(readme) {
        let comment = step
            .text
            .lines()
            .next()
            .and_then(|l| l.split_once(" # "))
            .map_or("", |(_, c)| c);
        let needles: Vec<&str> = expected(&step.text)
            .iter()
            .flat_map(|n| figures(n))
            .collect();
        for figure in figures(comment) {
            assert!(
                needles.contains(&figure),
                "the README says {figure} of `{}` ({comment}), and EXPECTED does not check it",
                step.text.lines().next().unwrap_or_default()
            );
        }
    }
}

#[test]
fn every_readme_command_runs_as_written() {
    if !nix_root() {
        assert!(
            std::env::var_os("FLOTILLA_SKIP_README_AS_ROOT").is_some(),
            "the README test needs root (private mount, network and PID namespaces); \
             run it as root, as CI does, or set FLOTILLA_SKIP_README_AS_ROOT=1"
        );
        return;
    }
    for tool in ["unshare", "ip", "kubectl", "dig", "etcd"] {
        assert!(
            common::which(tool).is_some(),
            "{tool} not found: bash .ci/run installs the README's tools"
        );
    }
    let readme = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
    let readme = readme.canonicalize().expect("README.md");
    let text = std::fs::read_to_string(&readme).expect("read README.md");
    let binary = Path::new(env!("CARGO_BIN_EXE_flotilla"));
    let script = script(&steps(&text), binary, &readme);
    // --kill-child: when the test gives up on it, the namespace's first
    // process dies, and with it everything the README started.
    let mut child = Command::new("unshare")
        .args([
            "--mount",
            "--net",
            "--pid",
            "--fork",
            "--mount-proc",
            "--kill-child",
        ])
        .args(["bash", "-s"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("unshare");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(script.as_bytes())
        .expect("write the script");
    // A command that never returns (a loop waiting for a file that never
    // comes) fails the test at this deadline instead of hanging it.
    let stdout = child.stdout.take().expect("stdout");
    let stderr = child.stderr.take().expect("stderr");
    let read = |mut pipe: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    };
    let (stdout, stderr) = (read(Box::new(stdout)), read(Box::new(stderr)));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20 * 60);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the README") {
            break Some(status);
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    let report = stdout.join().unwrap_or_default();
    let errors = stderr.join().unwrap_or_default();
    eprintln!("{report}");
    assert!(
        status.is_some_and(|s| s.success()) && report.contains("every command ran as written"),
        "a README command failed{}:\n{report}\n{errors}",
        if status.is_none() {
            " (it never returned)"
        } else {
            ""
        }
    );
}

fn nix_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}
