//! Who a client is, end to end: a named user's kubeconfig from
//! `flotilla kubeconfig create` (client certificate through a CSR), a user
//! of `--token-auth-file`, and what is refused: a certificate of another
//! CA or expired, a token nobody issued, garbled certificates and headers
//! (never a panic). Authorization is not asserted here: whoami and 401s
//! hold whether RBAC is enforced or not.

mod common;

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;

use common::{Server, assert_has, flotilla, which};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use serde_json::Value;

fn kubectl_with(kubeconfig: &Path, cache: &Path, args: &[&str]) -> Output {
    let kubectl = which("kubectl")
        .expect("kubectl not found: install Debian's kubernetes-client (bash .ci/run does it)");
    Command::new(kubectl)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--cache-dir")
        .arg(cache)
        .args(args)
        .env_remove("KUBECONFIG")
        .output()
        .expect("run kubectl")
}

fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).into_owned()
}

/// `auth whoami` as the given kubeconfig: (username, groups).
fn whoami(kubeconfig: &Path, cache: &Path, extra: &[&str]) -> (String, Vec<String>) {
    let out = kubectl_with(
        kubeconfig,
        cache,
        &[extra, &["auth", "whoami", "-o", "json"]].concat(),
    );
    assert!(out.status.success(), "whoami failed: {}", text(&out.stderr));
    let review: Value = serde_json::from_slice(&out.stdout).expect("whoami answers JSON");
    let info = &review["status"]["userInfo"];
    let groups = info["groups"]
        .as_array()
        .map(|g| {
            g.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    (info["username"].as_str().unwrap_or("").to_string(), groups)
}

#[cfg(unix)]
fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// A kubeconfig for `server`'s address and CA with a client certificate.
fn cert_kubeconfig(admin: &Path, cert_pem: &str, key_pem: &str, out: &Path) {
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let admin: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(admin).unwrap()).unwrap();
    let cluster = &admin["clusters"][0]["cluster"];
    let server = cluster["server"].as_str().unwrap();
    let ca = cluster["certificate-authority-data"].as_str().unwrap();
    let config = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\ncontexts:\n- name: c\n  context: {{cluster: c, user: u}}\ncurrent-context: c\nusers:\n- name: u\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\n",
        b64(cert_pem),
        b64(key_pem)
    );
    std::fs::write(out, config).unwrap();
}

/// A client certificate for `cn` signed by `issuer`, valid `from`..`to` (years).
fn client_cert(
    cn: &str,
    issuer: &rcgen::Issuer<'_, rcgen::KeyPair>,
    (from, to): (i32, i32),
) -> (String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, cn);
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    params.not_before = rcgen::date_time_ymd(from, 1, 1);
    params.not_after = rcgen::date_time_ymd(to, 1, 1);
    let cert = params.signed_by(&key, issuer).unwrap();
    (cert.pem(), key.serialize_pem())
}

/// The server's host:port, from its kubeconfig.
fn address(s: &Server) -> String {
    let config = std::fs::read_to_string(&s.kubeconfig).unwrap();
    let server = config
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: https://"))
        .expect("a server URL");
    server.trim().to_string()
}

/// One HTTP/1.1 request over TLS, with `client` as the client
/// certificate chain and key; the response's status code, or why none came.
fn raw_request(
    addr: &str,
    ca_pem: &str,
    client: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
    authorization: Option<&[u8]>,
) -> Result<u16, String> {
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(ca.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots);
    let config = match client {
        Some((chain, key)) => builder
            .with_client_auth_cert(chain, key)
            .map_err(|e| e.to_string())?,
        None => builder.with_no_client_auth(),
    };
    let connection =
        rustls::ClientConnection::new(Arc::new(config), ServerName::try_from("127.0.0.1").unwrap())
            .map_err(|e| e.to_string())?;
    let tcp = std::net::TcpStream::connect(addr).map_err(|e| e.to_string())?;
    tcp.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let mut tls = rustls::StreamOwned::new(connection, tcp);
    let mut request =
        b"GET /api/v1/namespaces HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n".to_vec();
    if let Some(value) = authorization {
        request.extend_from_slice(b"Authorization: ");
        request.extend_from_slice(value);
        request.extend_from_slice(b"\r\n");
    }
    request.extend_from_slice(b"\r\n");
    tls.write_all(&request).map_err(|e| e.to_string())?;
    let mut response = Vec::new();
    // A close without close_notify after the answer is fine.
    let read = tls.read_to_end(&mut response);
    if response.is_empty() {
        return Err(read
            .err()
            .map(|e| e.to_string())
            .unwrap_or("no answer".into()));
    }
    let status = text(&response)
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("not HTTP: {}", text(&response)))?;
    Ok(status)
}

