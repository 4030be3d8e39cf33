//! `flotilla underlay`: the network gateways meet on, standing in for
//! the internet between clusters (made by `flotilla up` and the tests).

use anyhow::Context;
use flotilla_fabric::underlay;
use ipnet::Ipv4Net;

#[derive(clap::Subcommand)]
pub enum UnderlayCommand {
    /// Make an underlay (a network namespace with a bridge) over CIDR.
    Create {
        name: String,
        #[arg(long, default_value = "100.64.0.0/16")]
        cidr: Ipv4Net,
    },
    /// Remove an underlay; every gateway's link to it goes with it.
    Delete { name: String },
    /// Cut the underlay (its bridge stops forwarding), as a WAN outage.
    Cut { name: String },
    /// Restore a cut underlay.
    Restore { name: String },
}

pub async fn run(cmd: UnderlayCommand) -> anyhow::Result<()> {
    match cmd {
        UnderlayCommand::Create { name, cidr } => {
            underlay::create(&name, cidr).await.with_context(|| {
                format!("cannot make the underlay {name} (run as root, with iproute2)")
            })?;
            println!("underlay {name} ({cidr})");
        }
        UnderlayCommand::Delete { name } => {
            underlay::delete(&name).await;
            println!("underlay {name} removed");
        }
        UnderlayCommand::Cut { name } => {
            underlay::set_up(&name, false)
                .await
                .with_context(|| format!("cannot cut the underlay {name}"))?;
            println!("underlay {name} cut");
        }
        UnderlayCommand::Restore { name } => {
            underlay::set_up(&name, true)
                .await
                .with_context(|| format!("cannot restore the underlay {name}"))?;
            println!("underlay {name} restored");
        }
    }
    Ok(())
}
