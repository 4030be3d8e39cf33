//! `flotilla member --runtime netns`: pods that run, seen through kubectl
//! as a user sees them. The runtime makes network namespaces, so these
//! tests need root (CI has it); they are skipped only when
//! FLOTILLA_SKIP_NETNS_AS_ROOT=1 says so.

mod common;

use std::time::Duration;

use common::{Server, assert_has, flotilla, wait_for};

use common::can_run_netns as can_run;

fn jsonpath(m: &Server, what: &[&str], path: &str) -> String {
    let mut args = vec!["get"];
    args.extend_from_slice(what);
    let out = format!("-o=jsonpath={path}");
    args.push(&out);
    let o = m.kubectl(&args);
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Waits for an Event about `pod` with `reason` whose message has `text`.
fn wait_event(m: &Server, pod: &str, reason: &str, text: &str) {
    let path = format!(
        "{{range .items[?(@.involvedObject.name==\"{pod}\")]}}{{.reason}}: {{.message}}{{\"\\n\"}}{{end}}"
    );
    let mut last = String::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        last = jsonpath(m, &["events"], &path);
        if last
            .lines()
            .any(|l| l.starts_with(&format!("{reason}: ")) && l.contains(text))
        {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("no {reason} event about {pod} saying {text:?}; events:\n{last}");
}

fn wait_phase(m: &Server, pod: &str, phase: &str) {
    let mut last = String::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        last = jsonpath(m, &["pod", pod], "{.status.phase}");
        if last == phase {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let describe = m.kubectl(&["get", "pod", pod, "-o", "yaml"]);
    panic!(
        "pod {pod} is {last:?}, not {phase}:\n{}\nmember log:\n{}",
        String::from_utf8_lossy(&describe.stdout),
        m.log()
    );
}

/// The namespaces (`ip netns`) the member made, by the prefix it wrote.
fn namespaces_of(m: &Server) -> Vec<String> {
    let prefix = std::fs::read_to_string(m.data_dir().join("netns-prefix")).unwrap_or_default();
    assert!(
        !prefix.is_empty(),
        "the member says which namespaces are its own"
    );
    std::fs::read_dir("/run/netns")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| n.starts_with(prefix.trim()))
                .collect()
        })
        .unwrap_or_default()
}

/// Host processes whose command line names the member's data dir (its
/// containers' shims and what they exec keep their launch path or cwd).
fn processes_in_netns(namespaces: &[String]) -> usize {
    namespaces
        .iter()
        .map(|ns| {
            let o = std::process::Command::new("ip")
                .args(["netns", "pids", ns])
                .output()
                .expect("ip netns pids");
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .count()
        })
        .sum()
}

const APP: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: app-config}
data: {greeting: hello, app.conf: "mode=test\n"}
---
apiVersion: v1
kind: Secret
metadata: {name: app-secret}
stringData: {password: s3cret}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      nodeSelector: {kubernetes.io/hostname: rt-talk-node-1}
      containers:
      - name: nginx
        image: nginx:1.27
        ports: [{containerPort: 80}]
