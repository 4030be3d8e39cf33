//! Peering (Liqo's model), end to end through `flotilla peer` and kubectl:
//! two and three members peer without a hub, the consumer sees a virtual
//! node, an offloaded namespace's Deployment runs partly in the provider
//! with its ConfigMaps and Services reflected there, the provider is cut
//! off and comes back without restarting anything, logs and exec reach an
//! offloaded pod, and unpeering leaves nothing behind on either side.

mod common;

use std::process::Output;
use std::time::Duration;

use common::fleet::jsonpath;
use common::underlay::Underlay;
use common::{Server, assert_has, flotilla, wait_for};

const WAIT: Duration = Duration::from_secs(60);

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn kc(m: &Server) -> &str {
    m.kubeconfig.to_str().unwrap()
}

fn peer(consumer: &Server, provider: &Server, extra: &[&str]) -> Output {
    let mut args = vec![
        "peer",
        "--kubeconfig",
        kc(consumer),
        "--remote-kubeconfig",
        kc(provider),
        "--timeout",
        "60s",
    ];
    args.extend_from_slice(extra);
    flotilla(&args)
}

fn unpeer(consumer: &Server, provider: &Server) -> Output {
    flotilla(&[
        "unpeer",
        "--kubeconfig",
        kc(consumer),
        "--remote-kubeconfig",
        kc(provider),
    ])
}

fn fault(m: &Server, what: &str) {
    let dir = m.data_dir();
    let out = flotilla(&["member", "fault", "--data-dir", dir.to_str().unwrap(), what]);
    assert!(out.status.success(), "fault {what}: {}", stderr(&out));
}

fn node_ready(m: &Server, node: &str) -> String {
    jsonpath(
        m,
        &["get", "node", node],
        "{.status.conditions[?(@.type==\"Ready\")].status}",
    )
}

/// `name=phase` of each pod of namespace `ns` whose label `selector`
/// matches, with its node.
fn pods(m: &Server, ns: &str, selector: &str) -> Vec<(String, String, String, String)> {
    let out = jsonpath(
        m,
        &["get", "pods", "-n", ns, "-l", selector],
        "{range .items[*]}{.metadata.name} {.status.phase} {.spec.nodeName} {.status.podIP}{\"\\n\"}{end}",
    );
    out.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            Some((
                f.next()?.to_string(),
                f.next().unwrap_or("").to_string(),
                f.next().unwrap_or("").to_string(),
                f.next().unwrap_or("").to_string(),
            ))
        })
        .collect()
}

const SEED: &str = r#"
apiVersion: v1
kind: Namespace
metadata:
  name: my-app
---
apiVersion: sharing.liqo.io/v1beta1
kind: NamespaceOffloading
metadata:
  name: my-app-offloading
  namespace: my-app
spec:
  clusterSelector:
    matchLabels: {}
  podOffloadingPolicy: LocalAndRemote
"#;

const APP: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: my-app}
data: {color: blue}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: my-app}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: my-app}
spec:
  replicas: 6
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: web
        image: example/web:1.0
        ports: [{containerPort: 8080}]
        resources: {requests: {cpu: 100m, memory: 64Mi}}
"#;

