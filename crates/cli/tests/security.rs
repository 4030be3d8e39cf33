//! TLS and authentication: HTTPS with the server's own CA, bearer tokens,
//! anonymous requests confined to health and version, 401 for credentials
//! the server does not accept, tokens issued and revoked by the CLI.

mod common;

use common::{Server, flotilla, kube_config, status_of, wait_for};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Api;
use std::time::Duration;

fn kubeconfig_value(kubeconfig: &std::path::Path, key: &str) -> String {
    let text = std::fs::read_to_string(kubeconfig).expect("kubeconfig");
    text.lines()
        .find_map(|l| l.trim().strip_prefix(&format!("{key}: ")))
        .unwrap_or_default()
        .to_string()
}

async fn readyz(client: &kube::Client) -> Result<String, kube::Error> {
    client
        .request_text(http::Request::get("/readyz").body(Vec::new()).unwrap())
        .await
}

#[tokio::test]
async fn anonymous_requests_reach_health_and_version_only_and_bad_credentials_get_401() {
    let s = Server::start();
    let mut config = kube_config(&s.kubeconfig).await;
    config.auth_info = Default::default();
    let anonymous = kube::Client::try_from(config.clone()).unwrap();
    let e = Api::<Namespace>::all(anonymous.clone())
        .list(&Default::default())
        .await
        .unwrap_err();
    let status = status_of(e);
    assert_eq!((status.code, status.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        status.message,
        r#"namespaces is forbidden: User "system:anonymous" cannot list resource "namespaces" in API group "" at the cluster scope"#
    );
    assert_eq!(readyz(&anonymous).await.unwrap(), "ok");
    let version = anonymous.apiserver_version().await.unwrap();
    assert_eq!(version.major, "1");
    // Discovery is for authenticated users, as upstream's system:discovery.
    let e = anonymous.list_api_groups().await.unwrap_err();
    let status = status_of(e);
    assert_eq!(status.code, 403);
    assert_eq!(
        status.message,
        r#"forbidden: User "system:anonymous" cannot get path "/apis""#
    );

    config.auth_info.token = Some("not-a-token".to_string().into());
    let wrong = kube::Client::try_from(config).unwrap();
    let e = Api::<ConfigMap>::default_namespaced(wrong)
        .get("x")
        .await
        .unwrap_err();
    assert_eq!(status_of(e).code, 401);

    let out = s.kubectl(&["--token", "abcdef.0123456789abcdef", "get", "ns"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("You must be logged in"), "{stderr}");
    // With the kubeconfig's token it works.
    s.ok(&["get", "ns", "default"]);
}

#[tokio::test]
async fn tls_is_verified_against_the_written_ca() {
    let s = Server::start_with(&["--tls-san", "flotilla.example.test"]);
    let url = kubeconfig_value(&s.kubeconfig, "server");
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");

    // The certificate covers localhost and the extra name, verified with the CA.
    let port = url.rsplit(':').next().unwrap().to_string();
    let mut config = kube_config(&s.kubeconfig).await;
    config.cluster_url = format!("https://localhost:{port}").parse().unwrap();
    let client = kube::Client::try_from(config.clone()).unwrap();
    Api::<Namespace>::all(client).get("default").await.unwrap();
    config.tls_server_name = Some("flotilla.example.test".into());
    let client = kube::Client::try_from(config.clone()).unwrap();
    Api::<Namespace>::all(client).get("default").await.unwrap();

    // A name the certificate does not cover fails verification.
    config.tls_server_name = Some("elsewhere.example.test".into());
    let client = kube::Client::try_from(config.clone()).unwrap();
    let e = Api::<Namespace>::all(client).get("default").await;
    assert!(
        matches!(e, Err(ref e) if !matches!(e, kube::Error::Api(_))),
        "{e:?}"
    );

    // Another server's CA does not verify this server.
    let other = Server::start();
    let mut foreign = kube_config(&other.kubeconfig).await;
    foreign.cluster_url = url.parse().unwrap();
    foreign.auth_info = config.auth_info.clone();
    let client = kube::Client::try_from(foreign).unwrap();
    let e = Api::<Namespace>::all(client).get("default").await;
    assert!(
        matches!(e, Err(ref e) if !matches!(e, kube::Error::Api(_))),
        "{e:?}"
    );

    // kubectl verifies too: with the CA removed it refuses the certificate.
    let out = s.kubectl(&[
        "--certificate-authority",
        s.data_dir()
            .join("pki")
            .join("apiserver.crt")
            .to_str()
            .unwrap(),
        "--tls-server-name",
        "elsewhere.example.test",
        "get",
        "ns",
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("certificate"), "{stderr}");
}

#[tokio::test]
async fn the_ca_and_admin_token_survive_a_restart() {
    let mut s = Server::start();
    let ca = kubeconfig_value(&s.kubeconfig, "certificate-authority-data");
    let token = kubeconfig_value(&s.kubeconfig, "token");
    assert!(!ca.is_empty() && token.len() >= 32);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        for f in [
            s.kubeconfig.clone(),
            s.data_dir().join("admin-token"),
            s.data_dir().join("pki/ca.key"),
        ] {
            let mode = std::fs::metadata(&f).unwrap().permissions().mode();
            assert_eq!(mode & 0o077, 0, "{} is private", f.display());
        }
    }
    s.kill9();
    s.spawn();
    assert_eq!(
        kubeconfig_value(&s.kubeconfig, "certificate-authority-data"),
        ca
    );
    assert_eq!(kubeconfig_value(&s.kubeconfig, "token"), token);
    s.ok(&["get", "ns", "default"]);
}

#[tokio::test]
async fn tokens_are_issued_used_and_revoked_through_the_cli() {
    let s = Server::start_with_env(&[], &[("FLOTILLA_LOG", "debug")]);
    let kubeconfig = s.kubeconfig.to_str().unwrap();
    let agent_kubeconfig = s.dir.path().join("agent-kubeconfig");
    let out = flotilla(&[
        "token",
        "create",
        "--kubeconfig",
        kubeconfig,
        "--description",
        "agent of member3",
        "--groups",
        "flotilla:agents",
        "--write-kubeconfig",
        agent_kubeconfig.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{out:?}");
    let token = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let (id, secret) = token.split_once('.').expect("<id>.<secret>");
    assert_eq!((id.len(), secret.len()), (6, 16));

    // The token names its identity; what it may do is what its groups
    // are bound to (nothing yet: 403, not 401).
    let out = s.kubectl(&["--token", &token, "get", "ns", "default"]);
    common::assert_has(
        &String::from_utf8_lossy(&out.stderr),
        &[&format!(
            r#"User "system:bootstrap:{id}" cannot get resource "namespaces""#
        )],
    );
    s.ok(&[
        "create",
        "clusterrolebinding",
        "agents-view",
        "--clusterrole=view",
        "--group=flotilla:agents",
    ]);
    // The token works with kubectl and in the kubeconfig written for it.
    s.ok(&["--token", &token, "get", "ns", "default"]);
    let agent = common::kube_client(&agent_kubeconfig).await;
    Api::<Namespace>::all(agent.clone())
        .get("default")
        .await
        .unwrap();

    // Listed without its secret.
    let out = flotilla(&["token", "list", "--kubeconfig", kubeconfig]);
    let listing = String::from_utf8_lossy(&out.stdout);
    common::assert_has(&listing, &[id, "agent of member3", "flotilla:agents"]);
    assert!(!listing.contains(secret));

    // Revoked: 401 at once.
    let out = flotilla(&["token", "revoke", id, "--kubeconfig", kubeconfig]);
    assert!(out.status.success(), "{out:?}");
    let e = Api::<Namespace>::all(agent)
        .get("default")
        .await
        .unwrap_err();
    assert_eq!(status_of(e).code, 401);
    let out = flotilla(&["token", "revoke", id, "--kubeconfig", kubeconfig]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no token with id"));

    // A token with a lifetime stops working when it ends.
    let out = flotilla(&[
        "token",
        "create",
        "--kubeconfig",
        kubeconfig,
        "--ttl",
        "2s",
        "--groups",
        "flotilla:agents",
    ]);
    let short = String::from_utf8_lossy(&out.stdout).trim().to_string();
    s.ok(&["--token", &short, "get", "ns", "default"]);
    wait_for(Duration::from_secs(10), "the token to expire", || {
        !s.kubectl(&["--token", &short, "get", "ns", "default"])
            .status
            .success()
    });

    // Secrets never reach the log, even at debug level.
    let admin = kubeconfig_value(&s.kubeconfig, "token");
    let log = s.log();
    assert!(log.contains("request"), "debug logging is on");
    for secret_value in [admin.as_str(), token.as_str(), secret, short.as_str()] {
        assert!(!log.contains(secret_value));
    }
}
