//! `flotilla kubeconfig create`: a kubeconfig for a named user, with a
//! client certificate from the cluster CA obtained the way upstream's
//! users get one: a key made here (it never leaves this machine), a
//! CertificateSigningRequest for `kubernetes.io/kube-apiserver-client`
//! through the API, approved, and signed by the server's signer; then,
//! if asked, the binding that gives the user a role.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use flotilla_apiserver::x509_subject::{self, Signed};
use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition, CertificateSigningRequestSpec,
    CertificateSigningRequestStatus,
};
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::PostParams;

use crate::kubeconfig;

#[derive(clap::Subcommand)]
pub enum KubeconfigCommand {
    /// Write a kubeconfig for a named user: a client certificate (CN the
    /// user, one O per group) signed by the cluster CA through a
    /// CertificateSigningRequest, and optionally a role binding.
    Create(CreateArgs),
}

#[derive(clap::Args)]
pub struct CreateArgs {
    /// An admin's kubeconfig of the server (creates and approves the request).
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: PathBuf,
    /// The user name (the certificate's CN; what RBAC subjects name).
    #[arg(long)]
    user: String,
    /// Groups the user is in (one O each), comma-separated; besides
    /// system:authenticated, which every authenticated user is in.
    #[arg(long, value_delimiter = ',')]
    group: Vec<String>,
    /// Bind the user to this ClusterRole: cluster-wide (a
    /// ClusterRoleBinding), or in --namespace only (a RoleBinding).
    #[arg(long, conflicts_with = "role")]
    cluster_role: Option<String>,
    /// Bind the user to this Role of --namespace (a RoleBinding).
    #[arg(long, requires = "namespace")]
    role: Option<String>,
    /// The namespace of the binding, and the kubeconfig's default namespace.
    #[arg(long)]
    namespace: Option<String>,
    /// How long the certificate is valid, e.g. 24h or 30d (at least 10m;
    /// at most a year, and never past the CA) [default: a year].
    #[arg(long, value_parser = humantime::parse_duration)]
    expiration: Option<Duration>,
    /// Where to write the kubeconfig (mode 0600: it holds the private key).
    #[arg(long)]
    out: PathBuf,
}

pub async fn run(cmd: KubeconfigCommand) -> anyhow::Result<()> {
    match cmd {
        KubeconfigCommand::Create(args) => create(args).await,
    }
}

const SIGNER: &str = "kubernetes.io/kube-apiserver-client";
const WAIT: Duration = Duration::from_secs(30);