#[test]
fn two_members_peer_offload_reflect_survive_a_cut_and_unpeer() {
    let east = Server::member("east", &[]);
    let west = Server::member("west", &[]);

    let out = peer(&east, &west, &[]);
    assert!(out.status.success(), "peer: {}", stderr(&out));
    assert_has(
        &stderr(&out),
        &[
            "authentication: established",
            "resources: granted",
            "virtual node liqo-west Ready",
        ],
    );

    // The consumer's virtual node, as Liqo makes it.
    let labels = jsonpath(&east, &["get", "node", "liqo-west"], "{.metadata.labels}");
    assert_has(
        &labels,
        &[
            r#""liqo.io/type":"virtual-node""#,
            r#""liqo.io/remote-cluster-id":"west""#,
        ],
    );
    assert_eq!(
        jsonpath(
            &east,
            &["get", "node", "liqo-west"],
            "{.spec.taints[0].key}={.spec.taints[0].value}:{.spec.taints[0].effect}"
        ),
        "virtual-node.liqo.io/not-allowed=true:NoExecute"
    );
    assert!(
        !jsonpath(
            &east,
            &["get", "node", "liqo-west"],
            "{.status.capacity.cpu}"
        )
        .is_empty()
    );
    assert_eq!(
        jsonpath(
            &east,
            &["get", "foreignclusters.core.liqo.io", "west"],
            "{.status.role}"
        ),
        "Provider"
    );
    assert_eq!(
        jsonpath(
            &west,
            &["get", "foreignclusters.core.liqo.io", "east"],
            "{.status.role}"
        ),
        "Consumer"
    );
    assert_eq!(
        jsonpath(
            &east,
            &[
                "get",
                "resourceslices.authentication.liqo.io",
                "west",
                "-n",
                "liqo-tenant-west"
            ],
            "{.status.conditions[?(@.type==\"Resources\")].status}"
        ),
        "Accepted"
    );
    let info = flotilla(&["peering", "info", "--kubeconfig", kc(&east), "-o", "json"]);
    let info: serde_json::Value = serde_json::from_slice(&info.stdout).expect("peering info json");
    assert_eq!(info["west"]["info"]["role"], "Provider");
    assert_eq!(
        info["west"]["offloading"]["virtualNodes"][0]["name"],
        "liqo-west"
    );

    // Secrets are not reflected in this cluster (set before anything is).
    east.ok(&[
        "create",
        "configmap",
        "liqo-reflection",
        "-n",
        "liqo",
        "--from-literal=secrets=Disabled",
    ]);
    // The seed's manifest, verbatim: the namespace gets its twin.
    east.ok_stdin(&["apply", "-f", "-"], SEED);
    wait_for(WAIT, "the namespace offloaded", || {
        jsonpath(
            &east,
            &[
                "get",
                "namespaceoffloadings.sharing.liqo.io",
                "my-app-offloading",
                "-n",
                "my-app",
            ],
            "{.status.offloadingPhase}",
        ) == "Ready"
    });
    west.ok(&["get", "namespace", "my-app-east"]);

    // A Deployment spreads over local and virtual nodes; the offloaded
    // pods run in the provider and their status comes back.
    west.ok(&[
        "create",
        "configmap",
        "taken",
        "-n",
        "my-app-east",
        "--from-literal=a=theirs",
    ]);
    east.ok(&[
        "create",
        "configmap",
        "taken",
        "-n",
        "my-app",
        "--from-literal=a=ours",
    ]);
    east.ok_stdin(&["apply", "-f", "-"], APP);
    let mut all = Vec::new();
    wait_for(WAIT, "6 running pods", || {
        all = pods(&east, "my-app", "app=web");
        all.len() == 6 && all.iter().all(|p| p.1 == "Running" && !p.3.is_empty())
    });
    let remote: Vec<_> = all.iter().filter(|p| p.2 == "liqo-west").collect();
    assert!(!remote.is_empty(), "some pods offloaded: {all:?}");
    assert!(remote.len() < 6, "some pods local: {all:?}");
    let theirs = pods(&west, "my-app-east", "liqo.io/managed-by=shadowpod");
    for p in &remote {
        let twin = theirs
            .iter()
            .find(|t| t.0 == p.0)
            .expect("the pod runs in the provider");
        assert_eq!(twin.1, "Running");
        assert_eq!(twin.3, p.3, "the consumer shows the provider's pod IP");
    }
    assert_eq!(
        jsonpath(
            &west,
            &[
                "get",
                "shadowpods.offloading.liqo.io",
                &remote[0].0,
                "-n",
                "my-app-east"
            ],
            "{.status.phase}"
        ),
        "Running"
    );

    // Reflection: the ConfigMap and Service follow; the consumer's
    // Service has the offloaded endpoints, the provider's twin the local
    // ones; a name already taken there is reported, not overwritten.
    wait_for(WAIT, "reflected objects", || {
        jsonpath(
            &west,
            &["get", "configmap", "settings", "-n", "my-app-east"],
            "{.data.color}",
        ) == "blue"
            && west
                .kubectl(&["get", "service", "web", "-n", "my-app-east"])
                .status
                .success()
    });
    assert_eq!(
        jsonpath(
            &west,
            &["get", "configmap", "taken", "-n", "my-app-east"],
            "{.data.a}"
        ),
        "theirs"
    );
    // What is reflected is configurable: an annotated object stays home,
    // and a kind can be turned off.
    east.ok(&[
        "create",
        "configmap",
        "private",
        "-n",
        "my-app",
        "--from-literal=k=v",
    ]);
    east.ok(&[
        "annotate",
        "configmap",
        "private",
        "-n",
        "my-app",
        "liqo.io/skip-reflection=true",
    ]);
    east.ok(&[
        "create",
        "secret",
        "generic",
        "creds",
        "-n",
        "my-app",
        "--from-literal=pw=x",
    ]);
    east.ok(&[
        "create",
        "configmap",
        "public",
        "-n",
        "my-app",
        "--from-literal=k=v",
    ]);
    wait_for(WAIT, "a later ConfigMap reflected", || {
        west.kubectl(&["get", "configmap", "public", "-n", "my-app-east"])
            .status
            .success()
    });
    assert!(
        !west
            .kubectl(&["get", "configmap", "private", "-n", "my-app-east"])
            .status
            .success()
    );
    assert!(
        !west
            .kubectl(&["get", "secret", "creds", "-n", "my-app-east"])
            .status
            .success()
    );
    wait_for(WAIT, "the conflict reported", || {
        east.ok(&[
            "get",
            "events",
            "-n",
            "my-app",
            "--field-selector",
            "reason=FailedReflection",
        ])
        .contains("remote object already exists")
    });
    let local_ip = all.iter().find(|p| p.2 != "liqo-west").unwrap().3.clone();
    wait_for(WAIT, "endpoints on both sides", || {
        let here = east.ok(&[
            "get",
            "endpointslices",
            "-n",
            "my-app",
            "-o",
            "jsonpath={.items[*].endpoints[*].addresses[*]}",
        ]);
        let there = west.ok(&[
            "get",
            "endpointslices",
            "-n",
            "my-app-east",
            "-o",
            "jsonpath={.items[*].endpoints[*].addresses[*]}",
        ]);
        here.contains(&remote[0].3) && there.contains(&local_ip)
    });

    // Labelling a namespace offloads it with the defaults.
    east.ok(&["create", "namespace", "production"]);
    east.ok(&[
        "label",
        "namespace",
        "production",
        "liqo.io/scheduling-enabled=true",
    ]);
    wait_for(WAIT, "the default NamespaceOffloading", || {
        jsonpath(
            &east,
            &[
                "get",
                "namespaceoffloadings.offloading.liqo.io",
                "offloading",
                "-n",
                "production",
            ],
            "{.status.offloadingPhase}",
        ) == "Ready"
    });
    east.ok(&[
        "run",
        "probe",
        "-n",
        "production",
        "--image=example/web:1.0",
    ]);
    assert_eq!(
        jsonpath(
            &east,
            &["get", "pod", "probe", "-n", "production"],
            "{.spec.tolerations[?(@.key==\"virtual-node.liqo.io/not-allowed\")].effect}"
        ),
        "NoExecute"
    );

    // The provider cut off: the virtual node turns NotReady, the pods keep
    // running there; reconnected, nothing restarted.
    let uids_before = west.ok(&[
        "get",
        "pods",
        "-n",
        "my-app-east",
        "-o",
        "jsonpath={.items[*].metadata.uid}",
    ]);
    fault(&west, "unreachable");
    wait_for(WAIT, "the virtual node NotReady", || {
        node_ready(&east, "liqo-west") == "False"
    });
    assert!(
        pods(&east, "my-app", "app=web")
            .iter()
            .all(|p| p.1 == "Running")
    );
    fault(&west, "reachable");
    wait_for(WAIT, "the virtual node Ready again", || {
        node_ready(&east, "liqo-west") == "True"
    });
    let uids_after = west.ok(&[
        "get",
        "pods",
        "-n",
        "my-app-east",
        "-o",
        "jsonpath={.items[*].metadata.uid}",
    ]);
    assert_eq!(uids_before, uids_after, "no offloaded pod was replaced");
    assert!(
        pods(&east, "my-app", "app=web")
            .iter()
            .all(|p| p.1 == "Running")
    );

    // Unpeer drains the virtual node and leaves nothing behind.
    let out = unpeer(&east, &west);
    assert!(out.status.success(), "unpeer: {}", stderr(&out));
    assert!(!east.kubectl(&["get", "node", "liqo-west"]).status.success());
    assert!(
        !east
            .kubectl(&["get", "namespace", "liqo-tenant-west"])
            .status
            .success()
    );
    assert!(
        !east
            .kubectl(&["get", "foreignclusters.core.liqo.io", "west"])
            .status
            .success()
    );
    for ns in ["my-app-east", "liqo-tenant-east"] {
        wait_for(WAIT, "the provider's namespaces gone", || {
            !west.kubectl(&["get", "namespace", ns]).status.success()
        });
    }
    assert!(
        !west
            .kubectl(&["get", "clusterrole", "liqo-east"])
            .status
            .success()
    );
    assert!(
        !west
            .kubectl(&["get", "foreignclusters.core.liqo.io", "east"])
            .status
            .success()
    );
    wait_for(WAIT, "the Deployment back home", || {
        let p = pods(&east, "my-app", "app=web");
        p.len() == 6 && p.iter().all(|p| p.1 == "Running" && p.2 != "liqo-west")
    });
}

