//! The host's processes as `/proc` shows them: pid, command line, and
//! whether it still runs (a zombie, killed and not yet reaped, does not).
//! For finding a component by its command line (`flotilla chaos`, a
//! fleet's leftover etcd, tests).

/// One process.
#[derive(Clone, Debug)]
pub struct HostProcess {
    pub pid: i32,
    /// Its command line, the program first.
    pub args: Vec<String>,
    /// False for a zombie.
    pub running: bool,
}

impl HostProcess {
    /// Its first argument after the program (`flotilla`'s subcommand).
    pub fn subcommand(&self) -> &str {
        self.args.get(1).map(String::as_str).unwrap_or_default()
    }

    /// Whether the program's file name is `name`.
    pub fn is_program(&self, name: &str) -> bool {
        self.args
            .first()
            .is_some_and(|a| a.rsplit('/').next() == Some(name))
    }

    /// Whether `flag` is followed by `value` on its command line.
    pub fn has_flag(&self, flag: &str, value: &str) -> bool {
        self.args.windows(2).any(|w| w[0] == flag && w[1] == value)
    }

    /// Whether an argument is a path under `dir` (or `dir` itself).
    pub fn names_path_under(&self, dir: &std::path::Path) -> bool {
        let dir = dir.display().to_string();
        self.args
            .iter()
            .any(|a| a == &dir || a.starts_with(&format!("{dir}/")))
    }
}

/// Every process this process can see (zombies included, marked).
pub fn all() -> Vec<HostProcess> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_string_lossy().parse::<i32>().ok()?;
            let raw = std::fs::read(e.path().join("cmdline")).ok()?;
            let args: Vec<String> = raw
                .split(|b| *b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            let state = stat.rsplit_once(") ").and_then(|(_, r)| r.chars().next());
            Some(HostProcess {
                pid,
                args,
                running: !matches!(state, Some('Z' | 'X' | 'x')),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_found_with_its_command_line() {
        let me = std::process::id() as i32;
        let found = all()
            .into_iter()
            .find(|p| p.pid == me)
            .expect("this process");
        assert!(found.running);
        assert_eq!(found.args.first(), std::env::args().next().as_ref());
        let p = HostProcess {
            pid: 1,
            args: ["/usr/bin/etcd", "--data-dir", "/tmp/f/etcd"]
                .map(String::from)
                .to_vec(),
            running: true,
        };
        assert!(p.is_program("etcd"));
        assert!(p.has_flag("--data-dir", "/tmp/f/etcd"));
        assert!(p.names_path_under(std::path::Path::new("/tmp/f")));
        assert!(!p.names_path_under(std::path::Path::new("/tmp/fo")));
        assert_eq!(p.subcommand(), "--data-dir");
    }
}