#[test]
fn named_users_and_static_tokens_authenticate_and_bad_credentials_are_refused() {
    let files = tempfile::tempdir().unwrap();
    let tokens = files.path().join("tokens.csv");
    std::fs::write(
        &tokens,
        "# static users\nstat1ctok3n,carol,1003,\"ops,dev\"\n",
    )
    .unwrap();
    let s = Server::start_with(&["--token-auth-file", tokens.to_str().unwrap()]);
    let cache = files.path().join("kube-cache");
    s.ok(&["create", "namespace", "team-a"]);

    // A named user's kubeconfig: a key made here, a CSR approved and signed.
    let alice = files.path().join("alice.kubeconfig");
    let out = flotilla(&[
        "kubeconfig",
        "create",
        "--kubeconfig",
        s.kubeconfig.to_str().unwrap(),
        "--user",
        "alice",
        "--group",
        "dev,qa",
        "--cluster-role",
        "view",
        "--namespace",
        "team-a",
        "--expiration",
        "1h",
        "--out",
        alice.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "kubeconfig create: {}",
        text(&out.stderr)
    );
    assert_has(
        &text(&out.stdout),
        &[
            "user alice",
            "dev,qa,system:authenticated",
            "RoleBinding alice-view",
        ],
    );
    #[cfg(unix)]
    {
        assert_eq!(mode(&alice), 0o600, "the user's kubeconfig holds a key");
        assert_eq!(mode(&s.kubeconfig), 0o600, "the admin kubeconfig too");
    }
    let config = std::fs::read_to_string(&alice).unwrap();
    assert_has(
        &config,
        &[
            "client-certificate-data",
            "client-key-data",
            "namespace: \"team-a\"",
        ],
    );
    assert!(!config.contains("token:"), "{config}");
    assert_eq!(
        whoami(&alice, &cache, &[]),
        (
            "alice".to_string(),
            vec!["dev".into(), "qa".into(), "system:authenticated".into()]
        )
    );
    assert_eq!(
        s.ok(&[
            "get",
            "rolebinding",
            "alice-view",
            "-n",
            "team-a",
            "-o",
            "jsonpath={.roleRef.kind}/{.roleRef.name}/{.subjects[0].name}"
        ]),
        "ClusterRole/view/alice"
    );
    assert_has(
        &s.ok(&["get", "csr"]),
        &["Approved,Issued", "flotilla-admin"],
    );

    // A token of the token file.
    assert_eq!(
        whoami(&s.kubeconfig, &cache, &["--token", "stat1ctok3n"]),
        (
            "carol".to_string(),
            vec!["ops".into(), "dev".into(), "system:authenticated".into()]
        )
    );

    // A token nobody issued: 401, as upstream words it for kubectl.
    for bad in ["stat1ctok3", "not.a.jwt", "abcdef.0123456789abcdef"] {
        let out = kubectl_with(
            &s.kubeconfig,
            &cache,
            &["--token", bad, "get", "namespaces"],
        );
        assert!(!out.status.success());
        assert_has(&text(&out.stderr), &["You must be logged in to the server"]);
    }

    // A certificate of another CA, and an expired one of this CA: refused.
    let other_key = rcgen::KeyPair::generate().unwrap();
    let mut other = rcgen::CertificateParams::default();
    other.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let other = rcgen::Issuer::new(other, other_key);
    let (cert, key) = client_cert("mallory", &other, (2020, 2090));
    let mallory = files.path().join("mallory.kubeconfig");
    cert_kubeconfig(&s.kubeconfig, &cert, &key, &mallory);
    let out = kubectl_with(&mallory, &cache, &["auth", "whoami"]);
    assert!(
        !out.status.success(),
        "another CA's certificate was accepted"
    );

    let pki = s.data_dir().join("pki");
    let ca_pem = std::fs::read_to_string(pki.join("ca.crt")).unwrap();
    let ca_key =
        rcgen::KeyPair::from_pem(&std::fs::read_to_string(pki.join("ca.key")).unwrap()).unwrap();
    let ours = rcgen::Issuer::from_ca_cert_pem(&ca_pem, ca_key).unwrap();
    let (cert, key) = client_cert("alice", &ours, (2020, 2021));
    let expired = files.path().join("expired.kubeconfig");
    cert_kubeconfig(&s.kubeconfig, &cert, &key, &expired);
    let out = kubectl_with(&expired, &cache, &["auth", "whoami"]);
    assert!(!out.status.success(), "an expired certificate was accepted");
    // A valid one of this CA made by hand names its CN.
    let (cert, key) = client_cert("dave", &ours, (2020, 2090));
    let dave = files.path().join("dave.kubeconfig");
    cert_kubeconfig(&s.kubeconfig, &cert, &key, &dave);
    assert_eq!(whoami(&dave, &cache, &[]).0, "dave");

    // Garbled certificates on the wire: the handshake fails, nothing panics.
    use rand::{Rng, RngCore};
    let mut rng = rand::rng();
    let addr = address(&s);
    let valid_der = CertificateDer::pem_slice_iter(cert.as_bytes())
        .next()
        .unwrap()
        .unwrap()
        .to_vec();
    for i in 0..20 {
        let key = rcgen::KeyPair::generate().unwrap();
        let garbage = if i % 2 == 0 {
            let mut b = vec![0u8; rng.random_range(1..400)];
            rng.fill_bytes(&mut b);
            b
        } else {
            let mut b = valid_der.clone();
            let at = rng.random_range(0..b.len());
            b[at] ^= 0x55;
            b
        };
        let chain = vec![CertificateDer::from(garbage)];
        let key = PrivateKeyDer::from(PrivatePkcs8KeyDer::from(key.serialize_der()));
        if let Ok(status) = raw_request(&addr, &ca_pem, Some((chain, key)), Some(b"Bearer x")) {
            // A flip in a part nobody checks leaves a valid certificate.
            assert!(status < 500, "a garbled certificate got {status}");
        }
    }
    // Arbitrary Authorization headers: 400 or 401, never a server error.
    for _ in 0..60 {
        let value: Vec<u8> = (0..rng.random_range(0..60))
            .map(|_| rng.random_range(0x20u8..=0xff))
            .collect();
        let value = [&b"Bearer "[..], &value].concat();
        let status = raw_request(&addr, &ca_pem, None, Some(&value)).expect("an answer");
        assert!(matches!(status, 400 | 401), "{status} for {value:?}");
    }
    // And the server is still there, its log without a panic.
    s.ok(&["get", "namespaces"]);
    assert!(!s.log().contains("panicked"), "{}", s.log());
}

#[test]
fn a_malformed_token_file_stops_the_start_naming_the_line() {
    let files = tempfile::tempdir().unwrap();
    let tokens = files.path().join("tokens.csv");
    std::fs::write(&tokens, "good,alice,1\nonly-two,bob\n").unwrap();
    let out = flotilla(&[
        "apiserver",
        "--data-dir",
        files.path().join("data").to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
        "--token-auth-file",
        tokens.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert_has(&stderr, &["--token-auth-file", "line 2", "2 column(s)"]);
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
}

#[test]
fn kubeconfig_create_errors_say_what_to_do() {
    let s = Server::start();
    let files = tempfile::tempdir().unwrap();
    let out_path = files.path().join("x.kubeconfig");
    let run = |extra: &[&str]| {
        let mut args = vec![
            "kubeconfig",
            "create",
            "--kubeconfig",
            s.kubeconfig.to_str().unwrap(),
            "--out",
            out_path.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        flotilla(&args)
    };
    for (extra, needle) in [
        (
            &["--user", "eve", "--group", "system:masters"][..],
            "reserved",
        ),
        (
            &[
                "--user",
                "eve",
                "--namespace",
                "nope",
                "--cluster-role",
                "view",
            ][..],
            "kubectl create namespace nope",
        ),
        (
            &["--user", "eve", "--expiration", "1m"][..],
            "shorter than 10m",
        ),
    ] {
        let out = run(extra);
        assert!(!out.status.success(), "{extra:?}");
        let stderr = text(&out.stderr);
        assert_has(&stderr, &[needle]);
        assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
        assert!(!out_path.exists());
    }
    // Nothing was asked of the server for refused arguments.
    assert!(!s.ok(&["get", "csr", "-o", "name"]).contains("eve"));
}

/// The CSR flow as upstream validates and signs it: approval conditions
/// checked, the wrong usages `Failed`, other signers left alone, a denied
/// request never signed.
#[tokio::test]
async fn certificate_signing_requests_are_validated_and_signed_as_upstream() {
    use k8s_openapi::api::certificates::v1::{
        CertificateSigningRequest, CertificateSigningRequestCondition,
    };
    use kube::Api;
    use kube::api::PostParams;
    let s = Server::start();
    let csrs: Api<CertificateSigningRequest> = Api::all(s.client().await);
    let request = |name: &str, signer: &str, usages: &[&str]| {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let pem = params.serialize_request(&key).unwrap().pem().unwrap();
        serde_json::from_value::<CertificateSigningRequest>(serde_json::json!({
            "metadata": {"name": name},
            "spec": {"request": base64_of(&pem), "signerName": signer, "usages": usages,
                     "username": "forged", "groups": ["forged-group"]}
        }))
        .unwrap()
    };
    let condition = |kind: &str| CertificateSigningRequestCondition {
        type_: kind.into(),
        status: "True".into(),
        reason: Some("Test".into()),
        ..Default::default()
    };
    let pp = PostParams::default();
    let client_signer = "kubernetes.io/kube-apiserver-client";

    // Who asked is the server's to say.
    let mut ok = csrs
        .create(&pp, &request("ok", client_signer, &["client auth"]))
        .await
        .unwrap();
    assert_eq!(ok.spec.username.as_deref(), Some("flotilla-admin"));
    // The admin's own groups, not the forged ones.
    assert_eq!(
        ok.spec.groups.clone().unwrap_or_default(),
        ["system:masters", "system:authenticated"]
    );

    // Approved and Denied together: upstream's 422.
    let status = ok.status.get_or_insert_with(Default::default);
    status.conditions = Some(vec![condition("Approved"), condition("Denied")]);
    let e = csrs
        .replace_subresource("approval", "ok", &pp, &ok)
        .await
        .unwrap_err();
    let e = common::status_of(e);
    assert_eq!(e.code, 422, "{e:?}");
    assert!(
        e.message
            .contains("Approved and Denied conditions are mutually exclusive"),
        "{}",
        e.message
    );

    // Approved: signed.
    ok.status.as_mut().unwrap().conditions = Some(vec![condition("Approved")]);
    csrs.replace_subresource("approval", "ok", &pp, &ok)
        .await
        .unwrap();
    let signed = wait_csr(&csrs, "ok", |c| certificate_of(c).is_some()).await;
    assert!(
        certificate_of(&signed)
            .unwrap()
            .contains("BEGIN CERTIFICATE")
    );

    // Wrong usages: Failed, with upstream's reason.
    let bad = csrs
        .create(&pp, &request("bad", client_signer, &["server auth"]))
        .await
        .unwrap();
    approve(&csrs, bad, condition("Approved")).await;
    let failed = wait_csr(&csrs, "bad", |c| has(c, "Failed")).await;
    let f = failed
        .status
        .unwrap()
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "Failed")
        .unwrap();
    assert_eq!(f.reason.as_deref(), Some("SignerValidationFailure"));
    assert_eq!(
        f.message.as_deref(),
        Some("invalid usage for client certificate: server auth")
    );

    // Denied, or another signer's: never signed here.
    let denied = csrs
        .create(&pp, &request("denied", client_signer, &["client auth"]))
        .await
        .unwrap();
    approve(&csrs, denied, condition("Denied")).await;
    let other = csrs
        .create(
            &pp,
            &request("other", "example.com/signer", &["client auth"]),
        )
        .await
        .unwrap();
    approve(&csrs, other, condition("Approved")).await;
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    for name in ["denied", "other"] {
        let c = csrs.get(name).await.unwrap();
        assert!(
            certificate_of(&c).is_none() && !has(&c, "Failed"),
            "{name}: {c:?}"
        );
    }
}

fn base64_of(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(s)
}

fn certificate_of(
    c: &k8s_openapi::api::certificates::v1::CertificateSigningRequest,
) -> Option<String> {
    c.status
        .as_ref()
        .and_then(|s| s.certificate.as_ref())
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
}

fn has(c: &k8s_openapi::api::certificates::v1::CertificateSigningRequest, kind: &str) -> bool {
    c.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == kind))
}

async fn approve(
    csrs: &kube::Api<k8s_openapi::api::certificates::v1::CertificateSigningRequest>,
    mut csr: k8s_openapi::api::certificates::v1::CertificateSigningRequest,
    condition: k8s_openapi::api::certificates::v1::CertificateSigningRequestCondition,
) {
    let name = csr.metadata.name.clone().unwrap();
    csr.status.get_or_insert_with(Default::default).conditions = Some(vec![condition]);
    csrs.replace_subresource("approval", &name, &Default::default(), &csr)
        .await
        .unwrap();
}

async fn wait_csr(
    csrs: &kube::Api<k8s_openapi::api::certificates::v1::CertificateSigningRequest>,
    name: &str,
    done: impl Fn(&k8s_openapi::api::certificates::v1::CertificateSigningRequest) -> bool,
) -> k8s_openapi::api::certificates::v1::CertificateSigningRequest {
    for _ in 0..100 {
        let c = csrs.get(name).await.unwrap();
        if done(&c) {
            return c;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!(
        "CSR {name} did not get there in 10s: {:?}",
        csrs.get(name).await.unwrap()
    );
}
