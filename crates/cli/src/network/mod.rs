//! The network fabric's commands: `flotilla gateway` (a member's
//! gateway process), `flotilla underlay` (the network gateways meet on),
//! `flotilla network show|verify|benchmark` (as `subctl` gives them) and
//! `flotilla export service`.

pub mod export;
pub mod gateway;
pub mod show;
pub mod underlay;

#[derive(clap::Subcommand)]
pub enum NetworkCommand {
    /// The fabric's connections, endpoints, gateways or networks.
    Show(show::ShowArgs),
}

pub async fn run(cmd: NetworkCommand) -> anyhow::Result<()> {
    match cmd {
        NetworkCommand::Show(args) => show::run(args).await,
    }
}
