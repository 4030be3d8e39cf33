//! File-system backup of volume data, as Velero's node agent does it:
//! the files of the volumes a Backup takes (every claim-backed volume of
//! its pods with `defaultVolumesToFsBackup`, or those a pod names in
//! `backup.velero.io/backup-volumes`) are stored in the location by
//! content (`kopia/<namespace>/objects/<sha256>`, each stored once however
//! many backups hold it), with a snapshot listing them; a Restore writes
//! them back into the restored claim's volume, each checked against its
//! checksum. Volumes are directories on this host (`hostPath` or `local`
//! volumes, as the local provisioner makes them).

use std::path::{Path, PathBuf};

use futures::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::location::{Location, LocationError};

/// One volume's data in a backup (Velero's PodVolumeBackup, as stored in
/// `<backup>-podvolumebackups.json.gz`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VolumeBackup {
    pub namespace: String,
    pub pod: String,
    pub volume: String,
    pub pvc: String,
    pub snapshot_id: String,
    pub total_bytes: u64,
    pub files: usize,
}

#[derive(Serialize, Deserialize, Default)]
struct Snapshot {
    dirs: Vec<String>,
    files: Vec<FileEntry>,
    /// Mode and owner of each directory and file (the volume's own
    /// directory as ""), as kopia keeps them: a container that runs as
    /// another user can still write what it wrote before.
    #[serde(default)]
    owners: std::collections::BTreeMap<String, Owner>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq)]
struct Owner {
    mode: u32,
    uid: u32,
    gid: u32,
}

impl Owner {
    fn of(path: &Path) -> Option<Owner> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::symlink_metadata(path).ok()?;
        Some(Owner {
            mode: m.mode() & 0o7777,
            uid: m.uid(),
            gid: m.gid(),
        })
    }

    /// Gives `path` this mode and owner.
    fn apply(self, path: &Path) -> Result<(), VolumeError> {
        use std::os::unix::fs::PermissionsExt;
        match std::os::unix::fs::chown(path, Some(self.uid), Some(self.gid)) {
            // Not root: the files are ours (kopia's ignorePermissionErrors).
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {}
            other => other.map_err(|e| io(path, e))?,
        }
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(self.mode))
            .map_err(|e| io(path, e))
    }
}

#[derive(Serialize, Deserialize)]
struct FileEntry {
    path: String,
    sha256: String,
    size: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    #[error(transparent)]
    Location(#[from] LocationError),
    #[error("{path}: {message}")]
    Io { path: String, message: String },
    #[error("volume data of snapshot {0} is missing from the location")]
    Missing(String),
    #[error(
        "{path}: its data does not match its checksum (sha256 {expected} expected, {found} found): the location is damaged"
    )]
    Checksum {
        path: String,
        expected: String,
        found: String,
    },
}

fn io(path: &Path, e: std::io::Error) -> VolumeError {
    VolumeError::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The SHA-256 of `bytes`, in hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Files read, hashed and stored (or fetched, checked and written) at once.
const IN_FLIGHT: usize = 4;

/// Runs file work off the async threads; an error names `path`.
async fn blocking<T: Send + 'static>(
    path: &Path,
    work: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> Result<T, VolumeError> {
    match tokio::task::spawn_blocking(work).await {
        Ok(result) => result.map_err(|e| io(path, e)),
        Err(e) => Err(VolumeError::Io {
            path: path.display().to_string(),
            message: e.to_string(),
        }),
    }
}

pub fn repository(namespace: &str) -> String {
    format!("kopia/{namespace}")
}

/// The volumes of `pod` that a Backup takes: (volume, claim) pairs.
pub fn volumes_to_back_up(pod: &Value, by_default: bool) -> Vec<(String, String)> {
    let annotation = |key: &str| -> Vec<String> {
        pod["metadata"]["annotations"][key]
            .as_str()
            .map(|v| {
                v.split(',')
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
                    .collect()
            })
            .unwrap_or_default()
    };
    let named = annotation("backup.velero.io/backup-volumes");
    let excluded = annotation("backup.velero.io/backup-volumes-excludes");
    pod["spec"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| {
            let name = v["name"].as_str()?.to_string();
            let claim = v["persistentVolumeClaim"]["claimName"]
                .as_str()?
                .to_string();
            let taken = if by_default {
                !excluded.contains(&name)
            } else {
                named.contains(&name)
            };
            taken.then_some((name, claim))
        })
        .collect()
}

/// The directory on this host that a PersistentVolume is.
pub fn volume_dir(pv: &Value) -> Option<PathBuf> {
    pv["spec"]["hostPath"]["path"]
        .as_str()
        .or(pv["spec"]["local"]["path"].as_str())
        .map(PathBuf::from)
}

fn walk(
    root: &Path,
    dir: &Path,
    snapshot: &mut Snapshot,
    found: &mut Vec<PathBuf>,
) -> Result<(), VolumeError> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| io(dir, e))?
        .flatten()
        .collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let relative = path
            .strip_prefix(root)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        if let Some(owner) = Owner::of(&path) {
            snapshot.owners.insert(relative.clone(), owner);
        }
        if kind.is_dir() {
            snapshot.dirs.push(relative);
            walk(root, &path, snapshot, found)?;
        } else if kind.is_file() {
            found.push(path);
        }
    }
    Ok(())
}

