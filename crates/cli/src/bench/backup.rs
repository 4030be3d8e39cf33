//! `flotilla bench backup`: the file-system backup's data path alone, in
//! this process: a directory of incompressible files is backed up into a
//! filesystem storage location (each file hashed and stored by content),
//! backed up again unchanged (every file already stored), and restored
//! into an empty directory (each file checked against its checksum); each
//! against `cp -r` of the same directory on the same disk.

use std::path::Path;
use std::time::Instant;

use anyhow::Context;
use flotilla_backup::location::Location;
use flotilla_backup::volumes;
use serde_json::json;

#[derive(clap::Args)]
pub struct BackupArgs {
    /// MiB of data in the volume.
    #[arg(long, default_value_t = 256)]
    mib: usize,
    /// Files it is split into.
    #[arg(long, default_value_t = 64)]
    files: usize,
    #[command(flatten)]
    report: crate::bench::report::ReportArgs,
}

/// Fills `dir` with `files` files of `bytes` in all that do not compress
/// or repeat.
fn fill(dir: &Path, bytes: usize, files: usize) -> anyhow::Result<()> {
    let per_file = bytes / files.max(1);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in 0..files.max(1) {
        let mut data = Vec::with_capacity(per_file);
        while data.len() < per_file {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            data.extend_from_slice(&x.to_le_bytes());
        }
        data.truncate(per_file);
        let sub = dir.join(format!("part-{}", i % 8));
        std::fs::create_dir_all(&sub)?;
        std::fs::write(sub.join(format!("file-{i}.bin")), data)?;
    }
    Ok(())
}

fn mib_per_s(bytes: u64, seconds: f64) -> f64 {
    bytes as f64 / (1 << 20) as f64 / seconds.max(1e-9)
}

pub async fn run(args: BackupArgs) -> anyhow::Result<()> {
    let out = crate::bench::report::Reporter::from_args("backup", &args.report);
    out.line(crate::bench::report::machine_line());
    let work = tempfile::tempdir().context("cannot make a temporary directory")?;
    let volume = work.path().join("volume");
    fill(&volume, args.mib << 20, args.files)?;
    let bytes = (args.mib << 20) as u64;

    let started = Instant::now();
    let status = std::process::Command::new("cp")
        .arg("-r")
        .arg(&volume)
        .arg(work.path().join("copy"))
        .status()
        .context("cannot run cp")?;
    anyhow::ensure!(status.success(), "cp -r failed");
    let cp = started.elapsed().as_secs_f64();

    let location = Location::of(
        &json!({"provider": "filesystem", "objectStorage": {"bucket": "bench"},
                "config": {"path": work.path().join("storage").to_string_lossy()}}),
        None,
    )?;
    let started = Instant::now();
    let (snapshot, stored, _) = volumes::back_up(&location, "bench", &volume).await?;
    let backup = started.elapsed().as_secs_f64();
    let started = Instant::now();
    volumes::back_up(&location, "bench", &volume).await?;
    let again = started.elapsed().as_secs_f64();
    let target = work.path().join("restored");
    std::fs::create_dir_all(&target)?;
    let started = Instant::now();
    let restored = volumes::restore(&location, "bench", &snapshot, &target).await?;
    let restore = started.elapsed().as_secs_f64();
    anyhow::ensure!(stored == bytes && restored == bytes, "bytes lost");

    let figure =
        |seconds: f64| json!({"seconds": seconds, "mib_per_second": mib_per_s(bytes, seconds)});
    for (what, seconds) in [
        ("cp -r", cp),
        ("backup", backup),
        ("backup again (unchanged)", again),
        ("restore", restore),
    ] {
        out.line(format!(
            "{what}: {} MiB in {seconds:.2} s, {:.0} MiB/s ({:.1}x cp -r's time)",
            args.mib,
            mib_per_s(bytes, seconds),
            seconds / cp.max(1e-9)
        ));
    }
    let report = out.document(
        "filesystem",
        json!({"mib": args.mib, "files": args.files}),
        json!({
            "cp": figure(cp),
            "backup": figure(backup),
            "backup_unchanged": figure(again),
            "restore": figure(restore),
        }),
    );
    out.finish(&report)
}
