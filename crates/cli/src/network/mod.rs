//! The network fabric's commands: `flotilla gateway` (a member's
//! gateway process), `flotilla underlay` (the network gateways meet on),
//! `flotilla network show|verify|benchmark` (as `subctl` gives them) and
//! `flotilla export service`.

pub mod benchmark;
pub mod export;
pub mod gateway;
mod probe_pods;
pub mod review;
pub mod show;
pub mod underlay;
pub mod verify;

#[derive(clap::Subcommand)]
pub enum NetworkCommand {
    /// The fabric's connections, endpoints, gateways or networks.
    Show(show::ShowArgs),
    /// Check connectivity from one cluster to another, hop by hop
    /// (tunnel, pod, Service, ClusterSetIP, clusterset.local DNS).
    Verify(verify::VerifyArgs),
    /// Measure throughput and latency through the tunnel between two
    /// clusters, against a baseline within the first.
    Benchmark(benchmark::BenchmarkArgs),
}

pub async fn run(cmd: NetworkCommand) -> anyhow::Result<()> {
    match cmd {
        NetworkCommand::Show(args) => show::run(args).await,
        NetworkCommand::Verify(args) => verify::run(args).await,
        NetworkCommand::Benchmark(args) => benchmark::run(args).await,
    }
}
