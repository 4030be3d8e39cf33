//! Where backups are kept: a BackupStorageLocation's object storage, laid
//! out as Velero lays out a bucket (`<prefix>/backups/<name>/...`),
//! through `object_store`:
//!
//! - `aws` (`velero.io/aws`): S3 or an S3-compatible store, with the AWS
//!   plugin's config (`region`, `s3Url`, `s3ForcePathStyle`,
//!   `insecureSkipTLSVerify`, `profile`) and its credentials (the
//!   location's `credential` Secret key, else `cloud-credentials`' `cloud`
//!   key as `velero install --secret-file` makes it, in the AWS
//!   credentials file's format; else the server's environment);
//! - `filesystem` (`flotilla.io/filesystem`): the bucket as a directory
//!   under `config.path` on this host.

use std::sync::Arc;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{ClientOptions, ObjectStore, ObjectStoreExt, PutPayload};
use serde_json::Value;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum LocationError {
    #[error(
        "provider {0:?} is not supported here (use aws, for S3 and S3-compatible stores, or filesystem with config.path, a directory on this host)"
    )]
    Provider(String),
    #[error("config.path is required for provider filesystem")]
    NoPath,
    #[error("objectStorage.bucket is required")]
    NoBucket,
    #[error("credentials: {0}")]
    Credentials(String),
    #[error("{path}: {message}")]
    Store { path: String, message: String },
}

/// A location's object storage.
#[derive(Clone, Debug)]
pub struct Location {
    store: Arc<dyn ObjectStore>,
    /// The location's prefix within its bucket.
    root: Path,
}

/// The AWS plugin's credentials: an access key and its secret.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Credentials {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: Option<String>,
}

impl Credentials {
    /// The `profile` section of an AWS shared credentials file.
    pub fn parse(file: &str, profile: &str) -> Result<Credentials, LocationError> {
        let mut section = String::new();
        let mut found = Credentials::default();
        let mut seen = false;
        for line in file.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
                continue;
            }
            if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                section = name.trim().trim_start_matches("profile ").to_string();
                continue;
            }
            if section != profile {
                continue;
            }
            let Some((key, value)) = line.split_once('=') else {
                continue;
            };
            seen = true;
            let value = value.trim().to_string();
            match key.trim() {
                "aws_access_key_id" => found.access_key_id = value,
                "aws_secret_access_key" => found.secret_access_key = value,
                "aws_session_token" => found.session_token = Some(value),
                _ => {}
            }
        }
        if !seen || found.access_key_id.is_empty() || found.secret_access_key.is_empty() {
            return Err(LocationError::Credentials(format!(
                "no aws_access_key_id and aws_secret_access_key in profile [{profile}]"
            )));
        }
        Ok(found)
    }
}

fn store_error(path: &Path, e: object_store::Error) -> LocationError {
    LocationError::Store {
        path: path.to_string(),
        message: e.to_string(),
    }
}

/// `a/b/../c` as path parts, with nothing empty and no `..`.
fn parts(text: &str) -> impl Iterator<Item = &str> {
    text.split('/').filter(|p| !p.is_empty() && *p != "..")
}

impl Location {
    /// The storage a BackupStorageLocation's spec names; `credentials` is
    /// the AWS credentials file the spec's Secret holds, if any.
    pub fn of(spec: &Value, credentials: Option<&str>) -> Result<Location, LocationError> {
        let provider = spec["provider"].as_str().unwrap_or_default();
        let bucket = spec["objectStorage"]["bucket"]
            .as_str()
            .filter(|b| !b.is_empty())
            .ok_or(LocationError::NoBucket)?;
        let root = Path::from_iter(parts(
            spec["objectStorage"]["prefix"].as_str().unwrap_or_default(),
        ));
        let config = &spec["config"];
        let store: Arc<dyn ObjectStore> = match provider {
            "filesystem" | "flotilla.io/filesystem" => {
                let path = config["path"]
                    .as_str()
                    .filter(|p| !p.is_empty())
                    .ok_or(LocationError::NoPath)?;
                let dir = std::path::Path::new(path).join(bucket);
                std::fs::create_dir_all(&dir).map_err(|e| LocationError::Store {
                    path: dir.display().to_string(),
                    message: e.to_string(),
                })?;
                let local =
                    LocalFileSystem::new_with_prefix(&dir).map_err(|e| LocationError::Store {
                        path: dir.display().to_string(),
                        message: e.to_string(),
                    })?;
                // A deleted backup leaves no empty directories behind.
                Arc::new(local.with_automatic_cleanup(true))
            }
            "aws" | "velero.io/aws" => Arc::new(s3(bucket, config, credentials)?),
            other => return Err(LocationError::Provider(other.into())),
        };
        Ok(Location { store, root })
    }

