//! The control plane on etcd: a clear error when etcd cannot be reached,
//! and two replicas on a three-member etcd cluster, of which one leads the
//! controllers; killing the leader mid-propagation hands over with nothing
//! lost, duplicated or deleted in the members, and killing an etcd member
//! leaves the control plane serving.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::fleet::{Fleet, SHORT_THRESHOLDS, jsonpath, stderr};
use common::{Server, flotilla, wait_for};

const TEMPLATES: usize = 500;
/// Templates per apply.
const CHUNK: usize = 50;

#[test]
fn an_unreachable_etcd_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = flotilla(&[
        "controlplane",
        "--store",
        "etcd",
        "--etcd-endpoints",
        "http://127.0.0.1:1",
        "--etcd-wait",
        "1s",
        "--data-dir",
        dir.path().to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
    ]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("cannot reach etcd at http://127.0.0.1:1"),
        "{err}"
    );
    assert!(err.contains("--etcd-endpoints"), "{err}");
}

/// `kubectl get -w --output-watch-events` on a member, kept running.
struct EventLog {
    child: Child,
    path: std::path::PathBuf,
}

impl EventLog {
    fn start(member: &Server, name: &str, dir: &std::path::Path) -> EventLog {
        let path = dir.join(format!("events-{name}.log"));
        let out = std::fs::File::create(&path).unwrap();
        let child = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&member.kubeconfig)
            .args([
                "get",
                "configmaps",
                "-l",
                "ha=test",
                "-w",
                "--output-watch-events",
                "-o",
                "name",
            ])
            .stdout(out)
            .stderr(Stdio::null())
            .spawn()
            .expect("kubectl");
        EventLog { child, path }
    }

    fn events(&self) -> String {
        std::fs::read_to_string(&self.path).unwrap_or_default()
    }
}