---
apiVersion: v1
kind: Pod
metadata: {name: client, labels: {app: client, tier: test}}
spec:
  nodeName: rt-talk-node-0
  containers:
  - name: main
    image: busybox
    command: ["sh", "-c", "echo started as $(id -u) with $GREETING; while true; do sleep 1; done"]
    workingDir: /work/here
    env:
    - {name: GREETING, valueFrom: {configMapKeyRef: {name: app-config, key: greeting}}}
    - {name: PASSWORD, valueFrom: {secretKeyRef: {name: app-secret, key: password}}}
    - {name: MY_POD, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
    - {name: MY_IP, valueFrom: {fieldRef: {fieldPath: status.podIP}}}
    - {name: MEM_LIMIT, valueFrom: {resourceFieldRef: {resource: limits.memory, divisor: 1Mi}}}
    - {name: COMBINED, value: "$(MY_POD)-$(GREETING)"}
    resources: {limits: {memory: 64Mi}}
    volumeMounts:
    - {name: config, mountPath: /etc/app}
    - {name: secret, mountPath: /var/run/secret, readOnly: true}
    - {name: info, mountPath: /etc/podinfo}
    - {name: scratch, mountPath: /scratch}
    - {name: token, mountPath: /var/run/secrets/tokens}
  - name: sidecar
    image: busybox
    command: ["sh", "-c", "echo from-sidecar > /scratch/note; while true; do sleep 1; done"]
    securityContext: {runAsUser: 1234}
    volumeMounts: [{name: scratch, mountPath: /scratch}]
  volumes:
  - {name: config, configMap: {name: app-config}}
  - {name: secret, secret: {secretName: app-secret}}
  - {name: info, downwardAPI: {items: [{path: labels, fieldRef: {fieldPath: metadata.labels}}]}}
  - {name: scratch, emptyDir: {}}
  - name: token
    projected:
      sources:
      - serviceAccountToken: {path: token, audience: vault, expirationSeconds: 3600}
"#;

#[test]
fn pods_run_processes_that_talk_log_and_take_exec() {
    if !can_run() {
        return;
    }
    let hosts_before = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
    let m = Server::netns_member("rt-talk", &["--nodes", "2"]);
    m.ok_stdin(&["apply", "-f", "-"], APP);
    wait_phase(&m, "client", "Running");
    // One Event per container: events differing in message stay apart.
    wait_event(&m, "client", "Created", "Created container main");
    wait_event(&m, "client", "Created", "Created container sidecar");
    wait_for(Duration::from_secs(60), "two web pods running", || {
        jsonpath(&m, &["pods", "-l", "app=web"], "{.items[*].status.podIP}")
            .split_whitespace()
            .count()
            == 2
    });

    // Each pod has an address from its node's podCIDR, and hostIP.
    let node = jsonpath(&m, &["pod", "client"], "{.spec.nodeName}");
    let cidr = jsonpath(&m, &["node", &node], "{.spec.podCIDR}");
    let ip = jsonpath(&m, &["pod", "client"], "{.status.podIP}");
    let prefix = cidr
        .rsplit_once('.')
        .map(|x| x.0)
        .unwrap_or_default()
        .to_string();
    assert!(
        ip.starts_with(&prefix),
        "pod IP {ip} is in node CIDR {cidr}"
    );
    assert!(!jsonpath(&m, &["pod", "client"], "{.status.hostIP}").is_empty());

    // The kubelet's checkpoint API, through the node's proxy: this host
    // cannot checkpoint (no CRIU, or a kernel CRIU cannot use), and the
    // answer says so; the kubelet knows only its own pods and paths.
    let checkpoint = |node: &str, container: &str| {
        m.kubectl(&[
            "create",
            "--raw",
            &format!("/api/v1/nodes/{node}/proxy/checkpoint/default/client/{container}"),
            "-f",
            "/dev/null",
        ])
    };
    let refused = checkpoint(&node, "main");
    assert!(!refused.status.success());
    assert_has(
        &String::from_utf8_lossy(&refused.stderr),
        &["checkpointing of default/client/main failed", "CRIU"],
    );
    assert_has(
        &String::from_utf8_lossy(&checkpoint(&node, "nope").stderr),
        &["NotFound", "default/client/nope"],
    );
    let other = jsonpath(&m, &["nodes"], "{.items[*].metadata.name}")
        .split_whitespace()
        .find(|n| *n != node)
        .map(String::from)
        .expect("a second node");
    assert_has(
        &String::from_utf8_lossy(&checkpoint(&other, "main").stderr),
        &["NotFound"],
    );
    assert_has(
        &String::from_utf8_lossy(
            &m.kubectl(&[
                "get",
                "--raw",
                &format!("/api/v1/nodes/{node}/proxy/configz"),
            ])
            .stderr,
        ),
        &["NotFound"],
    );

    // A pod calls each web pod (on the other node) at its IP: the
    // stand-in workload answers with who it is.
    let web: Vec<String> = jsonpath(&m, &["pods", "-l", "app=web"], "{.items[*].metadata.name}")
        .split_whitespace()
        .map(str::to_string)
        .collect();
    for name in &web {
        let ip = jsonpath(&m, &["pod", name], "{.status.podIP}");
        let answer = m.ok(&[
            "exec",
            "client",
            "-c",
            "main",
            "--",
            "curl",
            "-s",
            "-m",
            "5",
            &format!("http://{ip}:80/hello"),
        ]);
        assert_has(
            &answer,
            &[
                &format!("\"pod\":\"{name}\""),
                "\"cluster\":\"rt-talk\"",
                &ip,
            ],
        );
        let health = m.ok(&[
            "exec",
            "client",
            "-c",
            "main",
            "--",
            "curl",
            "-s",
            &format!("{ip}/health"),
        ]);
        assert_eq!(health.trim(), "ok");
    }

    // Environment, user, working directory, volumes.
    let env = m.ok(&["exec", "client", "-c", "main", "--", "env"]);
    assert_has(
        &env,
        &[
            "GREETING=hello",
            "PASSWORD=s3cret",
            "MY_POD=client",
            &format!("MY_IP={ip}"),
            "MEM_LIMIT=64",
            "COMBINED=client-hello",
            "HOSTNAME=client",
        ],
    );
    assert_eq!(
        m.ok(&["exec", "client", "-c", "main", "--", "id", "-u"])
            .trim(),
        "65534"
    );
    assert_eq!(
        m.ok(&["exec", "client", "-c", "sidecar", "--", "id", "-u"])
            .trim(),
        "1234"
    );
    assert_eq!(
        m.ok(&["exec", "client", "-c", "main", "--", "pwd"]).trim(),
        "/work/here"
    );
    assert_eq!(
        m.ok(&[
            "exec",
            "client",
            "-c",
            "main",
            "--",
            "cat",
            "/etc/app/app.conf"
        ]),
        "mode=test\n"
    );
    assert_eq!(
        m.ok(&[
            "exec",
            "client",
            "-c",
            "main",
            "--",
            "cat",
            "/var/run/secret/password"
        ]),
        "s3cret"
    );
    assert_has(
        &m.ok(&[
            "exec",
            "client",
            "-c",
            "main",
            "--",
            "cat",
            "/etc/podinfo/labels",
        ]),
        &["app=\"client\"", "tier=\"test\""],
    );
    let token = m.ok(&[
        "exec",
        "client",
        "-c",
        "main",
        "--",
        "cat",
        "/var/run/secrets/tokens/token",
    ]);
    assert_eq!(token.split('.').count(), 3, "a JWT: {token}");
    let failed_write = m.kubectl(&[
        "exec",
        "client",
        "-c",
        "main",
        "--",
        "sh",
        "-c",
        "echo x > /var/run/secret/x",
    ]);
    assert!(
        !failed_write.status.success(),
        "a readOnly volume refuses writes"
    );
    // emptyDir is shared by the pod's containers.
    assert_eq!(
        m.ok(&["exec", "client", "-c", "main", "--", "cat", "/scratch/note"])
            .trim(),
        "from-sidecar"
    );
    // The pod's own /etc/hosts and resolv.conf; the host's are untouched.
    let hosts = m.ok(&["exec", "client", "-c", "main", "--", "cat", "/etc/hosts"]);
    assert_has(&hosts, &[&format!("{ip}\tclient")]);
    assert_has(
        &m.ok(&[
            "exec",
            "client",
            "-c",
            "main",
            "--",
            "cat",
            "/etc/resolv.conf",
        ]),
        &[
            "search default.svc.cluster.local svc.cluster.local cluster.local",
            "options ndots:5",
        ],
    );
    assert_eq!(
        std::fs::read_to_string("/etc/hosts").unwrap_or_default(),
        hosts_before
    );
    assert_eq!(
        m.ok(&["exec", "client", "-c", "main", "--", "hostname"])
            .trim(),
        "client"
    );

    // exec: stdin, and the exit code of the command.
    assert_eq!(
        m.ok_stdin(
            &[
                "exec", "-i", "client", "-c", "main", "--", "tr", "a-z", "A-Z"
            ],
            "shout\n"
        ),
        "SHOUT\n"
    );
    let failed = m.kubectl(&["exec", "client", "-c", "main", "--", "sh", "-c", "exit 7"]);
    assert_eq!(
        failed.status.code(),
        Some(7),
        "kubectl exits with the command's code"
    );
    let missing = m.kubectl(&["exec", "client", "-c", "main", "--", "no-such-command"]);
    assert!(!missing.status.success());
    assert_has(
        &String::from_utf8_lossy(&missing.stderr),
        &["no-such-command", "not found"],
    );

    // logs: the container's output, -c, --tail, --timestamps; errors as upstream.
    let logs = m.ok(&["logs", "client", "-c", "main"]);
    assert_has(&logs, &["started as 65534 with hello"]);
    let web_logs = m.ok(&["logs", &web[0]]);
    assert_has(&web_logs, &["serving HTTP on :80", "GET /hello"]);
    assert_eq!(m.ok(&["logs", &web[0], "--tail", "1"]).lines().count(), 1);
    let stamped = m.ok(&["logs", "client", "-c", "main", "--timestamps"]);
    assert!(stamped.starts_with("20"), "RFC 3339 timestamps: {stamped}");
    let wrong_container = m.kubectl(&["logs", "client", "-c", "nope"]);
    assert_has(
        &String::from_utf8_lossy(&wrong_container.stderr),
        &["container nope is not valid for pod client"],
    );
    let previous = m.kubectl(&["logs", "client", "-c", "main", "--previous"]);
    assert_has(
        &String::from_utf8_lossy(&previous.stderr),
        &["previous terminated container \"main\" in pod \"client\" not found"],
    );

    // The StatefulSet tutorial: each pod's claim gets a volume of its own,
    // nginx serves what is written into it, and it outlives the pod.
    m.ok_stdin(&["apply", "-f", "-"], common::STATEFUL_WEB);
    m.ok(&["rollout", "status", "statefulset/web", "--timeout=60s"]);
    for i in 0..2 {
        m.ok(&[
            "exec",
            &format!("web-{i}"),
            "--",
            "sh",
            "-c",
            "echo \"$(hostname)\" > /usr/share/nginx/html/index.html",
        ]);
        let served = m.ok(&[
            "exec",
            &format!("web-{i}"),
            "--",
            "curl",
            "-s",
            "http://localhost/",
        ]);
        assert_eq!(served.trim(), format!("web-{i}"));
    }
    m.ok(&["delete", "pod", "web-0"]);
    wait_for(
        Duration::from_secs(60),
        "web-0 back with its volume",
        || {
            m.kubectl(&["exec", "web-0", "--", "curl", "-s", "http://localhost/"])
                .stdout
                .starts_with(b"web-0")
        },
    );
}

#[test]
fn exit_codes_become_container_states_jobs_and_restarts() {
    if !can_run() {
        return;
    }
    let m = Server::netns_member("rt-exit", &["--nodes", "1"]);
    m.ok_stdin(
        &["apply", "-f", "-"],
        r#"
apiVersion: batch/v1
kind: Job
metadata: {name: works}
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers: [{name: task, image: busybox, command: ["sh", "-c", "echo done"]}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: fails}
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers: [{name: task, image: busybox, command: ["sh", "-c", "echo failing >&2; exit 3"]}]
---
apiVersion: v1
kind: Pod
metadata: {name: crasher}
spec:
  containers: [{name: c, image: busybox, command: ["sh", "-c", "echo run; exit 1"]}]
---
apiVersion: v1
kind: Pod
metadata: {name: init-first}
spec:
  initContainers: [{name: setup, image: busybox, command: ["sh", "-c", "echo ready > /shared/flag"], volumeMounts: [{name: s, mountPath: /shared}]}]
  containers: [{name: app, image: busybox, command: ["sh", "-c", "cat /shared/flag; sleep 3600"], volumeMounts: [{name: s, mountPath: /shared}]}]
  volumes: [{name: s, emptyDir: {}}]
---
apiVersion: v1
kind: Pod
metadata: {name: clash}
spec:
  containers:
  - {name: first, image: example/web:1.0, ports: [{containerPort: 8080}]}
  - {name: second, image: example/web:1.0, ports: [{containerPort: 8080}]}
---
apiVersion: v1
kind: Pod
metadata: {name: missing-binary}
spec:
  restartPolicy: Never
  containers: [{name: c, image: busybox, command: ["definitely-not-a-binary"]}]
---
apiVersion: v1
kind: Pod
metadata: {name: missing-config}
spec:
  containers:
  - name: c
    image: busybox
    command: ["sleep", "3600"]
    env: [{name: X, valueFrom: {configMapKeyRef: {name: nowhere, key: k}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: liveness-exec}
spec:
  containers:
  - name: liveness
    image: registry.k8s.io/busybox
    args: [/bin/sh, -c, "touch /tmp/healthy; sleep 2; rm -f /tmp/healthy; sleep 600"]
    livenessProbe:
      exec: {command: [cat, /tmp/healthy]}
      periodSeconds: 1
"#,
    );
    // An exec probe's failure says what its command said.
    wait_event(
        &m,
        "liveness-exec",
        "Unhealthy",
        "Liveness probe failed: cat: /tmp/healthy: No such file or directory",
    );
    wait_for(Duration::from_secs(60), "job works to complete", || {
        jsonpath(&m, &["job", "works"], "{.status.succeeded}") == "1"
    });
    wait_for(Duration::from_secs(60), "job fails to fail", || {
        jsonpath(
            &m,
            &["job", "fails"],
            "{.status.conditions[?(@.type==\"Failed\")].status}",
        ) == "True"
    });
    let failed_pod = jsonpath(
        &m,
        &["pods", "-l", "job-name=fails"],
        "{.items[0].metadata.name}",
    );
    let terminated = jsonpath(
        &m,
        &["pod", &failed_pod],
        "{.status.containerStatuses[0].state.terminated.exitCode} {.status.containerStatuses[0].state.terminated.reason} {.status.phase}",
    );
    assert_eq!(terminated, "3 Error Failed");
    assert_has(&m.ok(&["logs", &failed_pod]), &["failing"]);

    // restartPolicy Always: restarted, with the last state kept, then backed off.
    wait_for(Duration::from_secs(60), "crasher restarted", || {
        jsonpath(
            &m,
            &["pod", "crasher"],
            "{.status.containerStatuses[0].restartCount}",
        )
        .parse::<i32>()
        .is_ok_and(|n| n >= 1)
    });
    wait_for(
        Duration::from_secs(60),
        "crasher in CrashLoopBackOff",
        || {
            jsonpath(
                &m,
                &["pod", "crasher"],
                "{.status.containerStatuses[0].state.waiting.reason}",
            ) == "CrashLoopBackOff"
        },
    );
    assert_eq!(
        jsonpath(
            &m,
            &["pod", "crasher"],
            "{.status.containerStatuses[0].lastState.terminated.exitCode}"
        ),
        "1"
    );
    assert_has(&m.ok(&["logs", "crasher", "--previous"]), &["run"]);
    wait_event(
        &m,
        "crasher",
        "BackOff",
        "Back-off restarting failed container c",
    );
    wait_event(&m, "crasher", "Started", "Started container c");
    // Its restarts are counted on the one Event, as `kubectl describe`
    // shows them ("x3 over 20s").
    wait_for(Duration::from_secs(60), "the restarts counted", || {
        let counts = jsonpath(
            &m,
            &["events"],
            "{range .items[?(@.involvedObject.name==\"crasher\")]}{.reason}={.count}{\"\\n\"}{end}",
        );
        let started: Vec<&str> = counts
            .lines()
            .filter(|l| l.starts_with("Started="))
            .collect();
        started.len() == 1
            && started[0]
                .trim_start_matches("Started=")
                .parse::<u32>()
                .unwrap_or(0)
                >= 2
    });

    // Init containers run first, to completion.
    wait_phase(&m, "init-first", "Running");
    assert_eq!(
        jsonpath(
            &m,
            &["pod", "init-first"],
            "{.status.initContainerStatuses[0].state.terminated.reason}"
        ),
        "Completed"
    );
    wait_for(
        Duration::from_secs(20),
        "the app saw the init container's file",
        || {
            m.kubectl(&["logs", "init-first"])
                .stdout
                .starts_with(b"ready")
        },
    );

    // Two containers of a pod on one port: one of them cannot listen, and
    // says so in its log while it is restarted.
    wait_for(
        Duration::from_secs(60),
        "a clashing container restarted",
        || {
            jsonpath(
                &m,
                &["pod", "clash"],
                "{.status.containerStatuses[*].restartCount}",
            )
            .split_whitespace()
            .any(|n| n.parse::<i32>().is_ok_and(|n| n >= 1))
        },
    );
    let logs: String = ["first", "second"]
        .iter()
        .map(|c| {
            String::from_utf8_lossy(&m.kubectl(&["logs", "clash", "-c", c, "--previous"]).stdout)
                .into_owned()
        })
        .collect();
    assert_has(&logs, &["cannot listen on port 8080"]);

    // Bad input: a status and a reason, never a crash.
    wait_phase(&m, "missing-binary", "Failed");
    let state = jsonpath(
        &m,
        &["pod", "missing-binary"],
        "{.status.containerStatuses[0].state.terminated.reason}: {.status.containerStatuses[0].state.terminated.message}",
    );
    assert_has(
        &state,
        &[
            "StartError",
            "definitely-not-a-binary",
            "not found in $PATH",
        ],
    );
    wait_for(Duration::from_secs(30), "missing-config waiting", || {
        jsonpath(
            &m,
            &["pod", "missing-config"],
            "{.status.containerStatuses[0].state.waiting.reason}",
        ) == "CreateContainerConfigError"
    });
    assert_has(
        &jsonpath(
            &m,
            &["pod", "missing-config"],
            "{.status.containerStatuses[0].state.waiting.message}",
        ),
        &["nowhere", "not found"],
    );
    wait_event(&m, "missing-config", "Failed", "nowhere");
    wait_event(&m, "missing-binary", "Failed", "definitely-not-a-binary");
    // Given the ConfigMap, it starts.
    m.ok(&["create", "configmap", "nowhere", "--from-literal=k=v"]);
    wait_phase(&m, "missing-config", "Running");
    wait_for(Duration::from_secs(30), "missing-config ready", || {
        jsonpath(
            &m,
            &["pod", "missing-config"],
            "{.status.containerStatuses[0].ready}",
        ) == "true"
    });
}

#[test]
fn a_member_leaves_nothing_behind_even_after_kill_9() {
    if !can_run() {
        return;
    }
    let mut m = Server::netns_member("rt-clean", &["--nodes", "2"]);
    m.ok_stdin(
        &["apply", "-f", "-"],
        r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: sleepers}
spec:
  replicas: 3
  selector: {matchLabels: {app: s}}
  template:
    metadata: {labels: {app: s}}
    spec:
      containers: [{name: c, image: busybox, command: ["sleep", "3600"]}]
"#,
    );
    wait_for(Duration::from_secs(60), "three sleepers running", || {
        jsonpath(&m, &["pods"], "{.items[*].status.phase}")
            .split_whitespace()
            .filter(|p| *p == "Running")
            .count()
            == 3
    });
    // The member, two nodes, three pods; a process in each pod.
    let made = namespaces_of(&m);
    assert_eq!(made.len(), 1 + 2 + 3, "namespaces: {made:?}");
    assert_eq!(processes_in_netns(&made), 3);

    // kill -9: the pods' processes outlive the member...
    m.kill9();
    assert_eq!(processes_in_netns(&made), 3);
    // ...and its next start removes them before making its network anew.
    m.spawn();
    wait_for(
        Duration::from_secs(60),
        "the sleepers running again",
        || {
            jsonpath(
                &m,
                &["pods"],
                "{.items[*].status.containerStatuses[*].ready}",
            )
            .split_whitespace()
            .filter(|r| *r == "true")
            .count()
                == 3
                && processes_in_netns(&namespaces_of(&m)) == 3
        },
    );
    assert!(
        made.iter()
            .all(|ns| namespaces_of(&m).contains(ns) || ns.contains("-p")),
        "node namespaces keep their names"
    );

    // Deleting a pod ends its process and removes its namespace.
    let victim = jsonpath(&m, &["pods"], "{.items[0].metadata.name}");
    m.ok(&["delete", "pod", &victim]);
    wait_for(
        Duration::from_secs(60),
        "a replacement, and no more than 3 pods",
        || {
            let ns = namespaces_of(&m);
            ns.len() == 6 && processes_in_netns(&ns) == 3
        },
    );

    // The host's record names the member as the running owner of its
    // prefix: `flotilla cleanup` leaves it.
    let prefix = std::fs::read_to_string(m.data_dir().join("netns-prefix")).unwrap();
    let cleanup = |extra: &[&str]| {
        let out = flotilla(&[&["cleanup"], extra].concat());
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let said = cleanup(&[]);
    assert!(
        said.contains(&format!("netns member {} is in use", prefix.trim())),
        "{said}"
    );
    assert_eq!(
        namespaces_of(&m).len(),
        6,
        "cleanup left the running member"
    );

    // A stop removes everything, its entry in the record too.
    let before_stop = namespaces_of(&m);
    m.stop();
    assert_eq!(namespaces_of(&m), Vec::<String>::new());
    assert_eq!(processes_in_netns(&before_stop), 0);
    let said = cleanup(&["--dry-run"]);
    assert!(!said.contains(prefix.trim()), "{said}");
}

#[test]
fn a_netns_member_refuses_what_it_cannot_do_safely() {
    // A non-loopback listen without the acknowledgement: refused at once.
    let out = common::flotilla(&[
        "member",
        "--name",
        "exposed",
        "--runtime",
        "netns",
        "--listen",
        "0.0.0.0:0",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_has(
        &err,
        &["--listen 0.0.0.0:0 is not loopback", "--allow-remote-exec"],
    );
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");

    // Without root: one line naming what is missing, and nothing made.
    if common::which("setpriv").is_none() || !can_run() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .expect("chmod");
    let data = dir.path().join("data");
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_flotilla"))
        .args([
            "member",
            "--name",
            "unprivileged",
            "--runtime",
            "netns",
            "--data-dir",
        ])
        .arg(&data)
        .env("FLOTILLA_LOG", "error")
        .output()
        .expect("setpriv");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_has(
        &err,
        &["--runtime netns needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN)"],
    );
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(
        !data.join("netns-prefix").exists(),
        "no network was started"
    );
}

const SERVICES: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: payment-api}
spec:
  replicas: 2
  selector: {matchLabels: {app: payment-api}}
  template:
    metadata: {labels: {app: payment-api}}
    spec:
      containers:
      - name: api
        image: example/payment-api:1.0
        ports: [{name: http, containerPort: 8080}]
        readinessProbe: {httpGet: {path: /health, port: http}, periodSeconds: 1}
---
apiVersion: v1
kind: Pod
metadata: {name: never-ready, labels: {app: payment-api}}
spec:
  containers:
  - name: api
    image: example/payment-api:1.0
    ports: [{name: http, containerPort: 8080}]
    readinessProbe: {tcpSocket: {port: 9999}, periodSeconds: 1}
---
apiVersion: v1
kind: Service
metadata: {name: payment-api}
spec:
  type: NodePort
  selector: {app: payment-api}
  ports: [{name: http, port: 80, targetPort: http}]
---
apiVersion: v1
kind: Service
metadata: {name: payment-api-pods}
spec:
  clusterIP: None
  selector: {app: payment-api}
  ports: [{name: http, port: 8080}]
---
apiVersion: v1
kind: Pod
metadata: {name: client, labels: {app: client}}
spec:
  containers: [{name: c, image: busybox, command: ["sleep", "3600"]}]
---
apiVersion: v1
kind: Pod
metadata: {name: frontend, labels: {role: frontend}}
spec:
  containers: [{name: c, image: busybox, command: ["sleep", "3600"]}]
"#;

#[test]
fn services_dns_and_network_policy_work_inside_a_member() {
    if !can_run() {
        return;
    }
    let m = Server::netns_member("rt-svc", &["--nodes", "2"]);
    m.ok_stdin(&["apply", "-f", "-"], SERVICES);
    wait_for(
        Duration::from_secs(60),
        "two ready payment-api pods",
        || {
            jsonpath(
                &m,
                &["deployment", "payment-api"],
                "{.status.readyReplicas}",
            ) == "2"
        },
    );
    wait_phase(&m, "client", "Running");
    wait_phase(&m, "frontend", "Running");
    wait_phase(&m, "never-ready", "Running");
    assert_eq!(
        jsonpath(
            &m,
            &["pod", "never-ready"],
            "{.status.containerStatuses[0].ready}"
        ),
        "false",
        "its readiness probe fails"
    );
    wait_event(
        &m,
        "never-ready",
        "Unhealthy",
        "Readiness probe failed: dial tcp",
    );
    let ready: Vec<String> = jsonpath(
        &m,
        &["pods", "-l", "app=payment-api"],
        "{.items[?(@.status.containerStatuses[0].ready==true)].metadata.name}",
    )
    .split_whitespace()
    .map(str::to_string)
    .collect();
    assert_eq!(ready.len(), 2);

    // Each node answers its pods' ARP for their gateway at once (a
    // delayed answer held a fresh connection's SYN-ACK up to 0.8 s).
    let nodes: Vec<String> = namespaces_of(&m)
        .into_iter()
        .filter(|n| {
            n.rsplit('-').next().is_some_and(|s| {
                s.strip_prefix('n')
                    .is_some_and(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()))
            })
        })
        .collect();
    assert_eq!(nodes.len(), 2, "{nodes:?}");
    let mut veths = 0;
    for node in &nodes {
        let links = std::process::Command::new("ip")
            .args(["-n", node, "-o", "link", "show", "type", "veth"])
            .output()
            .expect("ip");
        for line in String::from_utf8_lossy(&links.stdout).lines() {
            // The node's own eth0 is its uplink, not a pod's.
            let Some(name) = line
                .split(": ")
                .nth(1)
                .and_then(|n| n.split('@').next())
                .filter(|n| *n != "eth0")
            else {
                continue;
            };
            let delay = std::process::Command::new("ip")
                .args(["netns", "exec", node, "cat"])
                .arg(format!("/proc/sys/net/ipv4/neigh/{name}/proxy_delay"))
                .output()
                .expect("ip netns exec");
            assert_eq!(
                String::from_utf8_lossy(&delay.stdout).trim(),
                "0",
                "{node}/{name} delays its proxied ARP answers"
            );
            veths += 1;
        }
    }
    assert!(veths >= 5, "every pod's veth was looked at ({veths})");

    // The member's /metrics says where its pods' starts went.
    let metrics = m.ok(&["get", "--raw", "/metrics"]);
    for step in [
        "flotilla_kubelet_pod_sandbox_files_seconds",
        "flotilla_kubelet_pod_network_setup_seconds",
        "flotilla_kubelet_container_process_start_seconds",
    ] {
        let count: u64 = metrics
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{step}_count ")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {step} in /metrics:\n{metrics}"));
        assert!(count >= 5, "{step}: {count} pods' starts counted");
    }

    // By name, through cluster DNS and the Service: only ready pods
    // answer, and both of them do.
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..30 {
        let answer = m.ok(&[
            "exec",
            "client",
            "--",
            "curl",
            "-s",
            "-m",
            "5",
            "http://payment-api/",
        ]);
        let pod = answer
            .split("\"pod\":\"")
            .nth(1)
            .and_then(|s| s.split('"').next())
            .unwrap_or_default()
            .to_string();
        assert!(ready.contains(&pod), "{pod:?} answered: {answer}");
        seen.insert(pod);
        if seen.len() == 2 {
            break;
        }
    }
    assert_eq!(
        seen.len(),
        2,
        "requests are spread over the ready endpoints"
    );
    let fqdn = m.ok(&[
        "exec",
        "client",
        "--",
        "curl",
        "-s",
        "-m",
        "5",
        "payment-api.default.svc.cluster.local/x",
    ]);
    assert_has(&fqdn, &["\"path\":\"/x\""]);

    // DNS records as CoreDNS serves them.
    let cluster_ip = jsonpath(&m, &["svc", "payment-api"], "{.spec.clusterIP}");
    let dns_ip = jsonpath(
        &m,
        &["svc", "kube-dns", "-n", "kube-system"],
        "{.spec.clusterIP}",
    );
    assert_eq!(dns_ip, "10.96.0.10");
    let dig = |args: &[&str]| {
        let mut all = vec!["exec", "client", "--", "dig", "+short", "@10.96.0.10"];
        all.extend_from_slice(args);
        m.ok(&all)
    };
    assert_eq!(
        dig(&["payment-api.default.svc.cluster.local"]).trim(),
        cluster_ip
    );
    let mut headless: Vec<String> = dig(&["payment-api-pods.default.svc.cluster.local"])
        .lines()
        .map(str::to_string)
        .collect();
    headless.sort();
    let mut ready_ips: Vec<String> = ready
        .iter()
        .map(|p| jsonpath(&m, &["pod", p], "{.status.podIP}"))
        .collect();
    ready_ips.sort();
    assert_eq!(
        headless, ready_ips,
        "a headless Service has one A per ready pod"
    );
    assert_eq!(
        dig(&["SRV", "_http._tcp.payment-api.default.svc.cluster.local"]).trim(),
        "0 100 80 payment-api.default.svc.cluster.local."
    );

    // NodePort, on another node's address.
    let node_port = jsonpath(&m, &["svc", "payment-api"], "{.spec.ports[0].nodePort}");
    let node_ip = jsonpath(
        &m,
        &["node", "rt-svc-node-1"],
        "{.status.addresses[?(@.type==\"InternalIP\")].address}",
    );
    let via_node = m.ok(&[
        "exec",
        "client",
        "--",
        "curl",
        "-s",
        "-m",
        "5",
        &format!("http://{node_ip}:{node_port}/"),
    ]);
    assert_has(&via_node, &["\"namespace\":\"default\""]);

    // A NetworkPolicy lets only the frontend in; the client is cut off.
    m.ok_stdin(
        &["apply", "-f", "-"],
        r#"
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: only-frontend}
spec:
  podSelector: {matchLabels: {app: payment-api}}
  policyTypes: [Ingress]
  ingress:
  - from: [{podSelector: {matchLabels: {role: frontend}}}]
    ports: [{port: http}]
"#,
    );
    wait_for(Duration::from_secs(30), "the client blocked", || {
        !m.kubectl(&[
            "exec",
            "client",
            "--",
            "curl",
            "-s",
            "-m",
            "1",
            "http://payment-api/",
        ])
        .status
        .success()
    });
    assert_has(
        &m.ok(&[
            "exec",
            "frontend",
            "--",
            "curl",
            "-s",
            "-m",
            "5",
            "http://payment-api/",
        ]),
        &["\"namespace\":\"default\""],
    );
    // Deleting it opens the way again.
    m.ok(&["delete", "networkpolicy", "only-frontend"]);
    wait_for(Duration::from_secs(30), "the client let through", || {
        m.kubectl(&[
            "exec",
            "client",
            "--",
            "curl",
            "-s",
            "-m",
            "2",
            "http://payment-api/",
        ])
        .status
        .success()
    });
}