    fn path(&self, dir: &str, file: &str) -> Path {
        let mut path = self.root.clone();
        for part in parts(dir).chain(parts(file)) {
            path = path.join(part);
        }
        path
    }

    /// Whether the storage answers (Velero's validation): its backups
    /// can be listed.
    pub async fn validate(&self) -> Result<(), LocationError> {
        let backups = self.path("backups", "");
        self.store
            .list_with_delimiter(Some(&backups))
            .await
            .map(|_| ())
            .map_err(|e| store_error(&backups, e))
    }

    /// Writes a file of a backup, whole or not at all.
    pub async fn put(&self, backup: &str, file: &str, bytes: &[u8]) -> Result<(), LocationError> {
        self.put_under(&format!("backups/{backup}"), file, bytes)
            .await
    }

    /// Writes `file` under `dir` (`restores/<name>`), whole or not at all.
    pub async fn put_under(
        &self,
        dir: &str,
        file: &str,
        bytes: &[u8],
    ) -> Result<(), LocationError> {
        let path = self.path(dir, file);
        self.store
            .put(&path, PutPayload::from(Bytes::copy_from_slice(bytes)))
            .await
            .map(|_| ())
            .map_err(|e| store_error(&path, e))
    }

    /// A file of a backup; None when it is not there.
    pub async fn get(&self, backup: &str, file: &str) -> Result<Option<Vec<u8>>, LocationError> {
        self.get_under(&format!("backups/{backup}"), file).await
    }

    /// Whether `file` under `dir` is there.
    pub async fn has(&self, dir: &str, file: &str) -> Result<bool, LocationError> {
        let path = self.path(dir, file);
        match self.store.head(&path).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(store_error(&path, e)),
        }
    }

    /// `file` under `dir`; None when it is not there.
    pub async fn get_under(&self, dir: &str, file: &str) -> Result<Option<Vec<u8>>, LocationError> {
        let path = self.path(dir, file);
        let result = match self.store.get(&path).await {
            Ok(r) => r,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(store_error(&path, e)),
        };
        let bytes = result.bytes().await.map_err(|e| store_error(&path, e))?;
        Ok(Some(bytes.to_vec()))
    }

    /// The backups stored here (those with their `velero-backup.json`).
    pub async fn backups(&self) -> Result<Vec<String>, LocationError> {
        let dir = self.path("backups", "");
        let listed = self
            .store
            .list_with_delimiter(Some(&dir))
            .await
            .map_err(|e| store_error(&dir, e))?;
        let mut names = Vec::new();
        for prefix in listed.common_prefixes {
            let Some(name) = prefix.filename().map(String::from) else {
                continue;
            };
            if self
                .has(&format!("backups/{name}"), crate::BACKUP_METADATA)
                .await?
            {
                names.push(name);
            }
        }
        names.sort();
        Ok(names)
    }

    /// Removes a backup and all its files.
    pub async fn delete(&self, backup: &str) -> Result<(), LocationError> {
        let dir = self.path(&format!("backups/{backup}"), "");
        let files: Vec<Path> = self
            .store
            .list(Some(&dir))
            .map_ok(|meta| meta.location)
            .try_collect()
            .await
            .map_err(|e| store_error(&dir, e))?;
        for file in files {
            match self.store.delete(&file).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(store_error(&file, e)),
            }
        }
        Ok(())
    }
}

