//! Reading an Application's source from a git repository on this
//! machine (a path or a `file://` URL) with gix: the commit a revision
//! names and the files of one directory of its tree. There is no network
//! transport: a remote repository is refused before anything is read.

use std::path::PathBuf;

/// Why a source could not be read.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error(
        "repository {0} is not local: only a path or a file:// URL on the control plane's host can be read"
    )]
    NotLocal(String),
    #[error("cannot open repository {url}: {message}")]
    Open { url: String, message: String },
    #[error("unable to resolve '{revision}' to a commit SHA in {url}: {message}")]
    Revision {
        url: String,
        revision: String,
        message: String,
    },
    #[error("app path does not exist: {path} (at revision {revision})")]
    NoPath { path: String, revision: String },
    #[error("app path is not a directory: {path}")]
    NotDirectory { path: String },
    #[error("cannot read {path} at {revision}: {message}")]
    Read {
        path: String,
        revision: String,
        message: String,
    },
}

/// One file of the directory: its path from the repository's root and
/// its content.
#[derive(Debug, Clone, PartialEq)]
pub struct File {
    pub path: String,
    pub data: Vec<u8>,
}

/// What a revision holds under a path.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// The commit's full SHA, as Argo CD reports a revision.
    pub revision: String,
    pub files: Vec<File>,
}

/// The local directory a repository URL names, or why it names none:
/// `file://` URLs and absolute paths are local; `http(s)://`, `ssh://`,
/// `git://` and scp-like `user@host:path` are not.
pub fn local_path(url: &str) -> Result<PathBuf, GitError> {
    if let Some(path) = url.strip_prefix("file://") {
        return Ok(PathBuf::from(path));
    }
    if url.contains("://") || (url.contains('@') && url.contains(':')) || !url.starts_with('/') {
        return Err(GitError::NotLocal(url.to_string()));
    }
    Ok(PathBuf::from(url))
}

