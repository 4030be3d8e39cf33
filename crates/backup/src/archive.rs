//! A backup's objects as Velero writes them: a gzipped tarball holding
//! `metadata/version` and one JSON file per object under
//! `resources/<resource>[.<group>]/{namespaces/<ns>,cluster}/<name>.json`,
//! with a copy under `<version>-preferredversion/` as format 1.1.0 has it.
//! No I/O here: bytes in, bytes out.

use std::io::{Read, Write};

use flate2::Compression;
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use serde_json::Value;

/// The tarball format this writes and reads (Velero's `formatVersion`).
pub const FORMAT_VERSION: &str = "1.1.0";

/// One object in a backup, and where it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct Item {
    /// `deployments.apps`, `configmaps` (Velero's group-resource).
    pub group_resource: String,
    /// The version it was read at (`v1`).
    pub version: String,
    /// None for a cluster-scoped object.
    pub namespace: Option<String>,
    pub name: String,
    pub object: Value,
}

#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error("reading the backup tarball: {0}")]
    Io(#[from] std::io::Error),
    #[error("{path} in the backup tarball is not a JSON object: {source}")]
    Json {
        path: String,
        source: serde_json::Error,
    },
}

/// `<resource>.<group>`, or the resource alone for the core group.
pub fn group_resource(group: &str, plural: &str) -> String {
    if group.is_empty() {
        plural.to_string()
    } else {
        format!("{plural}.{group}")
    }
}

fn paths(item: &Item) -> [String; 2] {
    let scope = match &item.namespace {
        Some(ns) => format!("namespaces/{ns}"),
        None => "cluster".to_string(),
    };
    [
        format!(
            "resources/{}/{scope}/{}.json",
            item.group_resource, item.name
        ),
        format!(
            "resources/{}/{}-preferredversion/{scope}/{}.json",
            item.group_resource, item.version, item.name
        ),
    ]
}

/// The tarball of `items`.
pub fn write(items: &[Item]) -> Result<Vec<u8>, std::io::Error> {
    let mut tar = tar::Builder::new(GzEncoder::new(Vec::new(), Compression::default()));
    let mut add = |path: &str, bytes: &[u8]| -> std::io::Result<()> {
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        tar.append_data(&mut header, path, bytes)
    };
    add("metadata/version", format!("{FORMAT_VERSION}\n").as_bytes())?;
    for item in items {
        let bytes = serde_json::to_vec(&item.object).map_err(std::io::Error::other)?;
        for path in paths(item) {
            add(&path, &bytes)?;
        }
    }
    let gz = tar.into_inner()?;
    gz.finish()
}

/// The objects of a tarball `write` made (or Velero did), once each: the
/// preferred-version copies are read, the plain ones where there are none.
pub fn read(bytes: &[u8]) -> Result<Vec<Item>, ArchiveError> {
    let mut archive = tar::Archive::new(GzDecoder::new(bytes));
    let mut plain = Vec::new();
    let mut preferred = Vec::new();
    for entry in archive.entries()? {
        let mut entry = entry?;
        let path = entry.path()?.to_string_lossy().into_owned();
        let Some(rest) = path.strip_prefix("resources/") else {
            continue;
        };
        let parts: Vec<&str> = rest.split('/').collect();
        let (group_resource, version, scope) = match parts.as_slice() {
            [gr, v, scope @ ..] if v.ends_with("-preferredversion") => (
                *gr,
                Some(v.trim_end_matches("-preferredversion").to_string()),
                scope,
            ),
            [gr, scope @ ..] => (*gr, None, scope),
            _ => continue,
        };
        let (namespace, file) = match scope {
            ["namespaces", ns, file] => (Some(ns.to_string()), *file),
            ["cluster", file] => (None, *file),
            _ => continue,
        };
        let Some(name) = file.strip_suffix(".json") else {
            continue;
        };
        let mut text = Vec::new();
        entry.read_to_end(&mut text)?;
        let object: Value = serde_json::from_slice(&text).map_err(|source| ArchiveError::Json {
            path: path.clone(),
            source,
        })?;
        let item = Item {
            group_resource: group_resource.to_string(),
            version: version.clone().unwrap_or_default(),
            namespace,
            name: name.to_string(),
            object,
        };
        match version {
            Some(_) => preferred.push(item),
            None => plain.push(item),
        }
    }
    let seen = |i: &Item| {
        preferred.iter().any(|p| {
            p.group_resource == i.group_resource && p.namespace == i.namespace && p.name == i.name
        })
    };
    let mut items: Vec<Item> = plain.iter().filter(|i| !seen(i)).cloned().collect();
    items.extend(preferred.iter().cloned());
    Ok(items)
}

/// Gzips `bytes` (Velero's `-logs.gz`, `-resource-list.json.gz`).
pub fn gzip(bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    gz.write_all(bytes)?;
    gz.finish()
}

/// What `gzip` made.
pub fn gunzip(bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    GzDecoder::new(bytes).read_to_end(&mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn objects_go_in_and_come_out_once_each() {
        let items = vec![
            Item {
                group_resource: "deployments.apps".into(),
                version: "v1".into(),
                namespace: Some("shop".into()),
                name: "web".into(),
                object: json!({"kind": "Deployment", "metadata": {"name": "web"}}),
            },
            Item {
                group_resource: "namespaces".into(),
                version: "v1".into(),
                namespace: None,
                name: "shop".into(),
                object: json!({"kind": "Namespace", "metadata": {"name": "shop"}}),
            },
        ];
        let bytes = write(&items).unwrap();
        let mut back = read(&bytes).unwrap();
        back.sort_by(|a, b| {
            a.name
                .cmp(&b.name)
                .then(a.group_resource.cmp(&b.group_resource))
        });
        assert_eq!(back.len(), 2);
        assert!(back.contains(&items[0]));
        assert!(back.contains(&items[1]));
        // Velero's layout, both copies.
        let mut archive = tar::Archive::new(GzDecoder::new(&bytes[..]));
        let names: Vec<String> = archive
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().to_string_lossy().into_owned())
            .collect();
        assert!(names.contains(&"metadata/version".to_string()));
        assert!(names.contains(&"resources/deployments.apps/namespaces/shop/web.json".to_string()));
        assert!(names.contains(
            &"resources/deployments.apps/v1-preferredversion/namespaces/shop/web.json".to_string()
        ));
        assert!(names.contains(&"resources/namespaces/cluster/shop.json".to_string()));
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(read(b"not a tarball").is_err());
        let bad = {
            let mut tar = tar::Builder::new(GzEncoder::new(Vec::new(), Compression::default()));
            let mut header = tar::Header::new_gnu();
            header.set_size(3);
            header.set_cksum();
            tar.append_data(
                &mut header,
                "resources/pods/namespaces/a/p.json",
                &b"{x:"[..],
            )
            .unwrap();
            tar.into_inner().unwrap().finish().unwrap()
        };
        assert!(matches!(read(&bad), Err(ArchiveError::Json { .. })));
    }
}