#[test]
fn deletion_stops_the_process_within_its_grace_period() {
    if !can_run() {
        return;
    }
    let m = Server::netns_member("rt-grace", &["--nodes", "1"]);
    m.ok_stdin(
        &["apply", "-f", "-"],
        r#"
apiVersion: v1
kind: Pod
metadata: {name: stubborn}
spec:
  terminationGracePeriodSeconds: 3
  containers: [{name: c, image: busybox, command: ["sh", "-c", "trap 'echo ignoring TERM' TERM; while true; do sleep 0.2; done"]}]
"#,
    );
    wait_phase(&m, "stubborn", "Running");
    let namespaces = namespaces_of(&m);
    // Between two sleeps the shell is alone for an instant: wait to see both.
    wait_for(Duration::from_secs(10), "the shell and its sleep", || {
        processes_in_netns(&namespaces) == 2
    });
    // kubectl delete waits: meanwhile the pod is Terminating, its process
    // alive (it ignores SIGTERM) until SIGKILL at the end of the grace.
    let mut delete = std::process::Command::new("kubectl")
        .args(["--kubeconfig"])
        .arg(&m.kubeconfig)
        .args(["delete", "pod", "stubborn"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("kubectl");
    wait_for(
        Duration::from_secs(10),
        "the pod marked for deletion",
        || {
            jsonpath(
                &m,
                &["pod", "stubborn"],
                "{.metadata.deletionGracePeriodSeconds}",
            ) == "3"
        },
    );
    assert!(
        processes_in_netns(&namespaces) > 0,
        "still running within its grace"
    );
    assert!(delete.wait().expect("kubectl delete").success());
    assert_eq!(
        processes_in_netns(&namespaces),
        0,
        "killed once the grace ran out"
    );
    assert!(
        !m.kubectl(&["get", "pod", "stubborn"]).status.success(),
        "gone from the API"
    );
    assert_eq!(
        namespaces_of(&m).len(),
        2,
        "the member's and the node's namespaces only"
    );
}

#[test]
fn the_python_client_execs_and_port_forwards() {
    if !can_run() {
        return;
    }
    let m = Server::netns_member("rt-py", &["--nodes", "1"]);
    m.ok(&[
        "run",
        "shell",
        "--image=busybox",
        "--command",
        "--",
        "sleep",
        "3600",
    ]);
    m.ok(&["run", "web", "--image=nginx:1.27", "--port=80"]);
    wait_phase(&m, "shell", "Running");
    wait_phase(&m, "web", "Running");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python_streams.py");
    let out = std::process::Command::new("python3")
        .arg(script)
        .arg(&m.kubeconfig)
        .output()
        .expect("python3 runs (pip install kubernetes, or bash .ci/run)");
    assert!(
        out.status.success(),
        "python client failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_has(
        &String::from_utf8_lossy(&out.stdout),
        &["python streams ok"],
    );
    // attach -i to a container that keeps stdin open (stdinOnce: its EOF
    // is the container's).
    m.ok_stdin(
        &["apply", "-f", "-"],
        r#"
apiVersion: v1
kind: Pod
metadata: {name: reader}
spec:
  restartPolicy: Never
  containers:
  - {name: c, image: busybox, stdin: true, stdinOnce: true, command: ["sh", "-c", "read line; echo got:$line"]}
"#,
    );
    wait_phase(&m, "reader", "Running");
    let attached = m.ok_stdin(&["attach", "-i", "reader"], "hello\n");
    assert_has(&attached, &["got:hello"]);
    wait_phase(&m, "reader", "Succeeded");
    // kubectl run -i --rm: a shell reading its script from stdin, gone after.
    let ran = m.ok_stdin(
        &[
            "run",
            "once",
            "-i",
            "--rm",
            "--image=busybox",
            "--restart=Never",
            "--command",
            "--",
            "sh",
        ],
        "echo hi from run; id -u\n",
    );
    assert_has(&ran, &["hi from run", "65534", "pod \"once\" deleted"]);
    assert!(!m.kubectl(&["get", "pod", "once"]).status.success());
    // kubectl attach streams a running container's output.
    m.ok(&[
        "run",
        "ticker",
        "--image=busybox",
        "--restart=Never",
        "--command",
        "--",
        "sh",
        "-c",
        "sleep 1; for i in 1 2 3; do echo tick $i; sleep 0.3; done",
    ]);
    wait_phase(&m, "ticker", "Running");
    let attached = m.kubectl(&["attach", "ticker"]);
    assert_has(&String::from_utf8_lossy(&attached.stdout), &["tick 3"]);
    // The Kubernetes tutorial's hello-node: agnhost's netexec, imitated.
    m.ok(&[
        "create",
        "deployment",
        "hello-node",
        "--image=registry.k8s.io/e2e-test-images/agnhost:2.39",
        "--",
        "/agnhost",
        "netexec",
        "--http-port=8080",
    ]);
    m.ok(&["expose", "deployment", "hello-node", "--port=8080"]);
    m.ok(&[
        "rollout",
        "status",
        "deployment/hello-node",
        "--timeout=60s",
    ]);
    let answer = m.ok(&[
        "exec",
        "shell",
        "--",
        "curl",
        "-s",
        "http://hello-node:8080/hostname",
    ]);
    assert!(answer.starts_with("hello-node-"), "{answer}");
    let echoed = m.ok(&[
        "exec",
        "shell",
        "--",
        "curl",
        "-s",
        "http://hello-node:8080/echo?msg=hi",
    ]);
    assert_eq!(echoed, "hi");
    // Args without a command go to the image's own entrypoint (busybox
    // has none: the args are the program), not to the stand-in.
    m.ok(&[
        "run",
        "args-only",
        "--image=busybox",
        "--restart=Never",
        "--",
        "sh",
        "-c",
        "echo args ran as $0",
    ]);
    wait_phase(&m, "args-only", "Succeeded");
    assert_has(&m.ok(&["logs", "args-only"]), &["args ran as sh"]);
    // kubectl debug: the ephemeral container runs the image's shell in
    // the pod's network, reading what is typed into it.
    let debugged = m.ok_stdin(
        &["debug", "-i", "shell", "--image=busybox", "-c", "dbg"],
        "echo debug-$((6*7)) in $(hostname); exit\n",
    );
    assert_has(&debugged, &["debug-42 in shell"]);
    wait_for(
        Duration::from_secs(30),
        "the debug container to end",
        || {
            jsonpath(
                &m,
                &["pod", "shell"],
                "{.status.ephemeralContainerStatuses[0].state.terminated.reason}",
            ) == "Completed"
        },
    );
    // The pod itself is untouched.
    assert_eq!(
        jsonpath(
            &m,
            &["pod", "shell"],
            "{.status.containerStatuses[0].ready}"
        ),
        "true"
    );
}

/// `kubectl port-forward` running in the background, killed on drop.
struct PortForward(std::process::Child, std::path::PathBuf);

impl Drop for PortForward {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl PortForward {
    fn start(m: &Server, target: &str, port: &str) -> PortForward {
        let out = m.dir.path().join(format!("port-forward-{port}.log"));
        let file = std::fs::File::create(&out).expect("log");
        let child = std::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&m.kubeconfig)
            .args(["port-forward", target, &format!(":{port}")])
            .stdout(file.try_clone().expect("log"))
            .stderr(file)
            .spawn()
            .expect("kubectl port-forward");
        PortForward(child, out)
    }

    fn output(&self) -> String {
        std::fs::read_to_string(&self.1).unwrap_or_default()
    }

    /// The local address kubectl picked.
    fn local(&self) -> String {
        let mut found = String::new();
        wait_for(Duration::from_secs(30), "kubectl to listen", || {
            found = self
                .output()
                .split_whitespace()
                .find(|w| w.starts_with("127.0.0.1:"))
                .unwrap_or_default()
                .to_string();
            !found.is_empty()
        });
        found
    }
}

fn curl(url: &str) -> std::process::Output {
    std::process::Command::new("curl")
        .args(["-s", "-m", "5", url])
        .output()
        .expect("curl")
}

#[test]
fn kubectl_port_forward_and_spdy_exec_reach_a_pod() {
    if !can_run() {
        return;
    }
    let m = Server::netns_member("rt-pf", &["--nodes", "1"]);
    m.ok(&["run", "web", "--image=nginx:1.27", "--port=80"]);
    wait_phase(&m, "web", "Running");
    // kubectl speaks SPDY/3.1 (after asking for it in a WebSocket); each
    // local connection is a stream to the pod's port.
    let pf = PortForward::start(&m, "pod/web", "80");
    let local = pf.local();
    for path in ["/first", "/second"] {
        let answer = curl(&format!("http://{local}{path}"));
        assert_has(
            &String::from_utf8_lossy(&answer.stdout),
            &["\"pod\":\"web\"", &format!("\"path\":\"{path}\"")],
        );
    }
    // exec over SPDY, as kubectl before 1.30 (or told to) speaks it.
    let spdy = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&m.kubeconfig)
        .args([
            "exec",
            "-i",
            "web",
            "--",
            "sh",
            "-c",
            "cat; echo to-stderr >&2; exit 6",
        ])
        .env("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", "false")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().expect("stdin").write_all(b"over spdy\n")?;
            c.wait_with_output()
        })
        .expect("kubectl exec");
    assert_eq!(String::from_utf8_lossy(&spdy.stdout), "over spdy\n");
    assert_has(&String::from_utf8_lossy(&spdy.stderr), &["to-stderr"]);
    assert_eq!(spdy.status.code(), Some(6));
    // A port nothing listens on: the error comes back on the error stream.
    let closed = PortForward::start(&m, "pod/web", "9999");
    let local = closed.local();
    assert!(!curl(&format!("http://{local}/")).status.success());
    wait_for(
        Duration::from_secs(10),
        "kubectl to report the error",
        || {
            closed
                .output()
                .contains("error forwarding port 9999 to pod web")
        },
    );
}

