//! `flotilla up` as a test runs it: a child process whose output goes to
//! a file, stopped with Ctrl-C (then killed) when dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// How long a fleet may take to be ready.
pub const WAIT: Duration = Duration::from_secs(120);

/// `flotilla up` running, its output going to a file.
pub struct Up {
    child: Child,
    out: PathBuf,
}

impl Up {
    pub fn start(dir: &Path) -> Up {
        Self::start_with(dir, &[])
    }

    pub fn start_with(dir: &Path, extra: &[&str]) -> Up {
        let out = dir.with_extension(format!("out-{}", rand_suffix()));
        let file = std::fs::File::create(&out).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_flotilla"))
            .args(["up", "--data-dir", dir.to_str().unwrap()])
            .args(extra)
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .stdin(Stdio::null())
            .spawn()
            .expect("start flotilla up");
        Up { child, out }
    }

    pub fn output(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }

    /// Waits until it says the fleet is ready; fails at once, with what it
    /// printed, if it exits first.
    pub fn wait_ready(&mut self) {
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            let output = self.output();
            if output.contains("The fleet is ready") {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("flotilla up exited ({status}) before the fleet was ready:\n{output}");
            }
            assert!(
                std::time::Instant::now() < deadline,
                "timed out waiting for the fleet to be ready:\n{output}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn signal(&self, signal: &str) {
        let pid = self.child.id().to_string();
        assert!(
            Command::new("kill")
                .args([signal, &pid])
                .status()
                .unwrap()
                .success()
        );
    }

    /// Waits for it to exit; its exit status.
    pub fn wait(&mut self) -> std::process::ExitStatus {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "flotilla up did not stop:\n{}",
                self.output()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        // Ctrl-C first, so that a netns fleet also removes its underlay;
        // then a kill, which stops its children too (their stdin closes).
        if let Ok(None) = self.child.try_wait() {
            let _ = Command::new("kill")
                .args(["-INT", &self.child.id().to_string()])
                .status();
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            while std::time::Instant::now() < deadline {
                if let Ok(Some(_)) = self.child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.out);
    }
}

fn rand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}
