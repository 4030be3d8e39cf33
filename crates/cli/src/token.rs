//! `flotilla token`: bearer tokens for identities other than the admin
//! (pull-mode agents, CI jobs), issued and revoked through the API as
//! upstream bootstrap-token Secrets.

use std::path::PathBuf;

use anyhow::{Context, bail};
use base64::Engine;
use flotilla_apiserver::auth::{self, BOOTSTRAP_TOKEN_PREFIX, BOOTSTRAP_TOKEN_TYPE};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};

use crate::kubeconfig;

#[derive(clap::Subcommand)]
pub enum Token {
    /// Issue a token and print it (`<id>.<secret>`). It authenticates as
    /// user `system:bootstrap:<id>`, in groups `system:bootstrappers`,
    /// those of --groups (and the agent group of --cluster), and
    /// `system:authenticated`. For a named user with a role, see
    /// `flotilla kubeconfig create`.
    Create(CreateArgs),
    /// List issued tokens (ids, groups, expiry; never the secrets).
    List(Common),
    /// Revoke a token by id; requests carrying it get 401 at once.
    Revoke {
        /// The token id (the part before the dot).
        id: String,
        #[command(flatten)]
        common: Common,
    },
}

#[derive(clap::Args)]
pub struct Common {
    /// Kubeconfig of the server (an admin's).
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: PathBuf,
}

#[derive(clap::Args)]
pub struct CreateArgs {
    #[command(flatten)]
    common: Common,
    /// What the token is for, shown by `token list`.
    #[arg(long, default_value = "")]
    description: String,
    /// Groups the token's identity (user system:bootstrap:<id>) belongs
    /// to, besides system:bootstrappers and system:authenticated.
    #[arg(long, value_delimiter = ',')]
    groups: Vec<String>,
    /// A token for the pull-mode agent of this cluster: it can reach that
    /// cluster's Cluster object, Works and Lease, and nothing else.
    #[arg(long)]
    cluster: Option<String>,
    /// Lifetime, e.g. 24h or 30m; without it the token lasts until revoked.
    #[arg(long)]
    ttl: Option<jiff::SignedDuration>,
    /// Also write a kubeconfig for the new identity here.
    #[arg(long)]
    write_kubeconfig: Option<PathBuf>,
}

pub async fn run(cmd: Token) -> anyhow::Result<()> {
    match cmd {
        Token::Create(args) => {
            println!("{}", create(args).await?);
            Ok(())
        }
        Token::List(common) => list(common).await,
        Token::Revoke { id, common } => revoke(&id, common).await,
    }
}

async fn secrets(common: &Common) -> anyhow::Result<Api<Secret>> {
    let client = kubeconfig::client(&common.kubeconfig).await?;
    Ok(Api::namespaced(client, "kube-system"))
}

/// Issues the pull-mode agent token of `cluster` (as `token create
/// --cluster`) and writes its kubeconfig to `write_kubeconfig`.
pub async fn create_agent_kubeconfig(
    admin_kubeconfig: PathBuf,
    cluster: &str,
    write_kubeconfig: PathBuf,
) -> anyhow::Result<()> {
    create(CreateArgs {
        common: Common {
            kubeconfig: admin_kubeconfig,
        },
        description: String::new(),
        groups: Vec::new(),
        cluster: Some(cluster.to_string()),
        ttl: None,
        write_kubeconfig: Some(write_kubeconfig),
    })
    .await
    .map(drop)
}