#[test]
fn the_hub_reaches_a_members_pods_through_the_cluster_proxy() {
    if !can_run() {
        return;
    }
    let member = Server::netns_member("rt-proxied", &["--nodes", "1"]);
    let hub = Server::controlplane(&[]);
    let joined = common::flotilla(&[
        "join",
        "rt-proxied",
        "--kubeconfig",
        hub.kubeconfig.to_str().unwrap(),
        "--cluster-kubeconfig",
        member.kubeconfig.to_str().unwrap(),
    ]);
    assert!(
        joined.status.success(),
        "{}",
        String::from_utf8_lossy(&joined.stderr)
    );
    member.ok(&["run", "web", "--image=nginx:1.27", "--port=80"]);
    wait_phase(&member, "web", "Running");
    // A kubeconfig whose server is the proxy URL drives the member
    // through the hub: reads, logs and exec (WebSocket, joined end to end).
    let server = std::fs::read_to_string(&hub.kubeconfig)
        .unwrap()
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: ").map(str::to_string))
        .expect("the hub's server");
    let proxy = format!("{server}/apis/cluster.karmada.io/v1alpha1/clusters/rt-proxied/proxy");
    let via_hub = |args: &[&str]| {
        let mut all = vec!["--server", proxy.as_str()];
        all.extend_from_slice(args);
        hub.kubectl(&all)
    };
    let pods = via_hub(&["get", "pods", "-o", "name"]);
    assert_eq!(String::from_utf8_lossy(&pods.stdout).trim(), "pod/web");
    let logs = via_hub(&["logs", "web"]);
    assert_has(
        &String::from_utf8_lossy(&logs.stdout),
        &["serving HTTP on :80"],
    );
    let exec = via_hub(&["exec", "web", "--", "sh", "-c", "echo via the hub; exit 5"]);
    assert_has(&String::from_utf8_lossy(&exec.stdout), &["via the hub"]);
    assert_eq!(exec.status.code(), Some(5));
    // An unknown cluster is the hub's NotFound.
    let missing = hub.kubectl(&[
        "get",
        "--raw",
        "/apis/cluster.karmada.io/v1alpha1/clusters/nope/proxy/api",
    ]);
    assert_has(
        &String::from_utf8_lossy(&missing.stderr),
        &["clusters.cluster.karmada.io \"nope\" not found"],
    );
}