async fn create(args: CreateArgs) -> anyhow::Result<()> {
    if args.user.trim().is_empty() || args.user.trim() != args.user {
        bail!(
            "--user {:?} is not a user name: give a name without surrounding spaces, e.g. --user alice",
            args.user
        );
    }
    if args.user.starts_with("system:") {
        bail!(
            "--user {:?} is reserved for Kubernetes' own identities: pick a name outside system:",
            args.user
        );
    }
    for g in &args.group {
        if g.trim().is_empty() {
            bail!(
                "--group has an empty name: separate groups by single commas, e.g. --group dev,qa"
            );
        }
        if g.starts_with("system:") {
            bail!(
                "group {g:?} is reserved (system:masters would make the user an unrestricted admin): pick a name outside system:"
            );
        }
    }
    let expiration_seconds = match args.expiration {
        Some(d) if d < Duration::from_secs(600) => {
            bail!(
                "--expiration {d:?} is shorter than 10m, the least a certificate may last: pass e.g. --expiration 1h"
            )
        }
        Some(d) => Some(i32::try_from(d.as_secs()).unwrap_or(i32::MAX)),
        None => None,
    };
    let admin = kube::config::Kubeconfig::read_from(&args.kubeconfig).with_context(|| {
        format!(
            "cannot read the kubeconfig {} (pass an admin's with --kubeconfig)",
            args.kubeconfig.display()
        )
    })?;
    let target = kubeconfig::target_of(&admin)?;
    let client = kubeconfig::client(&args.kubeconfig).await?;
    if let Some(ns) = &args.namespace {
        // Before anything is created: a binding there must be possible.
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
        if namespaces.get_opt(ns).await.map_err(api_error)?.is_none() {
            bail!(
                "namespace {ns} does not exist: create it (kubectl create namespace {ns}) or pick another --namespace"
            );
        }
    }

    // The key is made here and stays here; the request carries its public half.
    let key = rcgen::KeyPair::generate().context("cannot generate a key")?;
    let request = rcgen::CertificateParams::default()
        .serialize_request(&key)
        .context("cannot make a certificate request")?;
    let request = x509_subject::with_subject(
        request.der(),
        &x509_subject::subject(&args.user, &args.group),
        Signed::Request,
        &key,
    )
    .context("cannot make a certificate request")?;
    let request_pem = x509_subject::pem("CERTIFICATE REQUEST", &request);

    let csrs: Api<CertificateSigningRequest> = Api::all(client.clone());
    let name = format!(
        "{}-{}",
        dns_label(&args.user),
        flotilla_apiserver::auth::random_token_part(5)
    );
    let csr = CertificateSigningRequest {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            ..Default::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(request_pem.into_bytes()),
            signer_name: SIGNER.into(),
            usages: Some(vec!["client auth".into(), "digital signature".into()]),
            expiration_seconds,
            ..Default::default()
        },
        status: None,
    };
    let mut created = csrs
        .create(&PostParams::default(), &csr)
        .await
        .map_err(api_error)
        .context("cannot create the CertificateSigningRequest (is --kubeconfig an admin's?)")?;
    let status = created
        .status
        .get_or_insert_with(CertificateSigningRequestStatus::default);
    status
        .conditions
        .get_or_insert_with(Vec::new)
        .push(CertificateSigningRequestCondition {
            type_: "Approved".into(),
            status: "True".into(),
            reason: Some("FlotillaApprove".into()),
            message: Some("This CSR was approved by flotilla kubeconfig create.".into()),
            ..Default::default()
        });
    csrs.replace_subresource("approval", &name, &PostParams::default(), &created)
        .await
        .map_err(api_error)
        .with_context(|| {
            format!(
                "cannot approve the CertificateSigningRequest {name} (is --kubeconfig an admin's?)"
            )
        })?;
    let certificate = wait_for_certificate(&csrs, &name).await?;

    let binding = bind(&client, &args).await?;

    let namespace = args.namespace.as_deref().unwrap_or("default");
    let rendered = kubeconfig::render_client_certificate(
        &target,
        &args.user,
        &certificate,
        &key.serialize_pem(),
        namespace,
    );
    kubeconfig::write_atomically(&args.out, &rendered)?;
    let groups = if args.group.is_empty() {
        "system:authenticated".to_string()
    } else {
        format!("{},system:authenticated", args.group.join(","))
    };
    println!(
        "wrote {}: user {}, groups {groups}, client certificate from CertificateSigningRequest {name}{}",
        args.out.display(),
        args.user,
        binding.map(|b| format!("; {b}")).unwrap_or_default()
    );
    Ok(())
}