#[test]
fn bad_input_gets_a_clear_error() {
    let east = Server::member("east", &[]);
    let west = Server::member("west", &[]);
    let dir = tempfile::tempdir().unwrap();

    // Unreachable: the provider's server is a closed port.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let text = std::fs::read_to_string(&west.kubeconfig).unwrap();
    let server = text
        .lines()
        .find(|l| l.trim_start().starts_with("server:"))
        .unwrap()
        .trim()
        .trim_start_matches("server:")
        .trim()
        .to_string();
    let unreachable = common::write(
        dir.path(),
        "unreachable",
        &text.replace(&server, &format!("https://127.0.0.1:{port}")),
    );
    let out = flotilla(&[
        "peer",
        "--kubeconfig",
        kc(&east),
        "--remote-kubeconfig",
        unreachable.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert_has(&stderr(&out), &["cannot reach the provider"]);

    // Wrong credentials.
    let token_line = text
        .lines()
        .find(|l| l.trim_start().starts_with("token:"))
        .unwrap();
    let wrong = common::write(
        dir.path(),
        "wrong",
        &text.replace(token_line, "    token: not-a-valid-token"),
    );
    let out = flotilla(&[
        "peer",
        "--kubeconfig",
        kc(&east),
        "--remote-kubeconfig",
        wrong.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert_has(
        &stderr(&out),
        &["refused the credentials of --remote-kubeconfig"],
    );

    // With itself.
    let out = peer(&east, &east, &[]);
    assert!(!out.status.success());
    assert_has(&stderr(&out), &["cannot peer with itself"]);

    // More than the provider has.
    let out = peer(&east, &west, &["--cpu", "1000"]);
    assert!(!out.status.success());
    assert_has(&stderr(&out), &["denied", "cpu: asked for 1000"]);

    // A namespace whose twin name is taken in the provider.
    let out = peer(&east, &west, &["--cpu", "2", "--pods", "20"]);
    assert!(out.status.success(), "peer: {}", stderr(&out));
    assert_eq!(
        jsonpath(
            &east,
            &["get", "node", "liqo-west"],
            "{.status.capacity.cpu}"
        ),
        "2"
    );
    west.ok(&["create", "namespace", "taken"]);
    east.ok(&["create", "namespace", "taken"]);
    let out = flotilla(&[
        "offload",
        "namespace",
        "taken",
        "--kubeconfig",
        kc(&east),
        "--namespace-mapping-strategy",
        "EnforceSameName",
    ]);
    assert!(!out.status.success());
    assert_has(
        &stderr(&out),
        &["AllFailed", "already exists in the provider"],
    );

    // A pod no node can fit: Remote only, more CPU than granted.
    east.ok(&["create", "namespace", "big"]);
    let out = flotilla(&[
        "offload",
        "namespace",
        "big",
        "--kubeconfig",
        kc(&east),
        "--pod-offloading-strategy",
        "Remote",
    ]);
    assert!(out.status.success(), "offload: {}", stderr(&out));
    east.ok_stdin(&["apply", "-f", "-"], "apiVersion: v1\nkind: Pod\nmetadata: {name: huge, namespace: big}\nspec:\n  containers: [{name: c, image: x, resources: {requests: {cpu: '3'}}}]\n");
    wait_for(WAIT, "the pod unschedulable", || {
        jsonpath(
            &east,
            &["get", "pod", "huge", "-n", "big"],
            "{.status.conditions[?(@.type==\"PodScheduled\")].message}",
        )
        .contains("Insufficient cpu")
    });
    // An administrator of the provider changes the grant; the virtual
    // node follows.
    west.ok(&[
        "patch",
        "resourceslices.authentication.liqo.io",
        "west",
        "-n",
        "liqo-tenant-east",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"resources":{"cpu":"4","memory":"8Gi","pods":"20"}}}"#,
    ]);
    wait_for(WAIT, "the capacity to follow", || {
        jsonpath(
            &east,
            &["get", "node", "liqo-west"],
            "{.status.capacity.cpu}",
        ) == "4"
    });
    wait_for(WAIT, "the pod to fit now", || {
        jsonpath(
            &east,
            &["get", "pod", "huge", "-n", "big"],
            "{.spec.nodeName}",
        ) == "liqo-west"
    });
    let out = unpeer(&east, &west);
    assert!(out.status.success(), "unpeer: {}", stderr(&out));
}

#[test]
fn three_members_a_cluster_selector_picks_the_provider() {
    let a = Server::member("alpha", &[]);
    let b = Server::member("bravo", &[]);
    let c = Server::member("charlie", &[]);
    for p in [&a, &b] {
        let out = peer(&c, p, &[]);
        assert!(out.status.success(), "peer: {}", stderr(&out));
    }
    c.ok(&["create", "namespace", "shop"]);
    c.ok_stdin(
        &["apply", "-f", "-"],
        r#"
apiVersion: offloading.liqo.io/v1beta1
kind: NamespaceOffloading
metadata: {name: offloading, namespace: shop}
spec:
  namespaceMappingStrategy: EnforceSameName
  podOffloadingStrategy: Remote
  clusterSelector:
    nodeSelectorTerms:
    - matchExpressions:
      - {key: liqo.io/remote-cluster-id, operator: In, values: [bravo]}
"#,
    );
    wait_for(WAIT, "offloaded to bravo only", || {
        jsonpath(
            &c,
            &["get", "nso", "offloading", "-n", "shop"],
            "{.status.offloadingPhase}",
        ) == "Ready"
    });
    assert_eq!(
        jsonpath(
            &c,
            &["get", "nso", "offloading", "-n", "shop"],
            "{.status.remoteNamespacesConditions.alpha[0].reason}"
        ),
        "ClusterNotSelected"
    );
    b.ok(&["get", "namespace", "shop"]);
    assert!(!a.kubectl(&["get", "namespace", "shop"]).status.success());
    c.ok(&[
        "create",
        "deployment",
        "api",
        "-n",
        "shop",
        "--image=example/api:1",
        "--replicas=3",
    ]);
    wait_for(WAIT, "all on bravo", || {
        let p = pods(&c, "shop", "app=api");
        p.len() == 3 && p.iter().all(|p| p.1 == "Running" && p.2 == "liqo-bravo")
    });
    // Bidirectional peering is two peerings: alpha consumes charlie too.
    let out = peer(&a, &c, &[]);
    assert!(out.status.success(), "peer back: {}", stderr(&out));
    for (m, peer_id) in [(&a, "charlie"), (&c, "alpha")] {
        assert_eq!(
            jsonpath(
                m,
                &["get", "foreignclusters.core.liqo.io", peer_id],
                "{.status.role}"
            ),
            "ConsumerAndProvider"
        );
    }
    assert_eq!(node_ready(&a, "liqo-charlie"), "True");
    let out = unpeer(&a, &c);
    assert!(out.status.success(), "unpeer back: {}", stderr(&out));
    assert_eq!(
        jsonpath(
            &c,
            &["get", "foreignclusters.core.liqo.io", "alpha"],
            "{.status.role}"
        ),
        "Provider",
        "charlie still consumes alpha"
    );
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        node_ready(&c, "liqo-alpha"),
        "True",
        "charlie's own peering intact"
    );
    assert_eq!(
        jsonpath(
            &c,
            &[
                "get",
                "resourceslices.authentication.liqo.io",
                "alpha",
                "-n",
                "liqo-tenant-alpha"
            ],
            "{.status.conditions[?(@.type==\"Resources\")].status}"
        ),
        "Accepted"
    );
    assert!(!a.kubectl(&["get", "node", "liqo-charlie"]).status.success());
    for p in [&a, &b] {
        let out = unpeer(&c, p);
        assert!(out.status.success(), "unpeer: {}", stderr(&out));
    }
    wait_for(WAIT, "bravo's twin gone", || {
        !b.kubectl(&["get", "namespace", "shop"]).status.success()
    });
}

/// The seeds' offloading and its ConfigMap, as the head of a file a user
/// applies in one go.
const OFFLOADED_NAMESPACE: &str = r#"
apiVersion: v1
kind: Namespace
metadata:
  name: burst
---
apiVersion: sharing.liqo.io/v1beta1
kind: NamespaceOffloading
metadata:
  name: burst-offloading
  namespace: burst
spec:
  clusterSelector:
    matchLabels: {}
  podOffloadingPolicy: LocalAndRemote
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: burst}
data: {color: green}
"#;