/// Issues a token; returns it.
async fn create(mut args: CreateArgs) -> anyhow::Result<String> {
    if let Some(cluster) = &args.cluster {
        flotilla_federation::join::valid_name(cluster).context("--cluster")?;
        args.groups
            .push(flotilla_federation::agents::agent_group(cluster));
        if args.description.is_empty() {
            args.description = format!("pull-mode agent of cluster {cluster}");
        }
    }
    for g in &args.groups {
        if !g.starts_with("system:bootstrappers:") && g.starts_with("system:") {
            bail!(
                "group {g:?} is reserved: pick a name outside system: (or under system:bootstrappers:)"
            );
        }
    }
    let api = secrets(&args.common).await?;
    if args.cluster.is_some() {
        // Where the agent's Lease will live; the agent cannot create it.
        let client = kubeconfig::client(&args.common.kubeconfig).await?;
        flotilla_federation::join::ensure_cluster_namespace(&client)
            .await
            .context(
                "cannot create the karmada-cluster namespace (is this an admin kubeconfig?)",
            )?;
    }
    let id = auth::random_token_part(6);
    let secret = auth::random_token_part(16);
    let mut data = vec![
        ("token-id", id.clone()),
        ("token-secret", secret.clone()),
        ("usage-bootstrap-authentication", "true".into()),
        ("description", args.description.clone()),
    ];
    if !args.groups.is_empty() {
        data.push(("auth-extra-groups", args.groups.join(",")));
    }
    if let Some(ttl) = args.ttl {
        let expires = jiff::Timestamp::now()
            .checked_add(ttl)
            .context("--ttl is too large")?;
        data.push(("expiration", expires.to_string()));
    }
    let object = Secret {
        metadata: ObjectMeta {
            name: Some(format!("{BOOTSTRAP_TOKEN_PREFIX}{id}")),
            ..Default::default()
        },
        type_: Some(BOOTSTRAP_TOKEN_TYPE.into()),
        string_data: Some(data.into_iter().map(|(k, v)| (k.to_string(), v)).collect()),
        ..Default::default()
    };
    api.create(&PostParams::default(), &object)
        .await
        .context("cannot create the token's Secret (is this an admin kubeconfig?)")?;
    let token = format!("{id}.{secret}");
    if let Some(path) = &args.write_kubeconfig {
        let admin = kube::config::Kubeconfig::read_from(&args.common.kubeconfig)?;
        let cluster = admin
            .clusters
            .first()
            .and_then(|c| c.cluster.as_ref())
            .context("the kubeconfig names no cluster")?;
        let ca = cluster
            .certificate_authority_data
            .as_deref()
            .map(|b| base64::engine::general_purpose::STANDARD.decode(b))
            .transpose()
            .context("the kubeconfig's certificate-authority-data is not base64")?
            .unwrap_or_default();
        let server = cluster.server.clone().unwrap_or_default();
        let rendered =
            kubeconfig::render(&server, "flotilla", &String::from_utf8_lossy(&ca), &token);
        kubeconfig::write_atomically(path, &rendered)?;
    }
    Ok(token)
}

async fn list(common: Common) -> anyhow::Result<()> {
    let api = secrets(&common).await?;
    let items = api
        .list(&ListParams::default().fields(&format!("type={BOOTSTRAP_TOKEN_TYPE}")))
        .await?
        .items;
    println!("{:<8} {:<28} {:<30} DESCRIPTION", "ID", "EXPIRES", "GROUPS");
    for s in items {
        let field = |k: &str| {
            s.data
                .as_ref()
                .and_then(|d| d.get(k))
                .map(|b| String::from_utf8_lossy(&b.0).into_owned())
                .unwrap_or_default()
        };
        let expires = field("expiration");
        println!(
            "{:<8} {:<28} {:<30} {}",
            field("token-id"),
            if expires.is_empty() {
                "never".into()
            } else {
                expires
            },
            field("auth-extra-groups"),
            field("description")
        );
    }
    Ok(())
}

async fn revoke(id: &str, common: Common) -> anyhow::Result<()> {
    let api = secrets(&common).await?;
    let name = format!("{BOOTSTRAP_TOKEN_PREFIX}{id}");
    match api.delete(&name, &DeleteParams::default()).await {
        Ok(_) => {
            println!("token {id} revoked");
            Ok(())
        }
        Err(kube::Error::Api(s)) if s.code == 404 => {
            bail!("no token with id {id:?} (see `flotilla token list`)")
        }
        Err(e) => Err(e.into()),
    }
}
