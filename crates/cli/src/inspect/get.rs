//! `flotilla get KIND [NAME]`: the objects in every member, with a CLUSTER
//! column, as `karmadactl get` shows them. Push members are reached with
//! the credentials the hub holds for them; a Pull member (which the hub
//! cannot reach) through the context of the same name in the kubeconfig,
//! as `flotilla up` writes it.

use anyhow::bail;
use flotilla_federation::api::{Cluster, labels};
use flotilla_federation::members::Members;
use futures::future::join_all;
use kube::api::{DynamicObject, ListParams};
use kube::{Api, ResourceExt};
use serde_json::Value;

use super::resolve::{self, Resolved};
use super::table::{Cell, Table};
use super::{HubArgs, hub_error};
use flotilla_federation::frontends;

#[derive(clap::Args)]
pub struct GetArgs {
    /// The kind, as kubectl names it: deploy, deployments, configmaps, ...
    pub kind: String,
    /// Only the object of this name.
    pub name: Option<String>,
    /// The namespace [default: default]
    #[arg(short, long)]
    pub namespace: Option<String>,
    /// Every namespace.
    #[arg(short = 'A', long, conflicts_with = "namespace")]
    pub all_namespaces: bool,
    /// Only these clusters (comma-separated) [default: every one]
    #[arg(short = 'C', long, value_delimiter = ',')]
    pub clusters: Vec<String>,
    #[command(flatten)]
    pub hub: HubArgs,
}

/// What one member answered: its table, or why there is none.
enum Answer {
    Table(Value),
    NotFound,
    Unreachable(String),
}