impl Drop for EventLog {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn leads(s: &Server) -> bool {
    s.log().contains("became the leader")
}

#[test]
fn a_killed_leader_hands_over_with_nothing_lost_or_deleted() {
    let mut etcd = flotilla_store::testing::cluster(3);
    let endpoints: Vec<String> = etcd.iter().map(|m| m.client_url.clone()).collect();
    let endpoints = endpoints.join(",");
    let mut hub_args = SHORT_THRESHOLDS.to_vec();
    hub_args.extend([
        "--leader-elect-lease-duration",
        "3s",
        "--leader-elect-renew-deadline",
        "2s",
        "--leader-elect-retry-period",
        "500ms",
    ]);
    let first = Server::controlplane_on_etcd(&endpoints, &hub_args);
    wait_for(Duration::from_secs(30), "one replica leading", || {
        leads(&first)
    });
    let second = Server::controlplane_on_etcd(&endpoints, &hub_args);
    let mut fleet = Fleet {
        hub: first,
        members: Vec::new(),
    };
    for (name, region) in [("member1", "us-east"), ("member2", "eu-west")] {
        fleet
            .members
            .push((name.to_string(), Server::member(name, &["--nodes", "1"])));
        fleet.join(name, region);
        fleet.wait_ready(name);
    }
    assert!(!leads(&second), "only one replica leads");
    // Every replica serves the API: the second sees what the first wrote.
    assert_eq!(
        jsonpath(&second, &["get", "clusters"], "{.items[*].metadata.name}"),
        "member1 member2"
    );

    let watchers: Vec<EventLog> = fleet
        .members
        .iter()
        .map(|(name, m)| EventLog::start(m, name, second.dir.path()))
        .collect();
    let mut chunks: Vec<String> = Vec::new();
    let policy = String::from(
        r#"
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata: {name: ha}
spec:
  resourceSelectors: [{apiVersion: v1, kind: ConfigMap, labelSelector: {matchLabels: {ha: test}}}]
  placement:
    clusterAffinity: {clusterNames: [member1, member2]}
"#,
    );
    for i in 0..TEMPLATES {
        if i % CHUNK == 0 {
            chunks.push(String::new());
        }
        let chunk = chunks.last_mut().expect("a chunk");
        chunk.push_str(&format!(
            "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cm{i:03}, labels: {{ha: test}}}}\ndata: {{i: \"{i}\"}}\n"
        ));
    }
    let copies = |m: &Server| {
        m.ok(&["get", "configmaps", "-l", "ha=test", "-o", "name"])
            .lines()
            .count()
    };
    // Applied in chunks through the replicas in turn, as a round-robin
    // load balancer would send them; each chunk is followed by reads of
    // the federation's kinds through the same replica. The leader dies
    // after the third chunk, and the rest go to the replica that stays.
    let out = second.kubectl_stdin(&["apply", "-f", "-"], Some(&policy));
    assert!(out.status.success(), "{}", stderr(&out));
    for (k, chunk) in chunks.iter().enumerate() {
        let leader_alive = k < 3;
        let target = if leader_alive && k % 2 == 0 {
            &fleet.hub
        } else {
            &second
        };
        let out = target.kubectl_stdin(&["apply", "-f", "-"], Some(chunk));
        assert!(out.status.success(), "chunk {k}: {}", stderr(&out));
        target.ok(&[
            "get",
            "clusters,propagationpolicies,resourcebindings,works",
            "-A",
            "-o",
            "name",
        ]);
        if k == 2 {
            wait_for(Duration::from_secs(60), "propagation under way", || {
                copies(fleet.member("member1")) > 0
            });
            fleet.hub.kill9();
            eprintln!(
                "leader killed with {} of {TEMPLATES} copies in member1",
                copies(fleet.member("member1"))
            );
        }
    }
    wait_for(
        Duration::from_secs(30),
        "the second replica leading",
        || leads(&second),
    );
    wait_for(
        Duration::from_secs(120),
        "every template in both members",
        || {
            copies(fleet.member("member1")) == TEMPLATES
                && copies(fleet.member("member2")) == TEMPLATES
        },
    );
    // One Work per template and member, none twice.
    for ns in ["karmada-es-member1", "karmada-es-member2"] {
        let works = second.ok(&["get", "works", "-n", ns, "-o", "name"]);
        assert_eq!(works.lines().count(), TEMPLATES, "{ns}");
    }
    // Nothing in a member was deleted (and so re-created) on the way.
    for (w, (name, _)) in watchers.iter().zip(&fleet.members) {
        let events = w.events();
        assert!(!events.contains("DELETED"), "{name}: {events}");
    }

    // An etcd member dies: the control plane keeps serving and propagating.
    // While the two left elect a new etcd leader (when the dead one led),
    // writes are refused with 503 ServiceUnavailable, which clients retry.
    etcd[0].kill();
    wait_for(Duration::from_secs(20), "a write accepted", || {
        let out = second.kubectl_stdin(
            &["apply", "-f", "-"],
            Some("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: after, labels: {ha: test}}\n"),
        );
        let refused = stderr(&out);
        assert!(
            out.status.success()
                || refused.contains("ServiceUnavailable")
                || refused.contains("unavailable"),
            "{refused}"
        );
        out.status.success()
    });
    // A leader whose lease renewals failed through etcd's election for
    // longer than the renew deadline (a loaded machine) stands again and
    // lists everything before it propagates: allow for that.
    wait_for(
        Duration::from_secs(150),
        "the new template in both members",
        || {
            copies(fleet.member("member1")) == TEMPLATES + 1
                && copies(fleet.member("member2")) == TEMPLATES + 1
        },
    );
}

#[test]
fn a_control_plane_moves_from_the_embedded_store_to_etcd() {
    let mut hub = Server::controlplane(&[]);
    let mut manifests = String::new();
    for i in 0..50 {
        manifests.push_str(&format!(
            "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: moved{i:02}, labels: {{moved: \"yes\"}}}}\ndata: {{i: \"{i}\"}}\n"
        ));
    }
    manifests.push_str(
        "---\napiVersion: policy.karmada.io/v1alpha1\nkind: PropagationPolicy\nmetadata: {name: moved}\nspec:\n  resourceSelectors: [{apiVersion: v1, kind: ConfigMap}]\n  placement: {clusterAffinity: {clusterNames: [member1]}}\n",
    );
    let out = hub.kubectl_stdin(&["apply", "-f", "-"], Some(&manifests));
    assert!(out.status.success(), "{}", stderr(&out));
    hub.kill9();

    let etcd = flotilla_store::testing::single();
    let from = format!("embedded:{}", hub.data_dir().display());
    let to = format!("etcd:{}", etcd.client_url);
    let migrate = || flotilla(&["store", "migrate", "--from", &from, "--to", &to]);
    let out = migrate();
    assert!(out.status.success(), "{}", stderr(&out));
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(said.contains("read back identical"), "{said}");

    // A control plane on etcd serves what the embedded one held.
    let moved = Server::controlplane_on_etcd(&etcd.client_url, &["--leader-elect=false"]);
    let names = moved.ok(&["get", "configmaps", "-l", "moved=yes", "-o", "name"]);
    assert_eq!(names.lines().count(), 50);
    assert_eq!(
        jsonpath(
            &moved,
            &["get", "pp", "moved"],
            "{.spec.placement.clusterAffinity.clusterNames[0]}"
        ),
        "member1"
    );

    // Into a store that is not empty: refused, and nothing written.
    let again = migrate();
    assert!(!again.status.success());
    assert!(
        stderr(&again).contains("migrate into an empty store"),
        "{}",
        stderr(&again)
    );
    let bad = flotilla(&["store", "migrate", "--from", "sqlite:/tmp/x", "--to", &to]);
    assert!(!bad.status.success());
    assert!(
        stderr(&bad).contains("write embedded:DATA_DIR or etcd:URL"),
        "{}",
        stderr(&bad)
    );
}

/// A CA, etcd's serving certificate for 127.0.0.1 and a client
/// certificate, as PEM files in `dir`: (ca, server cert, server key,
/// client cert, client key).
fn etcd_pki(dir: &std::path::Path) -> [std::path::PathBuf; 5] {
    use rcgen::{
        BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    };
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
    let issuer = Issuer::from_ca_cert_pem(&ca_pem, ca_key).unwrap();
    let leaf = |usage: ExtendedKeyUsagePurpose| {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
        p.extended_key_usages = vec![usage];
        (
            p.signed_by(&key, &issuer).unwrap().pem(),
            key.serialize_pem(),
        )
    };
    let (server_cert, server_key) = leaf(ExtendedKeyUsagePurpose::ServerAuth);
    let (client_cert, client_key) = leaf(ExtendedKeyUsagePurpose::ClientAuth);
    let files = [
        "ca.crt",
        "server.crt",
        "server.key",
        "client.crt",
        "client.key",
    ]
    .map(|f| dir.join(f));
    for (path, pem) in files
        .iter()
        .zip([ca_pem, server_cert, server_key, client_cert, client_key])
    {
        std::fs::write(path, pem).unwrap();
    }
    files
}

#[test]
fn the_control_plane_reaches_etcd_over_tls_with_a_client_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let [ca, server_cert, server_key, client_cert, client_key] = etcd_pki(dir.path());
    let etcd = flotilla_store::testing::single_tls(&flotilla_store::testing::Tls {
        ca: &ca,
        cert: &server_cert,
        key: &server_key,
    });
    assert!(etcd.client_url.starts_with("https://"));
    let hub = Server::controlplane_on_etcd(
        &etcd.client_url,
        &[
            "--etcd-cafile",
            ca.to_str().unwrap(),
            "--etcd-certfile",
            client_cert.to_str().unwrap(),
            "--etcd-keyfile",
            client_key.to_str().unwrap(),
            "--leader-elect=false",
        ],
    );
    let out = hub.kubectl_stdin(
        &["apply", "-f", "-"],
        Some("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: over-tls}\ndata: {a: b}\n"),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(jsonpath(&hub, &["get", "cm", "over-tls"], "{.data.a}"), "b");

    // Without its client certificate, etcd turns the control plane away.
    let data = tempfile::tempdir().unwrap();
    let out = flotilla(&[
        "controlplane",
        "--store",
        "etcd",
        "--etcd-endpoints",
        &etcd.client_url,
        "--etcd-cafile",
        ca.to_str().unwrap(),
        "--etcd-wait",
        "1s",
        "--data-dir",
        data.path().to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
    ]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("cannot reach etcd"),
        "{}",
        stderr(&out)
    );
}

/// A member keeps its objects in etcd as the control plane does: one
/// killed with SIGKILL comes back, from a new data dir even, with what it
/// acknowledged; `--count` with etcd is refused with why.
#[test]
fn a_member_on_etcd_keeps_what_it_acknowledged_through_kill_9() {
    let etcd = flotilla_store::testing::cluster(1);
    let endpoint = etcd[0].client_url.clone();
    let args = [
        "--nodes",
        "1",
        "--store",
        "etcd",
        "--etcd-endpoints",
        &endpoint,
        "--etcd-prefix",
        "/member-a",
    ];
    let mut first = Server::member("on-etcd", &args);
    first.ok(&["create", "configmap", "kept", "--from-literal=k=v"]);
    first.ok(&[
        "create",
        "deployment",
        "web",
        "--image=nginx:1.27",
        "--replicas=2",
    ]);
    first.ok(&["rollout", "status", "deployment/web", "--timeout=60s"]);
    first.kill9();
    let second = Server::member("on-etcd", &args);
    assert_eq!(jsonpath(&second, &["get", "cm", "kept"], "{.data.k}"), "v");
    second.ok(&["rollout", "status", "deployment/web", "--timeout=60s"]);
    // Another prefix is another member.
    let other = Server::member(
        "on-etcd-b",
        &[
            "--store",
            "etcd",
            "--etcd-endpoints",
            &endpoint,
            "--etcd-prefix",
            "/member-b",
        ],
    );
    assert!(!other.kubectl(&["get", "cm", "kept"]).status.success());
    let out = flotilla(&[
        "member",
        "--name",
        "many",
        "--count",
        "2",
        "--store",
        "etcd",
        "--etcd-endpoints",
        &endpoint,
    ]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("--etcd-prefix"), "{}", stderr(&out));
}