/// Waits for the signer's certificate (PEM), or its refusal.
async fn wait_for_certificate(
    csrs: &Api<CertificateSigningRequest>,
    name: &str,
) -> anyhow::Result<String> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let csr = csrs
            .get(name)
            .await
            .map_err(api_error)
            .with_context(|| format!("cannot read the CertificateSigningRequest {name}"))?;
        let status = csr.status.unwrap_or_default();
        if let Some(certificate) = status.certificate.filter(|c| !c.0.is_empty()) {
            return String::from_utf8(certificate.0)
                .context("the issued certificate is not PEM text");
        }
        if let Some(c) = status
            .conditions
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.type_ == "Failed" || c.type_ == "Denied")
        {
            bail!(
                "the CertificateSigningRequest {name} was {}: {} (see kubectl describe csr {name})",
                if c.type_ == "Denied" {
                    "denied"
                } else {
                    "not signed"
                },
                c.message.unwrap_or_default()
            );
        }
        if tokio::time::Instant::now() > deadline {
            bail!(
                "the CertificateSigningRequest {name} got no certificate within {}s: does this server sign {SIGNER}? (Flotilla's does when it has its CA key in <data dir>/pki/ca.key)",
                WAIT.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Creates the binding asked for; says what it made.
async fn bind(client: &kube::Client, args: &CreateArgs) -> anyhow::Result<Option<String>> {
    let subject = Subject {
        kind: "User".into(),
        name: args.user.clone(),
        api_group: Some("rbac.authorization.k8s.io".into()),
        namespace: None,
    };
    let (role_kind, role) = match (&args.cluster_role, &args.role) {
        (Some(r), _) => ("ClusterRole", r.clone()),
        (None, Some(r)) => ("Role", r.clone()),
        (None, None) => return Ok(None),
    };
    let role_ref = RoleRef {
        api_group: "rbac.authorization.k8s.io".into(),
        kind: role_kind.into(),
        name: role.clone(),
    };
    let name = format!("{}-{}", dns_label(&args.user), dns_label(&role));
    let metadata = |namespace: Option<String>| ObjectMeta {
        name: Some(name.clone()),
        namespace,
        ..Default::default()
    };
    let conflict = |kind: &str, ns: Option<&str>| {
        let ns_flag = ns.map(|n| format!(" -n {n}")).unwrap_or_default();
        anyhow::anyhow!(
            "a {kind} {name} already exists for another role: delete it (kubectl delete {}{ns_flag} {name}) or bind by hand",
            kind.to_lowercase()
        )
    };
    match &args.namespace {
        Some(ns) => {
            let api: Api<RoleBinding> = Api::namespaced(client.clone(), ns);
            let binding = RoleBinding {
                metadata: metadata(Some(ns.clone())),
                role_ref: role_ref.clone(),
                subjects: Some(vec![subject.clone()]),
            };
            match api.create(&PostParams::default(), &binding).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    let mut existing = api.get(&name).await.map_err(api_error)?;
                    if existing.role_ref != role_ref {
                        return Err(conflict("RoleBinding", Some(ns)));
                    }
                    let subjects = existing.subjects.get_or_insert_with(Vec::new);
                    if !subjects.contains(&subject) {
                        subjects.push(subject);
                        api.replace(&name, &PostParams::default(), &existing)
                            .await
                            .map_err(api_error)?;
                    }
                }
                Err(e) => {
                    return Err(api_error(e).context(format!(
                        "cannot create the RoleBinding {name} in namespace {ns}"
                    )));
                }
            }
            Ok(Some(format!(
                "bound to {role_kind} {role} in namespace {ns} (RoleBinding {name})"
            )))
        }
        None => {
            let api: Api<ClusterRoleBinding> = Api::all(client.clone());
            let binding = ClusterRoleBinding {
                metadata: metadata(None),
                role_ref: role_ref.clone(),
                subjects: Some(vec![subject.clone()]),
            };
            match api.create(&PostParams::default(), &binding).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    let mut existing = api.get(&name).await.map_err(api_error)?;
                    if existing.role_ref != role_ref {
                        return Err(conflict("ClusterRoleBinding", None));
                    }
                    let subjects = existing.subjects.get_or_insert_with(Vec::new);
                    if !subjects.contains(&subject) {
                        subjects.push(subject);
                        api.replace(&name, &PostParams::default(), &existing)
                            .await
                            .map_err(api_error)?;
                    }
                }
                Err(e) => {
                    return Err(api_error(e)
                        .context(format!("cannot create the ClusterRoleBinding {name}")));
                }
            }
            Ok(Some(format!(
                "bound to ClusterRole {role} cluster-wide (ClusterRoleBinding {name})"
            )))
        }
    }
}

/// The server's own words for an API error, without kube-rs's debug dump.
fn api_error(e: kube::Error) -> anyhow::Error {
    match e {
        kube::Error::Api(s) => anyhow::anyhow!("{} ({})", s.message, s.code),
        e => anyhow::Error::new(e),
    }
}

/// `name` as a DNS label for object names: lowercase alphanumerics and
/// dashes (a user name may hold `@`, `:` or capitals).
fn dns_label(name: &str) -> String {
    let mapped: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    let trimmed: String = mapped.trim_matches('-').chars().take(40).collect();
    if trimmed.is_empty() {
        "user".into()
    } else {
        trimmed.trim_end_matches('-').to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_become_labels() {
        assert_eq!(dns_label("alice"), "alice");
        assert_eq!(dns_label("Alice@Example.com"), "alice-example-com");
        assert_eq!(dns_label(":::"), "user");
    }
}
