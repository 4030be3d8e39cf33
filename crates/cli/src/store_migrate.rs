//! `flotilla store migrate`: copies a control plane's objects from one
//! store to another (embedded to etcd, or back), then checks that the
//! target holds every object, byte for byte, and nothing else. Revisions
//! are the target's own: clients relist after the move, as after any
//! restore of etcd.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use flotilla_store::{EtcdOptions, EtcdStore, ListOptions, SqliteOptions, SqliteStore, Store};

#[derive(clap::Subcommand)]
pub enum StoreCommand {
    /// Copy every object from one store to an empty other, and check it.
    Migrate(MigrateArgs),
}

#[derive(clap::Args)]
pub struct MigrateArgs {
    /// The store to copy from: embedded:DATA_DIR or etcd:URL[,URL...]
    #[arg(long)]
    from: String,
    /// The store to copy into, which must be empty: embedded:DATA_DIR or etcd:URL[,URL...]
    #[arg(long)]
    to: String,
    /// The key prefix in etcd, for either side
    #[arg(long, default_value = flotilla_store::DEFAULT_ETCD_PREFIX)]
    etcd_prefix: String,
}

enum Spec {
    Embedded(PathBuf),
    Etcd(Vec<String>),
}

fn parse(spec: &str) -> anyhow::Result<Spec> {
    match spec.split_once(':') {
        Some(("embedded", dir)) if !dir.is_empty() => Ok(Spec::Embedded(PathBuf::from(dir))),
        Some(("etcd", urls)) if !urls.is_empty() => {
            Ok(Spec::Etcd(urls.split(',').map(str::to_string).collect()))
        }
        _ => bail!(
            "cannot read store {spec:?}: write embedded:DATA_DIR or etcd:URL[,URL...] (e.g. etcd:http://127.0.0.1:2379)"
        ),
    }
}

async fn open(spec: &Spec, prefix: &str) -> anyhow::Result<Arc<dyn Store>> {
    Ok(match spec {
        Spec::Embedded(dir) => {
            if !dir.join("flotilla.db").exists() {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("cannot create {}", dir.display()))?;
            }
            SqliteStore::open(
                dir,
                SqliteOptions {
                    compaction_interval: None,
                    ..SqliteOptions::default()
                },
            )
            .with_context(|| {
                format!(
                    "cannot open the embedded store in {} (stop the control plane using it first)",
                    dir.display()
                )
            })?
        }
        Spec::Etcd(endpoints) => EtcdStore::open(EtcdOptions {
            endpoints: endpoints.clone(),
            prefix: prefix.to_string(),
            compaction_interval: None,
            ..EtcdOptions::default()
        })
        .await
        .map_err(|e| anyhow::anyhow!("cannot reach etcd at {}: {e}", endpoints.join(",")))?,
    })
}

pub async fn run(cmd: StoreCommand) -> anyhow::Result<()> {
    let StoreCommand::Migrate(args) = cmd;
    let (from, to) = (parse(&args.from)?, parse(&args.to)?);
    let source = open(&from, &args.etcd_prefix).await?;
    let target = open(&to, &args.etcd_prefix).await?;
    let everything = ListOptions::default();
    let present = target.list("/", &everything)?.items.len();
    if present > 0 {
        bail!(
            "{} already holds {present} objects: migrate into an empty store (a new etcd prefix or data dir)",
            args.to
        );
    }
    let snapshot = source.list("/", &everything)?;
    for kv in &snapshot.items {
        target
            .create(&kv.key, kv.value.clone())
            .await
            .with_context(|| format!("cannot copy {}", kv.key))?;
    }
    // The check: the same keys with the same bytes, read back through the
    // target's own read path.
    let copied = target.list("/", &everything)?.items;
    if copied.len() != snapshot.items.len() {
        bail!(
            "check failed: {} objects in the source at revision {}, {} in the target",
            snapshot.items.len(),
            snapshot.revision,
            copied.len()
        );
    }
    for (a, b) in snapshot.items.iter().zip(&copied) {
        if a.key != b.key || a.value != b.value {
            bail!("check failed: {} differs in the target", a.key);
        }
    }
    println!(
        "copied {} objects from {} (revision {}) to {}; all {} read back identical",
        copied.len(),
        args.from,
        snapshot.revision,
        args.to,
        copied.len()
    );
    Ok(())
}