#[test]
fn memory_limits_are_enforced_where_cgroups_allow() {
    if !can_run() {
        return;
    }
    let v2 = std::fs::read_to_string("/sys/fs/cgroup/cgroup.controllers")
        .is_ok_and(|c| c.contains("memory"));
    let v1 = std::path::Path::new("/sys/fs/cgroup/memory/memory.limit_in_bytes").exists();
    if !v2 && !v1 {
        eprintln!("skipped: this machine has no cgroup memory controller (docs/member.md)");
        return;
    }
    let mut m = Server::netns_member("rt-oom", &["--nodes", "1"]);
    m.ok_stdin(
        &["apply", "-f", "-"],
        r#"
apiVersion: v1
kind: Pod
metadata: {name: hog}
spec:
  restartPolicy: Never
  containers:
  - name: c
    image: busybox
    command: ["sh", "-c", "head -c 300000000 /dev/zero | tail"]
    resources: {limits: {memory: 32Mi, cpu: 500m}}
"#,
    );
    wait_phase(&m, "hog", "Failed");
    assert_eq!(
        jsonpath(
            &m,
            &["pod", "hog"],
            "{.status.containerStatuses[0].state.terminated.reason} {.status.containerStatuses[0].state.terminated.exitCode}"
        ),
        "OOMKilled 137"
    );
    // The member's groups go with it.
    let prefix = std::fs::read_to_string(m.data_dir().join("netns-prefix")).unwrap();
    m.stop();
    for hierarchy in ["", "/memory", "/cpu"] {
        let dir = format!("/sys/fs/cgroup{hierarchy}/flotilla-{}", prefix.trim());
        assert!(!std::path::Path::new(&dir).exists(), "{dir} is left");
    }
}

