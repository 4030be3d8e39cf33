//! Where backups are kept: a BackupStorageLocation's object storage, laid
//! out as Velero lays out a bucket (`<prefix>/backups/<name>/...`). The
//! provider `filesystem` (or `flotilla.io/filesystem`) keeps the bucket as
//! a directory under `config.path` on this host.

use std::path::{Path, PathBuf};

use serde_json::Value;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum LocationError {
    #[error(
        "provider {0:?} is not supported here (use provider filesystem with config.path, a directory on this host)"
    )]
    Provider(String),
    #[error("config.path is required for provider filesystem")]
    NoPath,
    #[error("objectStorage.bucket is required")]
    NoBucket,
    #[error("{path}: {message}")]
    Io { path: String, message: String },
}

/// A location's object storage.
#[derive(Clone, Debug)]
pub struct Location {
    root: PathBuf,
}

fn io(path: &Path, e: std::io::Error) -> LocationError {
    LocationError::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

impl Location {
    /// The storage a BackupStorageLocation's spec names.
    pub fn of(spec: &Value) -> Result<Location, LocationError> {
        let provider = spec["provider"].as_str().unwrap_or_default();
        if !matches!(provider, "filesystem" | "flotilla.io/filesystem") {
            return Err(LocationError::Provider(provider.into()));
        }
        let path = spec["config"]["path"]
            .as_str()
            .filter(|p| !p.is_empty())
            .ok_or(LocationError::NoPath)?;
        let bucket = spec["objectStorage"]["bucket"]
            .as_str()
            .filter(|b| !b.is_empty())
            .ok_or(LocationError::NoBucket)?;
        let mut root = PathBuf::from(path).join(bucket);
        if let Some(prefix) = spec["objectStorage"]["prefix"].as_str() {
            for part in prefix.split('/').filter(|p| !p.is_empty() && *p != "..") {
                root.push(part);
            }
        }
        Ok(Location { root })
    }

    /// Whether the storage can be written (Velero's validation).
    pub fn validate(&self) -> Result<(), LocationError> {
        let dir = self.root.join("backups");
        std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
        let probe = dir.join(".flotilla-probe");
        std::fs::write(&probe, b"").map_err(|e| io(&probe, e))?;
        let _ = std::fs::remove_file(&probe);
        Ok(())
    }

    fn backup_dir(&self, backup: &str) -> PathBuf {
        self.root.join("backups").join(backup)
    }

    /// Writes a file of a backup, whole or not at all.
    pub fn put(&self, backup: &str, file: &str, bytes: &[u8]) -> Result<(), LocationError> {
        self.put_under(&format!("backups/{backup}"), file, bytes)
    }

    /// Writes `file` under `dir` (`restores/<name>`), whole or not at all.
    pub fn put_under(&self, dir: &str, file: &str, bytes: &[u8]) -> Result<(), LocationError> {
        let dir = self.under(dir);
        std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
        let path = dir.join(file);
        let tmp = dir.join(format!(".{file}.tmp"));
        std::fs::write(&tmp, bytes).map_err(|e| io(&tmp, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| io(&path, e))
    }

    /// A file of a backup; None when it is not there.
    pub fn get(&self, backup: &str, file: &str) -> Result<Option<Vec<u8>>, LocationError> {
        self.get_under(&format!("backups/{backup}"), file)
    }

    /// Whether `file` under `dir` is there.
    pub fn has(&self, dir: &str, file: &str) -> bool {
        self.under(dir).join(file).is_file()
    }

    fn under(&self, dir: &str) -> PathBuf {
        dir.split('/')
            .filter(|p| !p.is_empty() && *p != "..")
            .fold(self.root.clone(), |d, p| d.join(p))
    }

    /// `file` under `dir`; None when it is not there.
    pub fn get_under(&self, dir: &str, file: &str) -> Result<Option<Vec<u8>>, LocationError> {
        let path = self.under(dir).join(file);
        match std::fs::read(&path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io(&path, e)),
        }
    }

    /// The backups stored here (those with their `velero-backup.json`).
    pub fn backups(&self) -> Result<Vec<String>, LocationError> {
        let dir = self.root.join("backups");
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io(&dir, e)),
        };
        let mut names: Vec<String> = entries
            .flatten()
            .filter(|e| e.path().join(crate::BACKUP_METADATA).is_file())
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        names.sort();
        Ok(names)
    }

    /// Removes a backup and all its files.
    pub fn delete(&self, backup: &str) -> Result<(), LocationError> {
        let dir = self.backup_dir(backup);
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io(&dir, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_filesystem_location_keeps_backups_under_its_bucket_and_prefix() {
        let dir = tempfile::tempdir().unwrap();
        let spec = json!({"provider": "filesystem", "objectStorage": {"bucket": "velero", "prefix": "team/../a"},
                          "config": {"path": dir.path().to_str().unwrap()}});
        let location = Location::of(&spec).unwrap();
        location.validate().unwrap();
        location.put("b1", crate::BACKUP_METADATA, b"{}").unwrap();
        location.put("b1", "b1.tar.gz", b"x").unwrap();
        assert!(
            dir.path()
                .join("velero/team/a/backups/b1/b1.tar.gz")
                .is_file()
        );
        assert_eq!(location.backups().unwrap(), vec!["b1".to_string()]);
        assert_eq!(
            location.get("b1", "b1.tar.gz").unwrap(),
            Some(b"x".to_vec())
        );
        assert_eq!(location.get("b2", "b2.tar.gz").unwrap(), None);
        location.delete("b1").unwrap();
        assert!(location.backups().unwrap().is_empty());
    }

    #[test]
    fn locations_this_host_cannot_serve_are_said() {
        let aws = json!({"provider": "aws", "objectStorage": {"bucket": "b"}});
        assert_eq!(
            Location::of(&aws).unwrap_err(),
            LocationError::Provider("aws".into())
        );
        let no_path = json!({"provider": "filesystem", "objectStorage": {"bucket": "b"}});
        assert_eq!(Location::of(&no_path).unwrap_err(), LocationError::NoPath);
    }
}