/// Stores the files under `dir` in the location's repository of
/// `namespace`; the snapshot's id and the bytes it holds.
pub async fn back_up(
    location: &Location,
    namespace: &str,
    dir: &Path,
) -> Result<(String, u64, usize), VolumeError> {
    let repo = repository(namespace);
    let mut snapshot = Snapshot::default();
    let mut files = Vec::new();
    // Not made yet (a `DirectoryOrCreate` volume no pod has mounted): empty.
    if dir.exists() {
        if let Some(owner) = Owner::of(dir) {
            snapshot.owners.insert(String::new(), owner);
        }
        walk(dir, dir, &mut snapshot, &mut files)?;
    }
    // A few files at once: reading and hashing (off the async threads)
    // overlap with storing.
    let objects = format!("{repo}/objects");
    let storing: Vec<_> = files
        .into_iter()
        .map(|path| store_file(location, &objects, dir, path))
        .collect();
    let stored: Vec<Result<FileEntry, VolumeError>> = futures::stream::iter(storing)
        .buffered(IN_FLIGHT)
        .collect()
        .await;
    let mut total = 0;
    for entry in stored {
        let entry = entry?;
        total += entry.size;
        snapshot.files.push(entry);
    }
    let manifest = serde_json::to_vec(&snapshot).map_err(|e| VolumeError::Io {
        path: dir.display().to_string(),
        message: e.to_string(),
    })?;
    let id = hex(&Sha256::digest(&manifest))[..32].to_string();
    location
        .put_under(
            &format!("{repo}/snapshots"),
            &format!("{id}.json"),
            &manifest,
        )
        .await?;
    Ok((id, total, snapshot.files.len()))
}

/// Reads and hashes one file (off the async threads) and stores it by
/// content unless the location has it.
async fn store_file(
    location: &Location,
    objects: &str,
    dir: &Path,
    path: PathBuf,
) -> Result<FileEntry, VolumeError> {
    let read = path.clone();
    let (bytes, sum) = blocking(&path, move || {
        std::fs::read(&read).map(|b| {
            let sum = sha256_hex(&b);
            (b, sum)
        })
    })
    .await?;
    if !location.has(objects, &sum).await? {
        location.put_under(objects, &sum, &bytes).await?;
    }
    Ok(FileEntry {
        path: path
            .strip_prefix(dir)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default(),
        sha256: sum,
        size: bytes.len() as u64,
    })
}

/// Fetches one file's content, checks it against its checksum and
/// writes it to `path` (off the async threads); the bytes written.
async fn write_file(
    location: &Location,
    objects: &str,
    f: &FileEntry,
    path: PathBuf,
    snapshot_id: &str,
) -> Result<u64, VolumeError> {
    let bytes = location
        .get_under(objects, &f.sha256)
        .await?
        .ok_or_else(|| VolumeError::Missing(snapshot_id.into()))?;
    let (expected, relative) = (f.sha256.clone(), f.path.clone());
    blocking(&path.clone(), move || {
        let found = sha256_hex(&bytes);
        if found != expected {
            return Ok(Err(VolumeError::Checksum {
                path: relative,
                expected,
                found,
            }));
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, &bytes)?;
        Ok(Ok(bytes.len() as u64))
    })
    .await?
}

