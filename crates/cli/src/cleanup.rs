//! `flotilla cleanup`: removes what Flotilla components on this host made
//! and left behind when they were killed (SIGKILL, a crash, a power cut of
//! the process), whatever became of their data dirs: network namespaces
//! (with their links, TUN devices and nftables tables), cgroups and the
//! processes in them. It reads the per-host record
//! (`flotilla_host::record`); what a running component owns is left.

use clap::Args;
use flotilla_host::record;

#[derive(Args)]
pub struct CleanupArgs {
    /// List what would be removed, and remove nothing.
    #[arg(long)]
    dry_run: bool,
    /// Also remove `flt-` network namespaces that no entry of the record
    /// covers (made by a Flotilla from before the record, or whose entry
    /// was lost). Only when no Flotilla test or fleet is starting on this
    /// host: such a namespace may be one being made.
    #[arg(long)]
    unrecorded: bool,
}

pub async fn run(args: CleanupArgs) -> anyhow::Result<()> {
    let verb = if args.dry_run {
        "would remove"
    } else {
        "removed"
    };
    let mut removed = 0;
    for left in record::sweep_stale(args.dry_run).await {
        let made = &left.made;
        let owner = if left.record.data_dir.is_empty() {
            format!("pid {}", left.record.pid)
        } else {
            format!("pid {}, data dir {}", left.record.pid, left.record.data_dir)
        };
        println!(
            "{} {} ({owner}, gone): {verb} {} network namespaces, {} cgroups, {} processes",
            left.record.what,
            left.record.prefix,
            made.namespaces.len(),
            made.cgroups.len(),
            made.processes.len()
        );
        for ns in &made.namespaces {
            println!("  netns   {ns}");
        }
        for dir in &made.cgroups {
            println!("  cgroup  {}", dir.display());
        }
        for pid in &made.processes {
            println!("  process {pid}");
        }
        removed += 1;
    }
    let unrecorded = record::unrecorded_namespaces();
    if !unrecorded.is_empty() {
        if args.unrecorded {
            println!(
                "{} network namespaces no entry covers: {verb} them",
                unrecorded.len()
            );
        } else {
            println!(
                "{} network namespaces named like Flotilla's that no entry covers (left; --unrecorded removes them):",
                unrecorded.len()
            );
        }
        for ns in &unrecorded {
            println!("  netns   {ns}");
            if args.unrecorded && !args.dry_run {
                flotilla_host::remove_netns(ns).await;
            }
        }
    }
    let live: Vec<_> = record::records()
        .into_iter()
        .filter(|r| r.owner_alive())
        .collect();
    for r in &live {
        if r.in_another_pid_namespace() {
            println!(
                "{} {} belongs to a process of another PID namespace ({}): left",
                r.what, r.prefix, r.pid_namespace
            );
        } else {
            println!(
                "{} {} is in use (pid {} runs): left",
                r.what, r.prefix, r.pid
            );
        }
    }
    if removed == 0 && unrecorded.is_empty() {
        println!(
            "nothing left behind ({} record: {})",
            if live.is_empty() {
                "empty"
            } else {
                "only running components in the"
            },
            record::dir().display()
        );
    }
    Ok(())
}
