//! The hub's web dashboard, driven in headless Chromium through WebDriver
//! (Debian's chromium and chromium-driver; `.ci/run` installs them): sign
//! in with the token `flotilla dashboard` prints, see the fleet, watch a
//! workload placed without refreshing, read markup in an Event as text,
//! and be refused as a restricted user. The pages' headers are read with
//! curl.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::fleet::Fleet;
use common::{assert_has, flotilla, which};
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
    let deadline = Instant::now() + WAIT;
    let mut last = String::new();
    while Instant::now() < deadline {
        if let Ok(e) = c.find(Locator::Css(css)).await {
            last = e.text().await.unwrap_or_default();
            if last.contains(needle) {
                return last;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let page = c.source().await.unwrap_or_default();
    panic!("{css} never showed {needle:?}; it showed {last:?}\n{page}");
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

/// The URL and token `flotilla dashboard` prints for a kubeconfig.
fn dashboard_login(kubeconfig: &str) -> (String, String) {
    let out = flotilla(&["dashboard", "--kubeconfig", kubeconfig]);
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
    if which("chromedriver").is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must have chromedriver (.ci/run installs it)"
        );
        eprintln!("skipped: no chromedriver (apt-get install chromium chromium-driver)");
        return;
    }
    let fleet = tokio::task::spawn_blocking(|| Fleet::new(&[("member1", "eu"), ("member2", "us")]))
        .await
        .expect("a fleet");
    let hub = fleet
        .hub
        .kubeconfig
        .to_str()
        .unwrap_or_default()
        .to_string();
    let (url, token) = dashboard_login(&hub);
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
    // The overview counts the fleet.
    wait_text(&c, "#view", "2 Ready").await;
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

    // A workload placed while the page is open appears without a reload.
    c.goto(&format!("{url}#/workloads"))
        .await
        .expect("workloads");
    wait_text(&c, "#view", "Workloads of the fleet").await;
    fleet.apply(
        r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 2
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
  placement: {clusterAffinity: {clusterNames: [member1]}}
"#,
    );
    let row = wait_text(&c, "#workloads", "Deployment/web").await;
    wait_text(&c, "#workloads", "member1: Healthy").await;
    assert!(row.contains("member1"), "{row}");
    screenshot(&c, "workloads").await;

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
    c.close().await.expect("closed");
}