/// Pods that can run only on a virtual node: a Deployment's and a bare
/// one (created right after the offloading, before any controller acts).
const REMOTE_ONLY: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: remote-only, namespace: burst}
spec:
  replicas: 2
  selector: {matchLabels: {app: remote-only}}
  template:
    metadata: {labels: {app: remote-only}}
    spec:
      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
            - matchExpressions:
              - {key: liqo.io/type, operator: In, values: [virtual-node]}
      containers:
      - name: app
        image: example/app:1.0
        resources: {requests: {cpu: 50m, memory: 32Mi}}
"#;

const REMOTE_ONLY_POD: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: solo, namespace: burst, labels: {app: remote-only}}
spec:
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
        - matchExpressions:
          - {key: liqo.io/type, operator: In, values: [virtual-node]}
  containers:
  - name: app
    image: example/app:1.0
"#;

#[test]
fn a_file_applied_in_one_go_offloads_the_same_every_time() {
    let east = Server::member("east", &[]);
    let west = Server::member("west", &[]);
    let out = peer(&east, &west, &[]);
    assert!(out.status.success(), "peer: {}", stderr(&out));

    // Applied, deleted and applied again with the same names: each time
    // the pods are admitted under the offloading that exists as they are
    // made, run in the provider, and the ConfigMap is in the twin.
    let describe = || {
        let out = |args: &[&str]| String::from_utf8_lossy(&east.kubectl(args).stdout).into_owned();
        format!(
            "{}\n{}",
            out(&["describe", "pods", "-n", "burst"]),
            out(&["get", "nso", "-n", "burst", "-o", "yaml"])
        )
    };
    let in_one_go = format!("{OFFLOADED_NAMESPACE}---{REMOTE_ONLY_POD}---{REMOTE_ONLY}");
    for round in 1..=6 {
        let applied = std::time::Instant::now();
        east.ok_stdin(&["apply", "-f", "-"], &in_one_go);
        common::until(
            WAIT,
            &format!("round {round}: the ConfigMap in the twin"),
            || {
                jsonpath(
                    &west,
                    &["get", "configmap", "settings", "-n", "burst-east"],
                    "{.data.color}",
                ) == "green"
            },
            describe,
        );
        let reflected = applied.elapsed();
        common::until(
            WAIT,
            &format!("round {round}: every pod running in the provider"),
            || {
                let p = pods(&east, "burst", "app=remote-only");
                p.len() == 3 && p.iter().all(|p| p.1 == "Running" && p.2 == "liqo-west")
            },
            describe,
        );
        eprintln!(
            "round {round}: ConfigMap reflected after {reflected:?}, pods running after {:?}",
            applied.elapsed()
        );
        east.ok_stdin(
            &["delete", "-f", "-", "--wait", "--ignore-not-found"],
            &in_one_go,
        );
    }

    // A workload made before its namespace was offloaded gets no
    // toleration; it is told why, and created again it runs.
    east.ok(&["create", "namespace", "late"]);
    east.ok_stdin(
        &["apply", "-n", "late", "-f", "-"],
        &REMOTE_ONLY.replace("namespace: burst", "namespace: late"),
    );
    east.ok_stdin(
        &["apply", "-f", "-"],
        r#"
apiVersion: offloading.liqo.io/v1beta1
kind: NamespaceOffloading
metadata: {name: offloading, namespace: late}
spec: {podOffloadingStrategy: LocalAndRemote}
"#,
    );
    let warned = || {
        jsonpath(
            &east,
            &[
                "get",
                "events",
                "-n",
                "late",
                "--field-selector",
                "reason=OffloadingNotApplied",
            ],
            "{range .items[*]}{.involvedObject.name}: {.message}{\"\\n\"}{end}",
        )
    };
    common::until(
        WAIT,
        "a Warning Event on each pod made too early",
        || warned().lines().count() == 2,
        || format!("{}\n{}", warned(), describe()),
    );
    assert_has(
        &warned(),
        &[
            "was created before namespace late was offloaded (NamespaceOffloading offloading)",
            "does not tolerate the virtual nodes' taint virtual-node.liqo.io/not-allowed",
            "kubectl rollout restart -n late deployment/NAME",
        ],
    );
    east.ok(&["rollout", "restart", "-n", "late", "deployment/remote-only"]);
    common::until(
        WAIT,
        "the restarted pods running in the provider",
        || {
            let p = pods(&east, "late", "app=remote-only");
            p.len() == 2 && p.iter().all(|p| p.1 == "Running" && p.2 == "liqo-west")
        },
        || {
            String::from_utf8_lossy(&east.kubectl(&["describe", "pods", "-n", "late"]).stdout)
                .into_owned()
        },
    );
}