/// Writes a snapshot's files into `dir`, each checked against its
/// checksum; the bytes written.
pub async fn restore(
    location: &Location,
    namespace: &str,
    snapshot_id: &str,
    dir: &Path,
) -> Result<u64, VolumeError> {
    let repo = repository(namespace);
    let manifest = location
        .get_under(&format!("{repo}/snapshots"), &format!("{snapshot_id}.json"))
        .await?
        .ok_or_else(|| VolumeError::Missing(snapshot_id.into()))?;
    let snapshot: Snapshot =
        serde_json::from_slice(&manifest).map_err(|_| VolumeError::Missing(snapshot_id.into()))?;
    let inside = |relative: &str| -> PathBuf {
        relative
            .split('/')
            .filter(|p| !p.is_empty() && *p != ".." && *p != ".")
            .fold(dir.to_path_buf(), |d, p| d.join(p))
    };
    for d in &snapshot.dirs {
        let path = inside(d);
        std::fs::create_dir_all(&path).map_err(|e| io(&path, e))?;
    }
    let objects = format!("{repo}/objects");
    let writing: Vec<_> = snapshot
        .files
        .iter()
        .map(|f| write_file(location, &objects, f, inside(&f.path), snapshot_id))
        .collect();
    let written: Vec<Result<u64, VolumeError>> = futures::stream::iter(writing)
        .buffered(IN_FLIGHT)
        .collect()
        .await;
    let mut total = 0;
    for bytes in written {
        total += bytes?;
    }
    // Modes and owners last, deepest first: a directory made read-only
    // is written into before it is.
    for (relative, owner) in snapshot.owners.iter().rev() {
        owner.apply(&inside(relative))?;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn files_go_in_once_by_content_and_come_back_checked() {
        let store = tempfile::tempdir().unwrap();
        let location = Location::of(
            &json!({"provider": "filesystem", "objectStorage": {"bucket": "b"},
                                            "config": {"path": store.path().to_str().unwrap()}}),
            None,
        )
        .unwrap();
        let volume = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(volume.path().join("logs/empty")).unwrap();
        std::fs::write(volume.path().join("logs/a.log"), b"same").unwrap();
        std::fs::write(volume.path().join("b.log"), b"same").unwrap();
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let b_log = volume.path().join("b.log");
        std::fs::set_permissions(&b_log, std::fs::Permissions::from_mode(0o640)).unwrap();
        let owned = std::os::unix::fs::chown(&b_log, Some(65534), Some(65534)).is_ok();
        let (id, bytes, files) = back_up(&location, "shop", volume.path()).await.unwrap();
        assert_eq!((bytes, files), (8, 2));
        let objects = store.path().join("b/kopia/shop/objects");
        assert_eq!(
            std::fs::read_dir(&objects).unwrap().count(),
            1,
            "stored once"
        );
        let target = tempfile::tempdir().unwrap();
        assert_eq!(
            restore(&location, "shop", &id, target.path())
                .await
                .unwrap(),
            8
        );
        assert_eq!(
            std::fs::read(target.path().join("logs/a.log")).unwrap(),
            b"same"
        );
        assert!(target.path().join("logs/empty").is_dir());
        // With their modes and, where this may set them, owners.
        let meta = std::fs::metadata(target.path().join("b.log")).unwrap();
        assert_eq!(meta.mode() & 0o7777, 0o640);
        if owned {
            assert_eq!((meta.uid(), meta.gid()), (65534, 65534));
        }
        // A damaged object is refused, not written.
        let object = std::fs::read_dir(&objects)
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        std::fs::write(&object, b"changed").unwrap();
        let again = tempfile::tempdir().unwrap();
        assert!(matches!(
            restore(&location, "shop", &id, again.path()).await,
            Err(VolumeError::Checksum { .. })
        ));
    }

    #[test]
    fn volumes_are_taken_by_default_or_by_name() {
        let pod = json!({"metadata": {"annotations": {"backup.velero.io/backup-volumes": "data",
                                                        "backup.velero.io/backup-volumes-excludes": "cache"}},
            "spec": {"volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": "data-0"}},
                {"name": "cache", "persistentVolumeClaim": {"claimName": "cache-0"}},
                {"name": "tmp", "emptyDir": {}}]}});
        assert_eq!(
            volumes_to_back_up(&pod, false),
            vec![("data".into(), "data-0".into())]
        );
        assert_eq!(
            volumes_to_back_up(&pod, true),
            vec![("data".into(), "data-0".into())]
        );
    }
}