const MCS_APP: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: echo}
spec:
  replicas: 2
  selector: {matchLabels: {app: echo}}
  template:
    metadata: {labels: {app: echo}}
    spec:
      containers:
      - name: api
        image: example/echo:1.0
        ports: [{name: http, containerPort: 8080}]
        readinessProbe: {httpGet: {path: /health, port: http}, periodSeconds: 1}
---
apiVersion: v1
kind: Service
metadata: {name: echo}
spec:
  selector: {app: echo}
  ports: [{name: http, port: 80, targetPort: http}]
---
apiVersion: v1
kind: Pod
metadata: {name: client}
spec:
  containers: [{name: c, image: busybox, command: ["sleep", "3600"]}]
"#;

/// Submariner Globalnet's GlobalIngressIP, as far as the member reads it.
const GLOBAL_INGRESS_IP_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: globalingressips.submariner.io}
spec:
  group: submariner.io
  scope: Namespaced
  names: {kind: GlobalIngressIP, plural: globalingressips, singular: globalingressip}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
"#;

/// A ClusterSetIP outside the member's service range, in the hub's
/// default ClusterSetIP range (243.0.0.0/16).
const CLUSTERSET_IP: &str = "243.0.0.7";
/// A Globalnet ingress IP, as Globalnet would allocate one.
const GLOBAL_IP: &str = "242.1.0.5";

