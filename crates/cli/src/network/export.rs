//! `flotilla export service NAME -n NS`: exports a Service of a member
//! to the fleet (creates its ServiceExport there), as `subctl export
//! service` does, after checking the Service exists.

use anyhow::{Context, bail};
use flotilla_fabric::exports::export_resource;
use k8s_openapi::api::core::v1::Service;
use kube::api::{DynamicObject, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::inspect::HubArgs;

#[derive(clap::Subcommand)]
pub enum ExportCommand {
    /// Export a Service to every cluster of the fleet.
    Service(ServiceArgs),
}

#[derive(clap::Args)]
pub struct ServiceArgs {
    /// The Service's name.
    pub name: String,
    /// Its namespace.
    #[arg(short, long, default_value = "default")]
    pub namespace: String,
    /// The member's kubeconfig and context (its cluster, not the hub's).
    #[command(flatten)]
    pub cluster: HubArgs,
}

pub async fn run(cmd: ExportCommand) -> anyhow::Result<()> {
    let ExportCommand::Service(args) = cmd;
    let client = args.cluster.client().await?;
    let services: Api<Service> = Api::namespaced(client.clone(), &args.namespace);
    let service = services
        .get_opt(&args.name)
        .await
        .context("cannot reach the cluster")?;
    if service.is_none() {
        bail!(
            "service {}/{} not found in this cluster: create it first, or pick the member's context with --context",
            args.namespace,
            args.name
        );
    }
    let api: Api<DynamicObject> = Api::namespaced_with(client, &args.namespace, &export_resource());
    let mut export = DynamicObject::new(&args.name, &export_resource()).within(&args.namespace);
    export.data = json!({});
    match api.create(&PostParams::default(), &export).await {
        Ok(e) => println!(
            "Service exported successfully: serviceexport/{} in {}",
            e.name_any(),
            args.namespace
        ),
        Err(kube::Error::Api(e)) if e.code == 409 => {
            println!(
                "Service already exported: serviceexport/{} in {}",
                args.name, args.namespace
            )
        }
        Err(kube::Error::Api(e)) if e.code == 404 => bail!(
            "this cluster does not serve ServiceExports yet: join it to the fleet first (`flotilla join`), which installs the MCS API"
        ),
        Err(e) => return Err(e).context("cannot create the ServiceExport"),
    }
    Ok(())
}
