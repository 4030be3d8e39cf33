//! `flotilla bench`: performance measurements (never timed tests).

#[derive(clap::Subcommand)]
pub enum Bench {}

pub async fn run(b: Bench) -> anyhow::Result<()> {
    match b {}
}