#[test]
fn clusterset_ips_clusterset_dns_and_global_ingress_ips_reach_pods() {
    if !can_run() {
        return;
    }
    let m = Server::netns_member("rt-mcs", &[]);
    m.ok_stdin(&["apply", "-f", "-"], MCS_APP);
    wait_for(Duration::from_secs(60), "two ready echo pods", || {
        jsonpath(&m, &["deployment", "echo"], "{.status.readyReplicas}") == "2"
    });
    wait_phase(&m, "client", "Running");
    let curl = |url: &str, timeout: &str| {
        m.kubectl(&["exec", "client", "--", "curl", "-s", "-m", timeout, url])
    };
    let answered_by = |out: &std::process::Output| {
        String::from_utf8_lossy(&out.stdout)
            .split("\"pod\":\"")
            .nth(1)
            .and_then(|s| s.split('"').next())
            .unwrap_or_default()
            .to_string()
    };
    let pods: Vec<String> = jsonpath(&m, &["pods", "-l", "app=echo"], "{.items[*].metadata.name}")
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let ips: Vec<String> = pods
        .iter()
        .map(|p| jsonpath(&m, &["pod", p], "{.status.podIP}"))
        .collect();

    // Without the MCS and Globalnet CRDs (a member never joined),
    // Services and cluster DNS work as ever.
    assert!(curl("http://echo/", "5").status.success(), "{}", m.log());

    // The CRDs the hub would install, and a Globalnet one, by hand.
    for crd in flotilla_core::mcs::crds() {
        m.ok_stdin(&["apply", "-f", "-"], &crd.to_string());
    }
    m.ok_stdin(&["apply", "-f", "-"], GLOBAL_INGRESS_IP_CRD);
    wait_for(Duration::from_secs(20), "the CRDs served", || {
        m.kubectl(&["get", "serviceimports,globalingressips"])
            .status
            .success()
    });

    // An import as the hub's MCS controller writes it: a ClusterSetIP,
    // and one slice per exporting cluster with that cluster's pods.
    let endpoints: Vec<String> = ips
        .iter()
        .map(|ip| format!("{{addresses: [\"{ip}\"], conditions: {{ready: true}}}}"))
        .collect();
    m.ok_stdin(
        &["apply", "-f", "-"],
        &format!(
            r#"
apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceImport
metadata: {{name: echo}}
spec:
  type: ClusterSetIP
  ips: ["{CLUSTERSET_IP}"]
  ports: [{{name: http, protocol: TCP, port: 80}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: echo-rt-mcs
  labels:
    multicluster.kubernetes.io/service-name: echo
    multicluster.kubernetes.io/source-cluster: rt-mcs
    endpointslice.kubernetes.io/managed-by: mcs.flotilla.io
addressType: IPv4
ports: [{{name: http, port: 8080, protocol: TCP}}]
endpoints: [{}]
"#,
            endpoints.join(", ")
        ),
    );
    let by_ip = format!("http://{CLUSTERSET_IP}/");
    wait_for(
        Duration::from_secs(30),
        "the ClusterSetIP to answer",
        || curl(&by_ip, "2").status.success(),
    );
    // Load balanced over the import's ready endpoints.
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..30 {
        let pod = answered_by(&curl(&by_ip, "5"));
        assert!(pods.contains(&pod), "{pod:?} answered");
        seen.insert(pod);
        if seen.len() == 2 {
            break;
        }
    }
    assert_eq!(seen.len(), 2, "both pods answer at the ClusterSetIP");

    // clusterset.local from the member's own DNS, through the pod's
    // resolv.conf.
    let fqdn = "echo.default.svc.clusterset.local";
    wait_for(
        Duration::from_secs(20),
        "clusterset.local to answer",
        || {
            m.ok(&["exec", "client", "--", "dig", "+short", fqdn])
                .trim()
                == CLUSTERSET_IP
        },
    );
    let lookup = m.ok(&["exec", "client", "--", "nslookup", fqdn]);
    assert_has(&lookup, &[CLUSTERSET_IP]);
    assert_eq!(
        m.ok(&[
            "exec",
            "client",
            "--",
            "dig",
            "+short",
            "SRV",
            &format!("_http._tcp.{fqdn}")
        ])
        .trim(),
        format!("0 100 80 {fqdn}.")
    );
    assert!(
        pods.contains(&answered_by(&curl(&format!("http://{fqdn}/"), "5"))),
        "by name"
    );
    // A Headless import: one A per ready endpoint, from every cluster.
    m.ok_stdin(
        &["apply", "-f", "-"],
        &format!(
            r#"
apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceImport
metadata: {{name: echo-pods}}
spec:
  type: Headless
  ports: [{{name: http, protocol: TCP, port: 8080}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: echo-pods-rt-mcs
  labels:
    multicluster.kubernetes.io/service-name: echo-pods
    multicluster.kubernetes.io/source-cluster: rt-mcs
addressType: IPv4
ports: [{{name: http, port: 8080, protocol: TCP}}]
endpoints: [{}, {{addresses: ["10.250.0.9"], conditions: {{ready: false}}}}]
"#,
            endpoints.join(", ")
        ),
    );
    let mut want = ips.clone();
    want.sort();
    wait_for(
        Duration::from_secs(20),
        "the headless import's records",
        || {
            let out = m.ok(&[
                "exec",
                "client",
                "--",
                "dig",
                "+short",
                "echo-pods.default.svc.clusterset.local",
            ]);
            let mut got: Vec<String> = out.lines().map(str::to_string).collect();
            got.sort();
            got == want
        },
    );
    assert_eq!(
        m.ok(&[
            "exec",
            "client",
            "--",
            "dig",
            "+short",
            "echo.default.svc.cluster.local"
        ])
        .trim(),
        jsonpath(&m, &["svc", "echo"], "{.spec.clusterIP}"),
        "cluster.local as before"
    );

    // A Globalnet ingress IP for the Service, once allocated, leads to it.
    m.ok_stdin(
        &["apply", "-f", "-"],
        r#"
apiVersion: submariner.io/v1
kind: GlobalIngressIP
metadata: {name: echo}
spec: {target: ClusterIPService, serviceRef: {name: echo}}
"#,
    );
    m.ok(&[
        "patch",
        "globalingressip",
        "echo",
        "--subresource=status",
        "--type=merge",
        "-p",
        &format!(r#"{{"status":{{"allocatedIP":"{GLOBAL_IP}"}}}}"#),
    ]);
    let global = format!("http://{GLOBAL_IP}/");
    wait_for(
        Duration::from_secs(20),
        "the global ingress IP to answer",
        || curl(&global, "2").status.success(),
    );
    assert!(pods.contains(&answered_by(&curl(&global, "5"))));

    // No ready endpoints left: the ClusterSetIP refuses at once.
    m.ok(&["delete", "endpointslice", "echo-rt-mcs"]);
    wait_for(
        Duration::from_secs(20),
        "the ClusterSetIP to refuse",
        || {
            let out = curl(&by_ip, "5");
            out.status.code() == Some(7)
        },
    );
}

#[test]
fn kubectl_top_reads_what_the_pods_processes_use() {
    if !can_run() {
        return;
    }
    let m = Server::netns_member("rt-top", &["--nodes", "1"]);
    m.ok_stdin(
        &["apply", "-f", "-"],
        r#"
apiVersion: v1
kind: Pod
metadata: {name: spinner}
spec:
  containers: [{name: c, image: busybox, command: ["sh", "-c", "while :; do :; done"]}]
---
apiVersion: v1
kind: Pod
metadata: {name: hoarder}
spec:
  containers: [{name: c, image: busybox, command: ["sh", "-c", "x=$(head -c 30000000 /dev/zero | tr '\\0' a); sleep 3600"]}]
"#,
    );
    wait_phase(&m, "spinner", "Running");
    wait_phase(&m, "hoarder", "Running");
    // (millicores, MiB) of a pod, as `kubectl top` prints them.
    let top = |pod: &str| -> Option<(u64, u64)> {
        let out = m.kubectl(&["top", "pod", pod, "--no-headers"]);
        let line = String::from_utf8_lossy(&out.stdout).to_string();
        let f: Vec<&str> = line.split_whitespace().collect();
        Some((
            f.get(1)?.strip_suffix('m')?.parse().ok()?,
            f.get(2)?.strip_suffix("Mi")?.parse().ok()?,
        ))
    };
    // A busy loop uses most of a core (less on a loaded machine), the
    // other pod's shell holds its 30 MB string and sleeps.
    wait_for(
        Duration::from_secs(60),
        "the spinner's CPU and the hoarder's memory",
        || {
            matches!(
                (top("spinner"), top("hoarder")),
                (Some((spin_cpu, _)), Some((hoard_cpu, hoard_mib)))
                    if spin_cpu >= 200 && hoard_cpu < spin_cpu && hoard_mib >= 28
            )
        },
    );
    let node = m.ok(&["top", "node", "--no-headers"]);
    let node_cpu: u64 = node
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.strip_suffix('m')?.parse().ok())
        .unwrap_or(0);
    assert!(node_cpu >= 200, "the node counts its pods: {node}");
}

/// The HorizontalPodAutoscaler walkthrough (kubernetes.io, "Horizontal
/// Pod Autoscaler Walkthrough"), its manifest and commands as written but
/// for the load generator's `-i --tty --rm`.
const PHP_APACHE: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: php-apache
spec:
  selector:
    matchLabels:
      run: php-apache
  template:
    metadata:
      labels:
        run: php-apache
    spec:
      containers:
      - name: php-apache
        image: registry.k8s.io/hpa-example
        ports:
        - containerPort: 80
        resources:
          limits:
            cpu: 500m
          requests:
            cpu: 200m
---
apiVersion: v1
kind: Service
metadata:
  name: php-apache
  labels:
    run: php-apache
spec:
  ports:
  - port: 80
  selector:
    run: php-apache
"#;

#[test]
fn the_hpa_walkthrough_scales_php_apache_under_load() {
    if !can_run() {
        return;
    }
    let m = Server::netns_member("rt-hpa", &["--nodes", "2"]);
    m.ok_stdin(&["apply", "-f", "-"], PHP_APACHE);
    m.ok(&[
        "rollout",
        "status",
        "deployment/php-apache",
        "--timeout=60s",
    ]);
    m.ok(&[
        "autoscale",
        "deployment",
        "php-apache",
        "--cpu-percent=50",
        "--min=1",
        "--max=10",
    ]);
    m.ok(&[
        "run",
        "load-generator",
        "--image=busybox:1.28",
        "--restart=Never",
        "--",
        "/bin/sh",
        "-c",
        "while sleep 0.01; do wget -q -O- http://php-apache; done",
    ]);
    wait_phase(&m, "load-generator", "Running");
    // The page answers as the image's does (the generator's own output
    // has no newline: a runtime's log shows it only once 16 KiB are in),
    // and its work shows as CPU: the HPA adds replicas.
    assert_eq!(
        m.ok(&[
            "exec",
            "load-generator",
            "--",
            "wget",
            "-q",
            "-O-",
            "http://php-apache"
        ]),
        "OK!"
    );
    wait_for(Duration::from_secs(90), "php-apache scaled out", || {
        jsonpath(&m, &["hpa", "php-apache"], "{.status.desiredReplicas}")
            .parse::<u32>()
            .is_ok_and(|n| n > 1)
    });
    assert_has(
        &m.ok(&["describe", "hpa", "php-apache"]),
        &["cpu resource utilization (percentage of request) above target"],
    );
    m.ok(&[
        "rollout",
        "status",
        "deployment/php-apache",
        "--timeout=60s",
    ]);
}

const JOINED_NODE_APP: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: web, labels: {app: web}}
spec:
  nodeName: worker-a
  containers: [{name: nginx, image: nginx:1.27, ports: [{containerPort: 80}]}]
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{port: 8080, targetPort: 80}]
---
apiVersion: v1
kind: Pod
metadata: {name: here}
spec:
  nodeName: worker-a
  containers: [{name: c, image: busybox, command: ["sleep", "3600"]}]
---
apiVersion: v1
kind: Pod
metadata: {name: there}
spec:
  nodeName: rt-nodes-node-0
  containers: [{name: c, image: busybox, command: ["sleep", "3600"]}]
"#;

/// A machine that joins a running netns member (an infrastructure
/// provider's) gets a node network of its own: its pods run, reach and
/// are reached by pods of the other nodes, Services work from it; when it
/// leaves, its namespace goes with its pods.
#[test]
fn nodes_joining_a_netns_member_get_their_own_network() {
    if !can_run() {
        return;
    }
    let m = Server::netns_member("rt-nodes", &["--nodes", "1"]);
    let before = namespaces_of(&m);
    let data = m.data_dir();
    let node = |args: &[&str]| {
        let mut all = vec![
            "member",
            "node",
            "--data-dir",
            data.to_str().expect("utf-8"),
        ];
        all.extend_from_slice(args);
        let out = common::flotilla(&all);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    node(&["add", "worker-a"]);
    wait_for(Duration::from_secs(30), "worker-a Ready", || {
        jsonpath(
            &m,
            &["node", "worker-a"],
            "{.status.conditions[?(@.type==\"Ready\")].status}",
        ) == "True"
    });
    m.ok_stdin(&["apply", "-f", "-"], JOINED_NODE_APP);
    for pod in ["web", "here", "there"] {
        wait_phase(&m, pod, "Running");
    }
    let ip = jsonpath(&m, &["pod", "web"], "{.status.podIP}");
    let cidr = jsonpath(&m, &["node", "worker-a"], "{.spec.podCIDR}");
    assert!(
        ip.starts_with(cidr.rsplit_once('.').map(|x| x.0).unwrap_or("?")),
        "pod IP {ip} is in worker-a's pod CIDR {cidr}"
    );
    assert_eq!(
        namespaces_of(&m).len(),
        before.len() + 4,
        "a node and three pods"
    );
    // From the other node to the pod's IP; from the new node to the Service.
    let answer = m.ok(&[
        "exec",
        "there",
        "--",
        "curl",
        "-s",
        "-m",
        "5",
        &format!("http://{ip}:80/hello"),
    ]);
    assert_has(&answer, &["\"pod\":\"web\""]);
    let answer = m.ok(&[
        "exec",
        "here",
        "--",
        "curl",
        "-s",
        "-m",
        "5",
        "http://web.default.svc.cluster.local:8080/hello",
    ]);
    assert_has(&answer, &["\"pod\":\"web\""]);

    node(&["remove", "worker-a"]);
    wait_for(
        Duration::from_secs(30),
        "worker-a's pods and network gone",
        || {
            !m.kubectl(&["get", "pod", "web"]).status.success()
                && !m.kubectl(&["get", "pod", "here"]).status.success()
                && namespaces_of(&m).len() == before.len() + 1
        },
    );
    assert!(m.kubectl(&["get", "pod", "there"]).status.success());
}

/// A StatefulSet's data outlives its pods: what web-0 wrote to its claim
/// is there for the web-0 that replaces it, on the same node, and web-1
/// has a volume of its own.
#[test]
fn a_statefulsets_volumes_keep_their_data_across_pod_restarts() {
    if !can_run() {
        return;
    }
    let m = Server::netns_member("rt-data", &["--nodes", "2"]);
    m.ok_stdin(&["apply", "-f", "-"], common::STATEFUL_WEB);
    m.ok(&["rollout", "status", "statefulset/web", "--timeout=60s"]);
    let write = |pod: &str, text: &str| {
        m.ok(&[
            "exec",
            pod,
            "--",
            "sh",
            "-c",
            &format!("echo {text} > /usr/share/nginx/html/index.html"),
        ])
    };
    let read = |pod: &str| {
        m.ok(&["exec", pod, "--", "cat", "/usr/share/nginx/html/index.html"])
            .trim()
            .to_string()
    };
    write("web-0", "written-by-web-0");
    write("web-1", "written-by-web-1");
    let node = jsonpath(&m, &["pod", "web-0"], "{.spec.nodeName}");
    let uid = jsonpath(&m, &["pod", "web-0"], "{.metadata.uid}");
    m.ok(&["delete", "pod", "web-0"]);
    wait_for(Duration::from_secs(60), "a new web-0 running", || {
        jsonpath(&m, &["pod", "web-0"], "{.metadata.uid} {.status.phase}").ends_with("Running")
            && jsonpath(&m, &["pod", "web-0"], "{.metadata.uid}") != uid
    });
    assert_eq!(jsonpath(&m, &["pod", "web-0"], "{.spec.nodeName}"), node);
    assert_eq!(read("web-0"), "written-by-web-0");
    assert_eq!(read("web-1"), "written-by-web-1");
    assert_has(
        &m.ok(&["get", "pv,pvc"]),
        &["www-web-0", "www-web-1", "Bound", "standard", "RWO"],
    );
}