/// Reads the files under `path` (recursively with `recurse`) at
/// `revision` (a branch, tag, commit or `HEAD`; empty means `HEAD`).
pub fn read(url: &str, revision: &str, path: &str, recurse: bool) -> Result<Snapshot, GitError> {
    let dir = local_path(url)?;
    let repo = gix::open(&dir).map_err(|e| GitError::Open {
        url: url.to_string(),
        message: e.to_string(),
    })?;
    let revision = if revision.is_empty() {
        "HEAD"
    } else {
        revision
    };
    let resolve = |message: String| GitError::Revision {
        url: url.to_string(),
        revision: revision.to_string(),
        message,
    };
    let id = repo
        .rev_parse_single(revision)
        .map_err(|e| resolve(e.to_string()))?;
    let commit = id
        .object()
        .and_then(|o| o.peel_to_commit())
        .map_err(|e| resolve(e.to_string()))?;
    let sha = commit.id.to_string();
    let read_error = |path: &str, message: String| GitError::Read {
        path: path.to_string(),
        revision: sha.clone(),
        message,
    };
    let root = commit.tree().map_err(|e| read_error("/", e.to_string()))?;
    let dir_path = path.trim_matches('/');
    let tree = if dir_path.is_empty() || dir_path == "." {
        root
    } else {
        let entry = root
            .lookup_entry_by_path(dir_path)
            .map_err(|e| read_error(dir_path, e.to_string()))?
            .ok_or_else(|| GitError::NoPath {
                path: dir_path.to_string(),
                revision: sha.clone(),
            })?;
        if !entry.mode().is_tree() {
            return Err(GitError::NotDirectory {
                path: dir_path.to_string(),
            });
        }
        repo.find_object(entry.object_id())
            .and_then(|o| o.peel_to_tree())
            .map_err(|e| read_error(dir_path, e.to_string()))?
    };
    let mut files = Vec::new();
    let mut pending = vec![(dir_path.to_string(), tree)];
    while let Some((prefix, tree)) = pending.pop() {
        for entry in tree.iter() {
            let entry = entry.map_err(|e| read_error(&prefix, e.to_string()))?;
            let name = entry.filename().to_string();
            let full = if prefix.is_empty() || prefix == "." {
                name
            } else {
                format!("{prefix}/{name}")
            };
            let mode = entry.mode();
            if mode.is_tree() {
                if recurse {
                    let sub = repo
                        .find_object(entry.object_id())
                        .and_then(|o| o.peel_to_tree())
                        .map_err(|e| read_error(&full, e.to_string()))?;
                    pending.push((full, sub));
                }
            } else if mode.is_blob() {
                let blob = repo
                    .find_blob(entry.object_id())
                    .map_err(|e| read_error(&full, e.to_string()))?;
                files.push(File {
                    path: full,
                    data: blob.data.clone(),
                });
            }
        }
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(Snapshot {
        revision: sha,
        files,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_paths_and_file_urls_are_local() {
        assert_eq!(
            local_path("file:///srv/git/apps").unwrap(),
            PathBuf::from("/srv/git/apps")
        );
        assert_eq!(
            local_path("/srv/git/apps").unwrap(),
            PathBuf::from("/srv/git/apps")
        );
        for remote in [
            "https://github.com/argoproj/argocd-example-apps.git",
            "ssh://git@example.com/apps.git",
            "git@github.com:argoproj/argocd-example-apps.git",
            "git://example.com/apps",
            "relative/path",
        ] {
            assert!(
                matches!(local_path(remote), Err(GitError::NotLocal(_))),
                "{remote}"
            );
        }
    }

    /// A repository made with the git CLI (`.ci/run` installs it).
    #[test]
    fn reads_a_directory_at_a_branch_a_tag_and_head() {
        let dir = tempfile::tempdir().unwrap();
        let git = |args: &[&str]| {
            std::process::Command::new("git")
                .args(args)
                .current_dir(dir.path())
                .env("GIT_AUTHOR_NAME", "t")
                .env("GIT_AUTHOR_EMAIL", "t@example.com")
                .env("GIT_COMMITTER_NAME", "t")
                .env("GIT_COMMITTER_EMAIL", "t@example.com")
                .output()
                .map(|o| o.status.success())
                .unwrap_or(false)
        };
        assert!(
            git(&["init", "-q", "-b", "main"]),
            "the git CLI makes this test's repository: install git"
        );
        std::fs::create_dir_all(dir.path().join("apps/sub")).unwrap();
        std::fs::write(dir.path().join("apps/cm.yaml"), "kind: ConfigMap\n").unwrap();
        std::fs::write(dir.path().join("apps/sub/x.yaml"), "kind: Secret\n").unwrap();
        assert!(git(&["add", "."]));
        assert!(git(&["commit", "-q", "-m", "one"]));
        assert!(git(&["tag", "v1"]));
        std::fs::write(dir.path().join("apps/cm.yaml"), "kind: ConfigMap # 2\n").unwrap();
        assert!(git(&["commit", "-q", "-am", "two"]));
        let url = format!("file://{}", dir.path().display());

        let head = read(&url, "HEAD", "apps", false).unwrap();
        assert_eq!(head.files.len(), 1);
        assert_eq!(head.files[0].path, "apps/cm.yaml");
        assert_eq!(head.files[0].data, b"kind: ConfigMap # 2\n");
        assert_eq!(head.revision.len(), 40);
        assert_eq!(read(&url, "main", "apps", false).unwrap(), head);
        assert_eq!(read(&url, "", "/apps/", false).unwrap(), head);

        let v1 = read(&url, "v1", "apps", true).unwrap();
        assert_ne!(v1.revision, head.revision);
        let paths: Vec<&str> = v1.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["apps/cm.yaml", "apps/sub/x.yaml"]);
        assert_eq!(
            read(&url, &v1.revision, "apps", false).unwrap().files[0].data,
            b"kind: ConfigMap\n"
        );

        assert!(matches!(
            read(&url, "nope", "apps", false),
            Err(GitError::Revision { .. })
        ));
        assert!(matches!(
            read(&url, "HEAD", "missing", false),
            Err(GitError::NoPath { .. })
        ));
        assert!(matches!(
            read(&url, "HEAD", "apps/cm.yaml", false),
            Err(GitError::NotDirectory { .. })
        ));
    }
}