pub async fn run(args: GetArgs) -> anyhow::Result<()> {
    let hub = args.hub.client().await?;
    let mut clusters = Api::<Cluster>::all(hub.clone())
        .list(&ListParams::default())
        .await
        .map_err(hub_error)?
        .items;
    clusters.retain(|c| args.clusters.is_empty() || args.clusters.contains(&c.name_any()));
    clusters.sort_by_key(|c| c.name_any());
    if clusters.is_empty() {
        bail!("no such clusters: `flotilla clusters` lists the fleet");
    }
    let resolved = resolve::resource(&hub, &args.kind).await?;
    if args.all_namespaces && args.name.is_some() && resolved.namespaced {
        bail!("a resource cannot be retrieved by name across all namespaces: pass -n NAMESPACE");
    }
    let namespace = match (resolved.namespaced, args.all_namespaces) {
        (false, _) | (true, true) => None,
        (true, false) => Some(args.namespace.clone().unwrap_or_else(|| "default".into())),
    };
    if frontends::listed_from_hub(&resolved.ar.group) {
        let endpoints: Vec<(String, String)> = clusters
            .iter()
            .map(|c| {
                (
                    c.name_any(),
                    c.spec.api_endpoint.clone().unwrap_or_default(),
                )
            })
            .collect();
        return from_hub(&hub, &resolved, namespace.as_deref(), &args, &endpoints).await;
    }
    let path = path(&resolved, namespace.as_deref(), args.name.as_deref());
    let members = Members::new(hub.clone());
    let answers = join_all(clusters.iter().map(|c| ask(&args.hub, &members, c, &path))).await;

    let mut table: Option<Table> = None;
    let mut found = false;
    for (cluster, answer) in clusters.iter().zip(answers) {
        let name = cluster.name_any();
        let t = match answer {
            Answer::Table(t) => t,
            Answer::NotFound => continue,
            Answer::Unreachable(why) => {
                eprintln!("{name}: {why}");
                continue;
            }
        };
        let columns: Vec<(usize, String)> = t["columnDefinitions"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
            .filter(|(_, c)| c["priority"].as_i64().unwrap_or(0) == 0)
            .map(|(i, c)| (i, c["name"].as_str().unwrap_or_default().to_uppercase()))
            .collect();
        let table = table.get_or_insert_with(|| {
            let mut headers = vec!["CLUSTER".to_string()];
            if args.all_namespaces && resolved.namespaced {
                headers.push("NAMESPACE".into());
            }
            headers.extend(columns.iter().map(|(_, n)| n.clone()));
            headers.push("ADOPTION".into());
            Table::new(headers)
        });
        for row in t["rows"].as_array().into_iter().flatten() {
            found = true;
            let meta = &row["object"]["metadata"];
            let mut cells: Vec<Cell> = vec![name.clone().into()];
            if args.all_namespaces && resolved.namespaced {
                cells.push(meta["namespace"].as_str().unwrap_or_default().into());
            }
            for (i, _) in &columns {
                cells.push(cell_text(&row["cells"][*i]).into());
            }
            let managed = meta["labels"][labels::MANAGED].as_str() == Some("true");
            cells.push(if managed { "Y" } else { "N" }.into());
            table.row(cells);
        }
    }
    match (table, found) {
        (Some(t), true) => super::emit(&t.for_stdout())?,
        _ => {
            let what = format!(
                "{}{}",
                resolved.ar.plural,
                if resolved.ar.group.is_empty() {
                    String::new()
                } else {
                    format!(".{}", resolved.ar.group)
                }
            );
            match &args.name {
                Some(n) => bail!("{what} \"{n}\" not found in any cluster"),
                None => eprintln!(
                    "No {what} found in any cluster{}.",
                    namespace.map_or(String::new(), |ns| format!(" in namespace {ns}"))
                ),
            }
        }
    }
    Ok(())
}

/// A front end's objects, which live on the hub: one row per cluster
/// each goes to (a placement or a set, which only decides, has one row
/// without a cluster).
async fn from_hub(
    hub: &kube::Client,
    r: &Resolved,
    namespace: Option<&str>,
    args: &GetArgs,
    endpoints: &[(String, String)],
) -> anyhow::Result<()> {
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(hub.clone(), ns, &r.ar),
        None => Api::all_with(hub.clone(), &r.ar),
    };
    let objects = match &args.name {
        Some(n) => match api.get_opt(n).await.map_err(hub_error)? {
            Some(o) => vec![o],
            None => bail!("{} \"{n}\" not found on the hub", r.ar.plural),
        },
        None => {
            api.list(&ListParams::default())
                .await
                .map_err(hub_error)?
                .items
        }
    };
    let mut headers = vec!["CLUSTER"];
    if namespace.is_none() && r.namespaced {
        headers.push("NAMESPACE");
    }
    headers.extend(["NAME", "STATUS"]);
    let mut table = Table::new(headers);
    for o in &objects {
        let value = serde_json::to_value(o)?;
        let mut rows = frontends::placements(&value, endpoints);
        if rows.is_empty() {
            rows.push(frontends::Row {
                cluster: "-".into(),
                status: String::new(),
            });
        }
        for row in rows {
            if !args.clusters.is_empty() && !args.clusters.contains(&row.cluster) {
                continue;
            }
            let mut cells: Vec<Cell> = vec![row.cluster.into()];
            if namespace.is_none() && r.namespaced {
                cells.push(o.namespace().unwrap_or_default().into());
            }
            cells.extend([o.name_any().into(), row.status.into()]);
            table.row(cells);
        }
    }
    if table.is_empty() {
        eprintln!(
            "No {} found{}.",
            r.ar.plural,
            namespace.map_or(String::new(), |ns| format!(" in namespace {ns}"))
        );
        return Ok(());
    }
    super::emit(&table.for_stdout())
}

/// The request path for `r` (one object when `name` is given).
fn path(r: &Resolved, namespace: Option<&str>, name: Option<&str>) -> String {
    let mut p = if r.ar.group.is_empty() {
        format!("/api/{}", r.ar.version)
    } else {
        format!("/apis/{}/{}", r.ar.group, r.ar.version)
    };
    if let Some(ns) = namespace {
        p.push_str(&format!("/namespaces/{ns}"));
    }
    p.push_str(&format!("/{}", r.ar.plural));
    if let Some(n) = name {
        p.push_str(&format!("/{n}"));
    }
    p.push_str("?includeObject=Metadata");
    p
}

fn cell_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "<none>".into(),
        other => other.to_string(),
    }
}

/// Asks one member for its table of `path`.
async fn ask(hub_args: &HubArgs, members: &Members, cluster: &Cluster, path: &str) -> Answer {
    let client = match super::member_client(Some(hub_args), members, cluster).await {
        Ok(c) => c,
        Err(why) => return Answer::Unreachable(why),
    };
    let request = match http::Request::get(path)
        .header(
            http::header::ACCEPT,
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
        )
        .body(Vec::new())
    {
        Ok(r) => r,
        Err(e) => return Answer::Unreachable(e.to_string()),
    };
    match client.request::<Value>(request).await {
        Ok(table) => Answer::Table(table),
        Err(kube::Error::Api(s)) if s.code == 404 => Answer::NotFound,
        Err(e) => Answer::Unreachable(format!("cannot reach it: {e}")),
    }
}