/// An S3 (or S3-compatible) bucket as the AWS plugin's config says.
fn s3(
    bucket: &str,
    config: &Value,
    credentials: Option<&str>,
) -> Result<object_store::aws::AmazonS3, LocationError> {
    let text = |key: &str| config[key].as_str().filter(|v| !v.is_empty());
    let flag = |key: &str| text(key).is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let mut builder = AmazonS3Builder::from_env()
        .with_bucket_name(bucket)
        .with_region(text("region").unwrap_or("us-east-1"))
        .with_virtual_hosted_style_request(!flag("s3ForcePathStyle"));
    let mut options = ClientOptions::new();
    if let Some(url) = text("s3Url") {
        builder = builder.with_endpoint(url.trim_end_matches('/'));
        if url.starts_with("http://") {
            options = options.with_allow_http(true);
        }
    }
    if flag("insecureSkipTLSVerify") {
        options = options.with_allow_invalid_certificates(true);
    }
    builder = builder.with_client_options(options);
    let from_env = std::env::var_os("AWS_ACCESS_KEY_ID").is_some();
    if credentials.is_none() && !from_env {
        return Err(LocationError::Credentials(
            "no credentials: create the Secret velero/cloud-credentials with key cloud (an AWS credentials file, as `velero install --secret-file` makes it), name another in spec.credential, or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY for the server".into(),
        ));
    }
    if let Some(file) = credentials {
        let c = Credentials::parse(file, text("profile").unwrap_or("default"))?;
        builder = builder
            .with_access_key_id(c.access_key_id)
            .with_secret_access_key(c.secret_access_key);
        if let Some(token) = c.session_token {
            builder = builder.with_token(token);
        }
    }
    builder.build().map_err(|e| LocationError::Store {
        path: format!("s3://{bucket}"),
        message: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn a_filesystem_location_keeps_backups_under_its_bucket_and_prefix() {
        let dir = tempfile::tempdir().unwrap();
        let spec = json!({"provider": "filesystem", "objectStorage": {"bucket": "velero", "prefix": "team/../a"},
                          "config": {"path": dir.path().to_str().unwrap()}});
        let location = Location::of(&spec, None).unwrap();
        location.validate().await.unwrap();
        location
            .put("b1", crate::BACKUP_METADATA, b"{}")
            .await
            .unwrap();
        location.put("b1", "b1.tar.gz", b"x").await.unwrap();
        assert!(
            dir.path()
                .join("velero/team/a/backups/b1/b1.tar.gz")
                .is_file()
        );
        assert_eq!(location.backups().await.unwrap(), vec!["b1".to_string()]);
        assert_eq!(
            location.get("b1", "b1.tar.gz").await.unwrap(),
            Some(b"x".to_vec())
        );
        assert_eq!(location.get("b2", "b2.tar.gz").await.unwrap(), None);
        location.delete("b1").await.unwrap();
        assert!(location.backups().await.unwrap().is_empty());
    }

    #[test]
    fn locations_this_host_cannot_serve_are_said() {
        let gcp = json!({"provider": "gcp", "objectStorage": {"bucket": "b"}});
        assert_eq!(
            Location::of(&gcp, None).unwrap_err(),
            LocationError::Provider("gcp".into())
        );
        let no_path = json!({"provider": "filesystem", "objectStorage": {"bucket": "b"}});
        assert_eq!(
            Location::of(&no_path, None).unwrap_err(),
            LocationError::NoPath
        );
        let no_keys = json!({"provider": "aws", "objectStorage": {"bucket": "b"},
                             "config": {"profile": "other"}});
        assert!(matches!(
            Location::of(
                &no_keys,
                Some("[default]\naws_access_key_id=a\naws_secret_access_key=b\n")
            ),
            Err(LocationError::Credentials(_))
        ));
    }

    #[test]
    fn the_aws_credentials_file_is_read_by_profile() {
        let file = "# velero install --secret-file\n[default]\naws_access_key_id = minio\naws_secret_access_key=minio123\n\n[profile backup]\naws_access_key_id=b\naws_secret_access_key=c\naws_session_token=t\n";
        assert_eq!(
            Credentials::parse(file, "default").unwrap(),
            Credentials {
                access_key_id: "minio".into(),
                secret_access_key: "minio123".into(),
                session_token: None
            }
        );
        assert_eq!(
            Credentials::parse(file, "backup").unwrap().session_token,
            Some("t".into())
        );
    }
}
