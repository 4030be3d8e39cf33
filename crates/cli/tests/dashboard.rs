//! The hub's web dashboard, driven in headless Chromium through WebDriver
//! (Debian's chromium and chromium-driver; `.ci/run` installs them): sign
//! in with the token `flotilla dashboard` prints, see the fleet, taint a
//! cluster from its page, follow a Deployment to its clusters with the
//! scheduler's explanation and the overrides each got, plan an edited
//! policy, watch a failover move its replicas without refreshing, read
//! markup in an Event as text, and be refused as a restricted user (who is
//! offered no action); on netns members, follow a pod's log and run a
//! command in its terminal. The pages' headers are read with curl.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::fleet::{Fleet, SHORT_THRESHOLDS, member_fault};
use common::{Server, assert_has, can_run_netns, flotilla, which};
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(30);

/// chromedriver on a free port, killed when dropped.
struct Driver {
    child: Child,
    port: u16,
    _profile: tempfile::TempDir,
}

impl Driver {
    fn start() -> Driver {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let child = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver (Debian's chromium-driver; .ci/run installs it)");
        let deadline = Instant::now() + WAIT;
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
        Driver {
            child,
            port,
            _profile: tempfile::tempdir().expect("tempdir"),
        }
    }

    /// A headless browser that trusts the hub's self-signed certificate.
    async fn browser(&self) -> Client {
        let mut caps = serde_json::Map::new();
        caps.insert("acceptInsecureCerts".into(), json!(true));
        caps.insert(
            "goog:chromeOptions".into(),
            json!({"args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                             format!("--user-data-dir={}", self._profile.path().display())]}),
        );
        // WebDriver on loopback, in plain HTTP (the browser does the TLS).
        ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{}", self.port))
            .await
            .expect("a browser session")
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The text of the element `css` once it contains `needle`.
async fn wait_text(c: &Client, css: &str, needle: &str) -> String {
    wait_until(c, css, &format!("{needle:?}"), |t| t.contains(needle)).await
}

/// Waits until the text of `css` satisfies `ok`; returns it.
async fn wait_until(c: &Client, css: &str, what: &str, ok: impl Fn(&str) -> bool) -> String {
    wait_longer(c, css, what, WAIT, ok).await
}

/// As `wait_until`, for at most `limit`.
async fn wait_longer(
    c: &Client,
    css: &str,
    what: &str,
    limit: Duration,
    ok: impl Fn(&str) -> bool,
) -> String {
    let deadline = Instant::now() + limit;
    let mut last = String::new();
    while Instant::now() < deadline {
        if let Ok(e) = c.find(Locator::Css(css)).await {
            last = e.text().await.unwrap_or_default();
            if ok(&last) {
                return last;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let page = c.source().await.unwrap_or_default();
    panic!("{css} never showed {what}; it showed {last:?}\n{page}");
}

async fn click(c: &Client, css: &str) {
    let deadline = Instant::now() + WAIT;
    loop {
        match c.find(Locator::Css(css)).await {
            Ok(e) if e.click().await.is_ok() => return,
            _ if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(100)).await,
            other => panic!("cannot click {css}: {:?}", other.err()),
        }
    }
}

async fn type_into(c: &Client, css: &str, text: &str) {
    let e = c.find(Locator::Css(css)).await.expect(css);
    e.clear().await.expect("cleared");
    e.send_keys(text).await.expect("typed");
}

/// Whether the element `css` is on the page now.
async fn present(c: &Client, css: &str) -> bool {
    c.find(Locator::Css(css)).await.is_ok()
}

/// Skips the test where no chromedriver is (never in CI).
fn have_browser() -> bool {
    if which("chromedriver").is_some() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI must have chromedriver (.ci/run installs it)"
    );
    eprintln!("skipped: no chromedriver (apt-get install chromium chromium-driver)");
    false
}

/// With FLOTILLA_SCREENSHOTS=DIR (docs/screenshots keeps the README's),
/// saves what the browser shows as DIR/NAME.png.
async fn screenshot(c: &Client, name: &str) {
    let Some(dir) = std::env::var_os("FLOTILLA_SCREENSHOTS") else {
        return;
    };
    let png = c.screenshot().await.expect("a screenshot");
    let dir = std::path::PathBuf::from(dir);
    std::fs::create_dir_all(&dir).expect("the screenshots' directory");
    std::fs::write(dir.join(format!("{name}.png")), png).expect("saved");
}

async fn sign_in(c: &Client, url: &str, token: &str) {
    c.goto(url).await.expect("the dashboard");
    c.find(Locator::Id("token"))
        .await
        .expect("the token field")
        .send_keys(token)
        .await
        .expect("typed");
    c.find(Locator::Id("sign-in"))
        .await
        .expect("the button")
        .click()
        .await
        .expect("clicked");
}

/// The URL and token `flotilla dashboard` prints for the hub's kubeconfig.
fn dashboard_login(hub: &Server) -> (String, String) {
    dashboard_login_with(&hub.kubeconfig)
}

/// The URL and token `flotilla dashboard` prints for `kubeconfig`.
fn dashboard_login_with(kubeconfig: &std::path::Path) -> (String, String) {
    let out = flotilla(&[
        "dashboard",
        "--kubeconfig",
        kubeconfig.to_str().unwrap_or_default(),
    ]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{text}");
    let url = text
        .lines()
        .find_map(|l| l.strip_prefix("Dashboard: "))
        .expect("the URL")
        .to_string();
    let token = text.lines().last().unwrap_or_default().trim().to_string();
    (url, token)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_user_signs_in_follows_the_fleet_live_and_a_restricted_one_is_refused() {
    if !have_browser() {
        return;
    }
    // Pods that take a while to start, so a failover lasts long enough
    // to be watched.
    let fleet = tokio::task::spawn_blocking(|| {
        Fleet::with_member_args(
            &[("member1", "eu"), ("member2", "us")],
            &["--pod-startup", "1s"],
        )
    })
    .await
    .expect("a fleet");
    let (url, token) = dashboard_login(&fleet.hub);
    assert!(
        url.starts_with("https://127.0.0.1:") && url.ends_with("/dashboard/"),
        "{url}"
    );

    // Served to anyone (they hold no data), with the policy that keeps
    // scripts and connections to this origin.
    let head = Command::new("curl")
        .args(["-sk", "-D", "-", "-o", "/dev/null", &url])
        .output()
        .expect("curl");
    let head = String::from_utf8_lossy(&head.stdout).to_lowercase();
    assert_has(
        &head,
        &[
            "200",
            "content-security-policy: default-src 'none'; script-src 'self'",
            "x-content-type-options: nosniff",
        ],
    );
    assert!(!head.contains("set-cookie"), "{head}");
    // The data is the API's, which wants a token.
    let anonymous = Command::new("curl")
        .args(["-sk", "-o", "/dev/null", "-w", "%{http_code}"])
        .arg(url.replace("/dashboard/", "/apis/cluster.karmada.io/v1alpha1/clusters"))
        .output()
        .expect("curl");
    // (anonymous, as kube-apiserver answers it: 403).
    assert_eq!(String::from_utf8_lossy(&anonymous.stdout), "403");

    // An Event whose message is markup: shown as text, never run.
    fleet.hub.ok_stdin(
        &["apply", "-f", "-"],
        r#"
apiVersion: v1
kind: Event
metadata: {name: markup, namespace: default}
involvedObject: {kind: ConfigMap, name: probe, namespace: default}
type: Warning
reason: Probe
message: <img src=x onerror="window.pwned=1"><script>window.pwned=1</script>
"#,
    );

    let driver = Driver::start();
    let c = driver.browser().await;
    c.set_window_size(1280, 800).await.expect("sized");
    sign_in(&c, &url, &token).await;
    wait_text(&c, "#who", "Signed in as").await;
    // The overview counts the fleet, and the peerings its members hold.
    wait_text(&c, "#view", "2 Ready").await;
    wait_text(&c, "#peerings", "held by 0 of the 2 members").await;
    fleet.member("member1").ok_stdin(
        &["apply", "-f", "-"],
        "apiVersion: core.liqo.io/v1beta1\nkind: ForeignCluster\nmetadata: {name: remote}\nspec: {clusterID: remote}\n",
    );
    wait_text(&c, "#peerings", "held by 1 of the 2 members").await;
    let warnings = wait_text(&c, "#warnings", "Probe").await;
    assert!(
        warnings.contains("<script>window.pwned=1</script>"),
        "{warnings}"
    );
    let pwned = c
        .execute("return window.pwned === undefined", vec![])
        .await
        .expect("script");
    assert_eq!(pwned, json!(true), "markup in an Event ran");
    screenshot(&c, "overview").await;

    // The clusters, with their labels.
    c.goto(&format!("{url}#/clusters")).await.expect("clusters");
    let table = wait_text(&c, "#clusters", "member2").await;
    assert_has(
        &table,
        &["member1", "Push", "Ready", "region=eu", "region=us"],
    );
    screenshot(&c, "clusters").await;
    // The admin is offered the join form.
    assert!(present(&c, "#join").await, "no join form for the admin");

    // A cluster's page: taint it from there, and take the taint away.
    click(&c, "#clusters a[href='#/cluster/member1']").await;
    wait_text(&c, "#cluster-facts", "Push").await;
    wait_text(&c, "#cluster-conditions", "Ready").await;
    type_into(&c, "#taint-key", "dedicated").await;
    type_into(&c, "#taint-value", "gpu").await;
    click(&c, "#taint button[type=submit]").await;
    wait_text(&c, "#cluster-facts", "dedicated=gpu:NoSchedule").await;
    assert_eq!(
        fleet.jsonpath_hub(&["get", "cluster", "member1"], "{.spec.taints[*].key}"),
        "dedicated"
    );
    screenshot(&c, "cluster").await;
    click(&c, "#untaint").await;
    wait_until(&c, "#cluster-facts", "no taint", |t| {
        !t.contains("dedicated")
    })
    .await;
    assert_eq!(
        fleet.jsonpath_hub(&["get", "cluster", "member1"], "{.spec.taints}"),
        ""
    );

    // A workload placed while the page is open appears without a reload.
    c.goto(&format!("{url}#/workloads"))
        .await
        .expect("workloads");
    wait_text(&c, "#view", "Workloads of the fleet").await;
    fleet.apply(WEB);
    let row = wait_text(&c, "#workloads", "Deployment/web").await;
    wait_text(&c, "#workloads", "member1: Healthy").await;
    assert!(row.contains("member2"), "{row}");
    screenshot(&c, "workloads").await;

    // Its page: the scheduler's explanation (as `flotilla describe
    // placement`), each cluster's Work, and the override member1 got.
    click(&c, "#workloads a").await;
    let why = wait_text(&c, "#explanation", "PropagationPolicy default/web").await;
    assert_has(&why, &["Divided", "member1", "member2"]);
    wait_text(&c, "#works", "member2").await;
    let diff = wait_text(&c, ".diff[data-cluster='member1']", "tier").await;
    assert!(diff.contains("+ metadata.labels.tier: \"gpu\""), "{diff}");
    screenshot(&c, "workload").await;

    let page = c.current_url().await.expect("the page").to_string();
    // An edited policy planned before it is applied.
    c.goto(&format!("{url}#/policies")).await.expect("policies");
    wait_text(&c, "#propagationpolicies", "web").await;
    wait_text(&c, "#overridepolicies", "tier").await;
    click(&c, "#propagationpolicies .plan-edit").await;
    c.execute(
        "const t = document.getElementById('plan-manifests'); const p = JSON.parse(t.value); \
         p.spec.placement.clusterAffinity.clusterNames = ['member2']; p.spec.placement.replicaScheduling = null; \
         t.value = JSON.stringify(p);",
        vec![],
    )
    .await
    .expect("edited");
    click(&c, "#plan").await;
    let plan = wait_text(&c, "#plan-result", "Deployment default/web").await;
    assert_has(&plan, &["(in the manifests)", "member2", "not member1"]);
    screenshot(&c, "plan").await;

    // Back to the workload's page for what follows.
    c.goto(&page).await.expect("the workload");
    wait_text(&c, "#works", "member2").await;

    // member2 lost: the failover moves its replicas to member1, and the
    // page follows without a reload.
    member_fault(&fleet, "member2", &["unreachable", "--mode", "refuse"]);
    let works = wait_until(&c, "#works", "member2 gone, member1 with 4", |t| {
        !t.contains("member2") && t.contains("member1 4")
    })
    .await;
    assert!(works.contains("member1"), "{works}");
    assert_eq!(c.current_url().await.expect("the page").as_str(), page);
    screenshot(&c, "failover").await;
    member_fault(&fleet, "member2", &["reachable"]);

    // The other fleet APIs' objects, as their front ends serve them.
    c.goto(&format!("{url}#/fleet-apis"))
        .await
        .expect("fleet APIs");
    wait_text(&c, "#managedcluster", "member1").await;
    wait_text(&c, "#view", "Argo CD").await;
    // Each member's fabric and peerings, read through the cluster proxy
    // (these sim members have neither: the pages say so).
    c.goto(&format!("{url}#/network")).await.expect("network");
    wait_text(&c, "#member-member1", "Not served there").await;
    // `network verify` run by the hub: these members have no fabric, so
    // it says which hop fails, and cleans up its probe pods.
    wait_text(&c, "#verify-to", "member2").await;
    type_into(&c, "#verify-timeout", "5").await;
    click(&c, "#verify").await;
    let verified = wait_longer(
        &c,
        "#verify-output",
        "the summary",
        Duration::from_secs(180),
        |t| t.contains(" passed, "),
    )
    .await;
    assert_has(
        &verified,
        &[
            "Verifying the fabric from cluster \"member1\" to cluster \"member2\"",
            "✗",
            "member1 has no gateway",
            "Deleted namespace flotilla-verify-",
        ],
    );
    screenshot(&c, "network").await;

    c.goto(&format!("{url}#/peering")).await.expect("peering");
    wait_text(&c, "#member-member2", "No virtual nodes").await;

    // A user who may only view one namespace sees the fleet refused.
    for args in [
        vec!["create", "namespace", "team"],
        vec!["create", "serviceaccount", "viewer", "-n", "team"],
        vec![
            "create",
            "rolebinding",
            "viewer",
            "--clusterrole=view",
            "--serviceaccount=team:viewer",
            "-n",
            "team",
        ],
    ] {
        fleet.hub.ok(&args);
    }
    let viewer = fleet.hub.ok(&["create", "token", "viewer", "-n", "team"]);
    c.find(Locator::Id("sign-out"))
        .await
        .expect("sign out")
        .click()
        .await
        .expect("clicked");
    sign_in(&c, &url, viewer.trim()).await;
    wait_text(&c, "#who", "system:serviceaccount:team:viewer").await;
    c.goto(&format!("{url}#/clusters")).await.expect("clusters");
    wait_text(&c, "#view", "Not permitted").await;
    assert!(!present(&c, "#join").await, "a viewer is offered joining");
    // Nor offered taints or unjoining on a cluster's page.
    c.goto(&format!("{url}#/cluster/member1"))
        .await
        .expect("a cluster");
    wait_text(&c, "#view", "Not permitted").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!present(&c, "#unjoin").await, "a viewer is offered unjoin");
    assert!(!present(&c, "#taint").await, "a viewer is offered a taint");
    c.goto(&format!("{url}#/network")).await.expect("network");
    wait_text(&c, "#view", "Not permitted").await;
    assert!(!present(&c, "#verify").await, "a viewer is offered verify");
    c.close().await.expect("closed");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_fleet_from_flotilla_up_is_seen_as_it_is() {
    if !have_browser() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("fleet");
    let mut up = common::up::Up::start(&dir);
    tokio::task::block_in_place(|| up.wait_ready());
    let kubeconfig = dir.join("kubeconfig");
    let (url, token) = dashboard_login_with(&kubeconfig);
    let driver = Driver::start();
    let c = driver.browser().await;
    sign_in(&c, &url, &token).await;
    wait_text(&c, "#who", "Signed in as").await;
    // Three members, one of them (member3) in Pull mode.
    wait_text(&c, "#view", "3 Ready").await;
    wait_text(&c, "#view", "1 Pull").await;
    c.goto(&format!("{url}#/clusters")).await.expect("clusters");
    let table = wait_text(&c, "#clusters", "member3").await;
    assert_has(&table, &["member1", "member2", "Pull", "us-east"]);
    c.close().await.expect("closed");
}

/// Divided between the two members, failing over when one is lost; an
/// override labels member1's copy.
const WEB: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 4
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: nginx}]}
---
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata: {name: web, namespace: default}
spec:
  resourceSelectors: [{apiVersion: apps/v1, kind: Deployment, name: web}]
  failover:
    cluster: {purgeMode: Directly}
  placement:
    clusterAffinity: {clusterNames: [member1, member2]}
    clusterTolerations:
      - {key: cluster.karmada.io/not-ready, operator: Exists, effect: NoExecute, tolerationSeconds: 2}
      - {key: cluster.karmada.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: 2}
    replicaScheduling:
      replicaSchedulingType: Divided
      replicaDivisionPreference: Weighted
      weightPreference:
        staticWeightList:
          - {targetCluster: {clusterNames: [member1]}, weight: 1}
          - {targetCluster: {clusterNames: [member2]}, weight: 1}
---
apiVersion: policy.karmada.io/v1alpha1
kind: OverridePolicy
metadata: {name: gpu-tier, namespace: default}
spec:
  resourceSelectors: [{apiVersion: apps/v1, kind: Deployment, name: web}]
  overrideRules:
    - targetCluster: {clusterNames: [member1]}
      overriders:
        labelsOverrider: [{operator: add, value: {tier: gpu}}]
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_pods_log_is_followed_and_a_command_runs_in_its_terminal() {
    if !have_browser() || !can_run_netns() {
        return;
    }
    let prefix = format!("dsh{}", std::process::id() % 10_000);
    let fleet = tokio::task::spawn_blocking(move || {
        let mut fleet = Fleet {
            hub: Server::controlplane(&SHORT_THRESHOLDS),
            members: Vec::new(),
        };
        let m = Server::netns_member(&format!("{prefix}-east"), &["--nodes", "1"]);
        fleet.members.push(("east".to_string(), m));
        fleet.join("east", "east");
        fleet.wait_ready("east");
        fleet
    })
    .await
    .expect("a fleet");
    // A pod that writes a line every half second, made in the member.
    fleet.member("east").ok_stdin(
        &["apply", "-f", "-"],
        r#"
apiVersion: v1
kind: Pod
metadata: {name: ticker, namespace: default}
spec:
  containers:
    - name: ticker
      image: busybox
      command: [sh, -c, 'i=0; while true; do echo tick-$i; i=$((i+1)); sleep 0.5; done']
"#,
    );
    let (url, token) = dashboard_login(&fleet.hub);
    let driver = Driver::start();
    let c = driver.browser().await;
    c.set_window_size(1280, 900).await.expect("sized");
    sign_in(&c, &url, &token).await;
    wait_text(&c, "#who", "Signed in as").await;

    // The member's own view lists it; its page follows the log as it grows.
    c.goto(&format!("{url}#/member/east"))
        .await
        .expect("member");
    wait_text(&c, "#member-pods", "ticker").await;
    click(&c, "#member-pods a").await;
    wait_text(&c, "#pod-facts", "Running").await;
    wait_text(&c, "#logs", "tick-2").await;
    wait_text(&c, "#logs", "tick-8").await;

    // A command in its terminal, through the hub's cluster proxy.
    click(&c, "#terminal-connect").await;
    wait_text(&c, "#terminal-output", "[connected").await;
    c.find(Locator::Css("#terminal-input"))
        .await
        .expect("the terminal")
        .send_keys("echo hello-$((6*7))\u{E007}")
        .await
        .expect("typed");
    let out = wait_text(&c, "#terminal-output", "hello-42").await;
    assert!(out.contains("$ echo hello-$((6*7))"), "{out}");
    screenshot(&c, "member-pod").await;
    c.close().await.expect("closed");
}

/// The dashboard at fleet scale, a measurement rather than a check (run
/// it on purpose: `cargo test --release -p flotilla --test dashboard --
/// --ignored --nocapture`; figures in docs/benchmarks.md): 1,000 clusters
/// and 10,000 templates on the hub; how long the overview, clusters and
/// workloads pages take to show them, and how long a change takes to
/// appear on an open page. Prints one JSON object.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "a benchmark: run on purpose with --ignored"]
async fn the_dashboard_at_1000_clusters_and_10000_templates() {
    use futures::{StreamExt, stream};
    use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
    if !have_browser() {
        return;
    }
    const CLUSTERS: usize = 1_000;
    const TEMPLATES: usize = 10_000;
    let hub = tokio::task::spawn_blocking(|| Server::controlplane(&[]))
        .await
        .expect("a hub");
    let client = hub.client().await;
    let started = Instant::now();
    // Pull-mode clusters with no agent: objects the hub holds without
    // reaching anything.
    let clusters = kube::core::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
        "cluster.karmada.io",
        "v1alpha1",
        "Cluster",
    ));
    let cluster_api: Api<DynamicObject> = Api::all_with(client.clone(), &clusters);
    stream::iter(0..CLUSTERS)
        .for_each_concurrent(16, |i| {
            let api = cluster_api.clone();
            async move {
                let c: DynamicObject = serde_json::from_value(json!({
                    "apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster",
                    "metadata": {"name": format!("c{i:04}"), "labels": {"region": format!("r{}", i % 10)}},
                    "spec": {"syncMode": "Pull", "region": format!("r{}", i % 10)},
                }))
                .expect("a cluster");
                api.create(&PostParams::default(), &c).await.expect("created");
            }
        })
        .await;
    hub.ok(&["create", "namespace", "scale"]);
    hub.ok_stdin(
        &["apply", "-f", "-"],
        r#"
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata: {name: all, namespace: scale}
spec:
  resourceSelectors: [{apiVersion: v1, kind: ConfigMap}]
  placement: {clusterAffinity: {labelSelector: {matchLabels: {region: r1}}}}
"#,
    );
    let config_maps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client.clone(), "scale");
    stream::iter(0..TEMPLATES)
        .for_each_concurrent(16, |i| {
            let api = config_maps.clone();
            async move {
                let cm: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(json!({
                    "metadata": {"name": format!("t{i:05}")}, "data": {"n": i.to_string()},
                }))
                .expect("a ConfigMap");
                api.create(&PostParams::default(), &cm)
                    .await
                    .expect("created");
            }
        })
        .await;
    let bindings = kube::core::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
        "work.karmada.io",
        "v1alpha2",
        "ResourceBinding",
    ));
    let binding_api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "scale", &bindings);
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let n = binding_api
            .list_metadata(&Default::default())
            .await
            .map(|l| l.items.len())
            .unwrap_or(0);
        if n >= TEMPLATES {
            break;
        }
        assert!(Instant::now() < deadline, "only {n} bindings");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let populated_s = started.elapsed().as_secs_f64();

    let (url, token) = dashboard_login(&hub);
    let driver = Driver::start();
    let c = driver.browser().await;
    c.set_window_size(1280, 900).await.expect("sized");
    sign_in(&c, &url, &token).await;
    wait_text(&c, "#who", "Signed in as").await;
    // Each page from a fresh load: navigation to everything shown.
    let mut loads = serde_json::Map::new();
    for (page, css, needle) in [
        ("overview", "#view", "10000"),
        ("clusters", "#view", "1000 of 1000"),
        ("workloads", "#view", "10000 of 10000"),
    ] {
        c.goto("about:blank").await.expect("blank");
        let t = Instant::now();
        c.goto(&format!("{url}#/{page}")).await.expect("the page");
        wait_text(&c, css, needle).await;
        loads.insert(page.into(), json!(t.elapsed().as_secs_f64()));
    }
    // A change on an open page: a cluster's label on the clusters page,
    // and a new template on the workloads page (through the pipeline:
    // the detector makes its binding first).
    // When the page first shows `needle` in `css`, as the browser's clock
    // has it (milliseconds since the epoch, the machine's clock): watched
    // in the page itself, so WebDriver's polling adds nothing.
    let watch_for = |css: &'static str, needle: String| {
        let c = c.clone();
        async move {
            c.execute(
                "const [css, needle] = arguments; window.__seen = null; \
                 const look = () => { const e = document.querySelector(css); \
                   if (e && e.textContent.includes(needle)) { window.__seen = Date.now(); return; } \
                   setTimeout(look, 5); }; look();",
                vec![json!(css), json!(needle)],
            )
            .await
            .expect("watching");
        }
    };
    let seen_after = |sent_ms: f64| {
        let c = c.clone();
        async move {
            let deadline = Instant::now() + WAIT;
            loop {
                let seen = c
                    .execute("return window.__seen", vec![])
                    .await
                    .expect("read");
                if let Some(ms) = seen.as_f64() {
                    return (ms - sent_ms) / 1000.0;
                }
                assert!(Instant::now() < deadline, "the change never showed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    let now_ms = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64() * 1000.0)
            .unwrap_or_default()
    };
    let mut label_s = Vec::new();
    let mut label_ack_s = Vec::new();
    c.goto(&format!("{url}#/clusters")).await.expect("clusters");
    wait_text(&c, "#view", "1000 of 1000").await;
    type_into(&c, "#view input[type=search]", "c0500").await;
    for round in 0..5 {
        watch_for("#clusters", format!("round={round}")).await;
        let sent = now_ms();
        cluster_api
            .patch(
                "c0500",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"round": round.to_string()}}})),
            )
            .await
            .expect("labelled");
        label_ack_s.push((now_ms() - sent) / 1000.0);
        label_s.push(seen_after(sent).await);
    }
    let mut template_s = Vec::new();
    c.goto(&format!("{url}#/workloads"))
        .await
        .expect("workloads");
    wait_text(&c, "#view", "10000 of 10000").await;
    type_into(&c, "#view input[type=search]", "probe").await;
    for round in 0..5 {
        watch_for("#workloads", format!("ConfigMap/probe{round}")).await;
        let sent = now_ms();
        let cm: k8s_openapi::api::core::v1::ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": format!("probe{round}")}}))
                .expect("a ConfigMap");
        config_maps
            .create(&PostParams::default(), &cm)
            .await
            .expect("created");
        template_s.push(seen_after(sent).await);
    }
    let memory = c
        .execute(
            "return performance.memory ? performance.memory.usedJSHeapSize : null",
            vec![],
        )
        .await
        .unwrap_or_default();
    let report = json!({
        "clusters": CLUSTERS, "templates": TEMPLATES,
        "populate_s": populated_s,
        "page_load_s": loads,
        "cluster_label_to_page_s": label_s,
        "cluster_label_acknowledged_s": label_ack_s,
        "template_created_to_page_s": template_s,
        "js_heap_bytes": memory,
        "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
    });
    println!("{report}");
    c.close().await.expect("closed");
}
