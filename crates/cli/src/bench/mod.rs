//! `flotilla bench`: performance measurements (never timed tests). The
//! server runs as its own process so its peak RSS is its own. One module
//! a benchmark; what they share (the server process, waiting for its
//! client, percentiles, peak RSS) is in `harness`, the reports in `report`.

mod apiserver;
mod authz;
mod backup;
mod fabric;
pub(crate) mod harness;
mod member;
mod netns;
mod peering;
mod propagation;
mod queues;
pub(crate) mod report;
mod store;

#[derive(clap::Subcommand)]
pub enum Bench {
    /// Create throughput, list latency, watch fan-out and peak RSS of `flotilla apiserver`.
    Apiserver(apiserver::ApiserverArgs),
    /// Time to run pods, memory and idle CPU of `flotilla member`, one big
    /// member or many small ones side by side.
    Member(member::MemberArgs),
    /// The network fabric: join to connected, full mesh, recovery after
    /// an underlay outage, gateway memory, tunnel throughput and latency
    /// (netns members; needs root).
    Fabric(fabric::FabricArgs),
    /// Distribution latency, scheduling throughput, memory and restart
    /// convergence of `flotilla controlplane` with simulated members,
    /// against writing the same objects to the members directly.
    Propagation(propagation::PropagationArgs),
    /// Peering: `flotilla peer` to a Ready virtual node, pod creation to
    /// Running through the provider (p50/p99), the consumer's memory per
    /// offloaded pod.
    Peering(peering::PeeringArgs),
    /// What authorization adds to a read and a write (p50/p99), and how
    /// it grows with 10,000 bindings.
    Authz(authz::AuthzArgs),
    /// The embedded store's writer alone, in this process: writes a second
    /// with writers waiting on it, its groups synced by a publishing
    /// thread (as it runs) and by the writer itself.
    Store(store::StoreArgs),
    /// The file-system backup's data path: backup, unchanged backup and
    /// restore of a volume's files, each against `cp -r`.
    Backup(backup::BackupArgs),
    /// Compare two saved runs (`--json` output): each figure's ratio
    /// new/old, and whether it improved or regressed.
    Compare(report::CompareArgs),
}

pub async fn run(b: Bench) -> anyhow::Result<()> {
    match b {
        Bench::Apiserver(args) => apiserver::run(args).await,
        Bench::Member(args) => member::run(args).await,
        Bench::Fabric(args) => fabric::run(args).await,
        Bench::Peering(args) => peering::run(args).await,
        Bench::Authz(args) => authz::run(args).await,
        Bench::Store(args) => store::run(args).await,
        Bench::Propagation(args) => propagation::run(args).await,
        Bench::Backup(args) => backup::run(args).await,
        Bench::Compare(args) => report::compare(args),
    }
}