#[test]
fn netns_peers_reach_each_other_and_offloaded_pods_give_logs_and_exec() {
    netns_peers("pe-east", "pe-west", false);
}

/// The same between peers whose pod and service CIDRs are the same:
/// each side reaches the other's pods at their global IPs.
#[test]
fn netns_peers_with_overlapping_cidrs_reach_each_other() {
    netns_peers("po-east", "po-west", true);
}

fn netns_peers(east_name: &str, west_name: &str, overlapping: bool) {
    if !common::can_run_netns() {
        return;
    }
    let underlay = Underlay::new();
    let member = |name: &str, pods: &str, services: &str| {
        Server::netns_member(
            name,
            &[
                "--nodes",
                "2",
                "--underlay",
                &underlay.0,
                "--pod-cidr",
                pods,
                "--service-cidr",
                services,
            ],
        )
    };
    let (east, west) = if overlapping {
        (
            member(east_name, "10.215.0.0/16", "10.95.0.0/16"),
            member(west_name, "10.215.0.0/16", "10.95.0.0/16"),
        )
    } else {
        (
            member(east_name, "10.213.0.0/16", "10.93.0.0/16"),
            member(west_name, "10.214.0.0/16", "10.94.0.0/16"),
        )
    };
    let out = peer(&east, &west, &[]);
    assert!(out.status.success(), "peer: {}", stderr(&out));
    assert_has(&stderr(&out), &["networking: connected"]);
    wait_for(WAIT, "the networking module established", || {
        jsonpath(
            &east,
            &["get", "foreignclusters.core.liqo.io", west_name],
            "{.status.modules.networking.conditions[?(@.type==\"NetworkConnectionStatus\")].status}",
        ) == "Established"
    });

    // A namespace with a local Service and an offloaded pod.
    east.ok(&["create", "namespace", "shop"]);
    let out = flotilla(&["offload", "namespace", "shop", "--kubeconfig", kc(&east)]);
    assert!(out.status.success(), "offload: {}", stderr(&out));
    east.ok_stdin(
        &["apply", "-f", "-"],
        &r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: cart, namespace: shop}
spec:
  replicas: 1
  selector: {matchLabels: {app: cart}}
  template:
    metadata: {labels: {app: cart}}
    spec:
      nodeSelector: {kubernetes.io/hostname: EAST-node-0}
      containers: [{name: api, image: example/cart:1.0, ports: [{name: http, containerPort: 8080}]}]
---
apiVersion: v1
kind: Service
metadata: {name: cart, namespace: shop}
spec: {selector: {app: cart}, ports: [{port: 8080, targetPort: http}]}
---
apiVersion: v1
kind: Pod
metadata: {name: worker, namespace: shop, labels: {app: worker}}
spec:
  nodeName: liqo-WEST
  containers:
  - {name: c, image: example/worker:1.0, ports: [{containerPort: 8080}]}
---
apiVersion: v1
kind: Service
metadata: {name: worker, namespace: shop}
spec: {selector: {app: worker}, ports: [{port: 8080}]}
---
apiVersion: v1
kind: Pod
metadata: {name: client, namespace: default}
spec:
  nodeSelector: {kubernetes.io/hostname: EAST-node-1}
  containers: [{name: c, image: busybox, command: [sleep, "3600"]}]
"#
        .replace("EAST", east_name)
        .replace("WEST", west_name),
    );
    wait_for(WAIT, "the offloaded pod running", || {
        jsonpath(
            &east,
            &["get", "pod", "worker", "-n", "shop"],
            "{.status.phase}",
        ) == "Running"
    });
    wait_for(WAIT, "the local pods running", || {
        jsonpath(&east, &["get", "pod", "client"], "{.status.phase}") == "Running"
            && jsonpath(
                &east,
                &["get", "pods", "-n", "shop", "-l", "app=cart"],
                "{.items[0].status.phase}",
            ) == "Running"
    });

    // Logs and exec of the offloaded pod, from the consumer.
    wait_for(WAIT, "its log", || {
        String::from_utf8_lossy(&east.kubectl(&["logs", "worker", "-n", "shop"]).stdout)
            .contains("serving HTTP on :8080")
    });
    let out = east.ok(&[
        "exec",
        "worker",
        "-n",
        "shop",
        "--",
        "sh",
        "-c",
        "echo $((6*7))",
    ]);
    assert!(out.starts_with("42"), "{out}");
    let failed = east.kubectl(&["exec", "worker", "-n", "shop", "--", "sh", "-c", "exit 3"]);
    assert_eq!(failed.status.code(), Some(3), "the exit code comes back");
    // Its ServiceAccount token is the consumer's: the consumer's API
    // authenticates it as the pod's ServiceAccount.
    let sa = "/var/run/secrets/kubernetes.io/serviceaccount";
    let cat = |file: &str| {
        let path = format!("{sa}/{file}");
        east.ok(&["exec", "worker", "-n", "shop", "--", "cat", &path])
    };
    assert_eq!(cat("namespace"), "shop");
    let token = cat("token");
    let review = format!(
        "{{\"apiVersion\":\"authentication.k8s.io/v1\",\"kind\":\"TokenReview\",\"spec\":{{\"token\":\"{}\"}}}}",
        token.trim()
    );
    let answer = east.ok_stdin(
        &[
            "create",
            "-f",
            "-",
            "-o",
            "jsonpath={.status.user.username}",
        ],
        &review,
    );
    assert_eq!(answer, "system:serviceaccount:shop:default");

    // The offloaded pod calls the consumer's Service by name (reflected,
    // with the consumer's endpoints), through the tunnel.
    let curl = |m: &Server, ns: &str, pod: &str, url: &str| {
        let o = m.kubectl(&["exec", pod, "-n", ns, "--", "curl", "-sS", "-m", "3", url]);
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    wait_for(WAIT, "the offloaded pod reaching the local Service", || {
        curl(&east, "shop", "worker", "http://cart:8080/")
            .contains(&format!("\"cluster\":\"{east_name}\""))
    });
    // A local pod reaches the offloaded pod by its IP and by its Service
    // (whose endpoint is the provider's pod).
    // Under Globalnet the pod has no address here until its global IP is
    // allocated (its pod IP means something else in this cluster).
    let mut ip = String::new();
    wait_for(WAIT, "the offloaded pod's address in the consumer", || {
        ip = jsonpath(
            &east,
            &["get", "pod", "worker", "-n", "shop"],
            "{.status.podIP}",
        );
        !ip.is_empty()
    });
    let expected = if overlapping { "242." } else { "10.214." };
    assert!(
        ip.starts_with(expected),
        "the provider's pod, as the consumer reaches it: {ip}"
    );
    wait_for(WAIT, "the local pod reaching the offloaded pod", || {
        let want = format!("\"cluster\":\"{west_name}\"");
        curl(&east, "default", "client", &format!("http://{ip}:8080/")).contains(&want)
            && curl(&east, "default", "client", "http://worker.shop:8080/").contains(&want)
    });

    let out = unpeer(&east, &west);
    assert!(out.status.success(), "unpeer: {}", stderr(&out));
    assert!(
        !east
            .kubectl(&[
                "get",
                "secret",
                "submariner-broker-secret",
                "-n",
                "submariner-operator"
            ])
            .status
            .success(),
        "the consumer left the provider's broker"
    );
}

#[test]
fn admiraltys_elected_pods_run_as_delegates_in_the_target() {
    let source = Server::member("adm-src", &[]);
    let target = Server::member("adm-tgt", &[]);
    let kubeconfig = std::fs::read_to_string(&target.kubeconfig).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = common::write(dir.path(), "config", &kubeconfig);
    source.ok(&["create", "namespace", "demo"]);
    source.ok(&[
        "create",
        "secret",
        "generic",
        "tgt",
        "-n",
        "demo",
        &format!("--from-file=config={}", file.display()),
    ]);
    source.ok_stdin(
        &["apply", "-f", "-"],
        "apiVersion: multicluster.admiralty.io/v1alpha1\nkind: Target\nmetadata: {name: tgt, namespace: demo}\nspec:\n  kubeconfigSecret: {name: tgt}\n",
    );
    source.ok(&[
        "label",
        "namespace",
        "demo",
        "multicluster-scheduler=enabled",
    ]);
    target.ok(&["create", "namespace", "demo"]);
    wait_for(WAIT, "the target's virtual node", || {
        node_ready(&source, "admiralty-demo-tgt") == "True"
    });
    source.ok_stdin(
        &["apply", "-f", "-"],
        r#"
apiVersion: v1
kind: Pod
metadata:
  name: elected
  namespace: demo
  labels: {app: batch}
  annotations: {multicluster.admiralty.io/elect: ""}
spec:
  containers: [{name: c, image: example/batch:1}]
"#,
    );
    // The source pod is a proxy: Admiralty's scheduler, its manifest kept.
    assert_eq!(
        jsonpath(
            &source,
            &["get", "pod", "elected", "-n", "demo"],
            "{.spec.schedulerName}"
        ),
        "admiralty-proxy"
    );
    assert!(
        jsonpath(
            &source,
            &["get", "pod", "elected", "-n", "demo"],
            "{.metadata.annotations}"
        )
        .contains("sourcepod-manifest")
    );
    wait_for(WAIT, "the proxy pod running on the virtual node", || {
        jsonpath(
            &source,
            &["get", "pod", "elected", "-n", "demo"],
            "{.spec.nodeName} {.status.phase}",
        ) == "admiralty-demo-tgt Running"
    });
    let delegate = jsonpath(
        &target,
        &[
            "get",
            "pods",
            "-n",
            "demo",
            "-l",
            "multicluster.admiralty.io/app=batch",
        ],
        "{.items[0].metadata.name}",
    );
    assert!(delegate.starts_with("elected-"), "{delegate}");
    assert_eq!(
        jsonpath(
            &target,
            &[
                "get",
                "podchaperons.multicluster.admiralty.io",
                &delegate,
                "-n",
                "demo"
            ],
            "{.metadata.annotations.multicluster\\.admiralty\\.io/parent-name}"
        ),
        "elected"
    );
    // An unelected pod stays home.
    source.ok(&["run", "plain", "-n", "demo", "--image=example/batch:1"]);
    wait_for(WAIT, "the plain pod scheduled", || {
        jsonpath(
            &source,
            &["get", "pod", "plain", "-n", "demo"],
            "{.spec.nodeName}",
        )
        .starts_with("adm-src-node-")
    });
    // Deleting the proxy removes the delegate.
    source.ok(&["delete", "pod", "elected", "-n", "demo"]);
    wait_for(WAIT, "the delegate gone", || {
        jsonpath(
            &target,
            &["get", "pods", "-n", "demo"],
            "{.items[*].metadata.name}",
        )
        .is_empty()
    });
}
