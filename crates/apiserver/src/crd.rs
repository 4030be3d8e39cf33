//! CustomResourceDefinitions: validation, status conditions, and serving
//! (or ceasing to serve) their resources as they are written and deleted.
//!
//! What a replica serves follows the store, not the replica: a write
//! through this replica is served at once, and a follower watching the
//! stored CRDs serves what any replica sharing the store (etcd) created,
//! changed or deleted. Each custom kind remembers the revision it was
//! served from, so a late event never undoes a newer write.

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::sync::Arc;

use flotilla_store::{DeletePrecondition, EventKind, ListOptions, StoreError};
use serde_json::{Value, json};
use tracing::{debug, info, warn};

use crate::error::{ApiError, ApiResult, Cause};
use crate::meta;
use crate::objects::{self, meta_str};
use crate::resources::{Printer, PrinterColumn, ResourceInfo, Schema};
use crate::storage::Storage;
use crate::value::{str_at as s, strings_at};

fn is_crd(r: &ResourceInfo) -> bool {
    r.group == "apiextensions.k8s.io" && r.plural == "customresourcedefinitions"
}

/// 422 for a CRD the server could not serve.
pub fn validate(r: &ResourceInfo, obj: &Value) -> ApiResult<()> {
    if !is_crd(r) {
        return Ok(());
    }
    let mut causes = Vec::new();
    let mut bad = |field: &str, reason: &'static str, message: String| {
        causes.push(Cause {
            reason,
            field: field.into(),
            message,
        })
    };
    let group = s(obj, "/spec/group");
    let plural = s(obj, "/spec/names/plural");
    let kind = s(obj, "/spec/names/kind");
    let name = meta_str(obj, "name");
    if group.is_empty() {
        bad("spec.group", "FieldValueRequired", "Required value".into());
    } else if !flotilla_core::validation::validate_dns1123_subdomain(group).is_empty()
        || !group.contains('.')
    {
        bad(
            "spec.group",
            "FieldValueInvalid",
            format!("Invalid value: \"{group}\": should be a domain with at least one dot"),
        );
    }
    if plural.is_empty() {
        bad(
            "spec.names.plural",
            "FieldValueRequired",
            "Required value".into(),
        );
    } else if !flotilla_core::validation::validate_dns1123_label(plural).is_empty() {
        bad(
            "spec.names.plural",
            "FieldValueInvalid",
            format!("Invalid value: \"{plural}\": a lowercase RFC 1123 label"),
        );
    }
    if kind.is_empty() {
        bad(
            "spec.names.kind",
            "FieldValueRequired",
            "Required value".into(),
        );
    }
    if !plural.is_empty() && !group.is_empty() && name != format!("{plural}.{group}") {
        bad(
            "metadata.name",
            "FieldValueInvalid",
            format!("Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group"),
        );
    }
    match s(obj, "/spec/scope") {
        "Namespaced" | "Cluster" => {}
        other => bad(
            "spec.scope",
            "FieldValueNotSupported",
            format!(
                "Unsupported value: \"{other}\": supported values: \"Cluster\", \"Namespaced\""
            ),
        ),
    }
    let versions = obj
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if versions.is_empty() {
        bad(
            "spec.versions",
            "FieldValueInvalid",
            "Invalid value: must have exactly one version marked as storage version".into(),
        );
    }
    let storage = versions
        .iter()
        .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .count();
    if !versions.is_empty() && storage != 1 {
        bad(
            "spec.versions",
            "FieldValueInvalid",
            format!(
                "Invalid value: must have exactly one version marked as storage version, found {storage}"
            ),
        );
    }
    for (i, v) in versions.iter().enumerate() {
        let vname = s(v, "/name");
        if !flotilla_core::validation::validate_dns1123_label(vname).is_empty() {
            bad(
                &format!("spec.versions[{i}].name"),
                "FieldValueInvalid",
                format!("Invalid value: \"{vname}\": a DNS-1035 label"),
            );
        }
        match v.pointer("/schema/openAPIV3Schema") {
            Some(schema) if schema.get("type").and_then(Value::as_str) == Some("object") => {}
            Some(_) => bad(
                &format!("spec.versions[{i}].schema.openAPIV3Schema.type"),
                "FieldValueRequired",
                "Required value: must be object at the root".into(),
            ),
            None => bad(
                &format!("spec.versions[{i}].schema.openAPIV3Schema"),
                "FieldValueRequired",
                "Required value: schemas are required".into(),
            ),
        }
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(&r.group, &r.kind, name, causes))
    }
}

/// Sets acceptedNames, storedVersions and the conditions. Serving is
/// synchronous with the write, so a stored CRD is Established.
pub fn refresh_status(r: &ResourceInfo, obj: &mut Value) {
    if !is_crd(r) || objects::is_deleting(obj) {
        return;
    }
    let names = obj.pointer("/spec/names").cloned().unwrap_or(json!({}));
    let mut accepted = names.clone();
    if accepted.get("listKind").is_none() {
        accepted["listKind"] = json!(format!("{}List", s(obj, "/spec/names/kind")));
    }
    if accepted.get("singular").is_none() {
        accepted["singular"] = json!(s(obj, "/spec/names/kind").to_lowercase());
    }
    let storage: Vec<Value> = obj
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .map(|vs| {
            vs.iter()
                .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
                .filter_map(|v| v.get("name").cloned())
                .collect()
        })
        .unwrap_or_default();
    let mut stored = obj
        .pointer("/status/storedVersions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for v in storage {
        if !stored.contains(&v) {
            stored.push(v);
        }
    }
    let previous = obj
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let now = meta::now();
    let condition = |t: &str, reason: &str, message: &str| {
        let since = previous
            .iter()
            .find(|c| {
                c.get("type").and_then(Value::as_str) == Some(t)
                    && c.get("status").and_then(Value::as_str) == Some("True")
            })
            .and_then(|c| c.get("lastTransitionTime").cloned())
            .unwrap_or(json!(now));
        json!({"type": t, "status": "True", "reason": reason, "message": message, "lastTransitionTime": since})
    };
    obj["status"] = json!({
        "acceptedNames": accepted,
        "storedVersions": stored,
        "conditions": [
            condition("NamesAccepted", "NoConflicts", "no conflicts found"),
            condition("Established", "InitialNamesAccepted", "the initial names have been accepted"),
        ],
    });
}

fn printer_columns(v: &Value) -> Printer {
    let cols = v
        .get("additionalPrinterColumns")
        .and_then(Value::as_array)
        .map(|cols| {
            cols.iter()
                .map(|c| PrinterColumn {
                    name: s(c, "/name").into(),
                    type_: s(c, "/type").into(),
                    format: s(c, "/format").into(),
                    description: s(c, "/description").into(),
                    priority: c.get("priority").and_then(Value::as_i64).unwrap_or(0),
                    json_path: s(c, "/jsonPath").into(),
                })
                .collect()
        })
        .unwrap_or_default();
    Printer::Custom(cols)
}

/// The resources a CRD serves, one per served version.
fn resources_of(crd: &Value) -> Vec<ResourceInfo> {
    let group = s(crd, "/spec/group").to_string();
    let kind = s(crd, "/spec/names/kind").to_string();
    let versions = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    versions
        .iter()
        .filter(|v| v.get("served").and_then(Value::as_bool) != Some(false))
        .map(|v| ResourceInfo {
            group: group.clone(),
            version: s(v, "/name").into(),
            plural: s(crd, "/spec/names/plural").into(),
            singular: match s(crd, "/spec/names/singular") {
                "" => kind.to_lowercase(),
                x => x.into(),
            },
            kind: kind.clone(),
            list_kind: match s(crd, "/spec/names/listKind") {
                "" => format!("{kind}List"),
                x => x.into(),
            },
            namespaced: s(crd, "/spec/scope") == "Namespaced",
            short_names: strings_at(crd, "/spec/names/shortNames"),
            categories: strings_at(crd, "/spec/names/categories"),
            status_subresource: v.pointer("/subresources/status").is_some(),
            computed: None,
            conversion: None,
            added_subresources: Vec::new(),
            scale: v
                .pointer("/subresources/scale")
                .map(|sc| crate::resources::ScalePaths {
                    spec_replicas: crate::scale::json_path_to_pointer(s(sc, "/specReplicasPath")),
                    status_replicas: crate::scale::json_path_to_pointer(s(
                        sc,
                        "/statusReplicasPath",
                    )),
                    selector: match s(sc, "/labelSelectorPath") {
                        "" => crate::resources::ScaleSelector::None,
                        path => crate::resources::ScaleSelector::Path(
                            crate::scale::json_path_to_pointer(path),
                        ),
                    },
                }),
            uses_generation: true,
            custom: true,
            printer: printer_columns(v),
            schema: Schema::Structural(Arc::new(
                v.pointer("/schema/openAPIV3Schema").cloned().unwrap_or(
                    json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
                ),
            )),
            selectable_fields: v
                .get("selectableFields")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .map(|f| s(f, "/jsonPath").trim_start_matches('.').to_string())
                        .collect()
                })
                .unwrap_or_default(),
        })
        .collect()
}

/// The stored CRD's (group, plural), if it names both.
fn group_plural(crd: &Value) -> Option<(String, String)> {
    let group = s(crd, "/spec/group");
    let plural = s(crd, "/spec/names/plural");
    (!group.is_empty() && !plural.is_empty()).then(|| (group.to_string(), plural.to_string()))
}

/// Serves `crd`'s versions as stored at `revision`; true if that changed
/// what is served.
fn serve(api: &Storage, crd: &Value, revision: i64) -> bool {
    let Some((group, plural)) = group_plural(crd) else {
        return false;
    };
    let mut resources = resources_of(crd);
    for r in &mut resources {
        r.conversion = api.extensions.conversion(r);
        r.added_subresources = api.extensions.added_subresources(&r.group, &r.plural);
    }
    api.registry
        .set_custom(&group, &plural, revision, resources)
}

/// Stops serving `crd`, deleted at `revision`; true if it was served.
fn stop_serving(api: &Storage, crd: &Value, revision: i64) -> bool {
    let Some((group, plural)) = group_plural(crd) else {
        return false;
    };
    api.registry.remove_custom(&group, &plural, revision)
}

fn crd_resource(api: &Storage) -> Option<Arc<ResourceInfo>> {
    api.registry
        .get("apiextensions.k8s.io", "v1", "customresourcedefinitions")
}

/// Serves every stored CRD and stops serving custom kinds whose CRD is
/// gone; returns the revision the store was read at.
fn sync_with_store(api: &Storage, r: &ResourceInfo) -> Result<i64, StoreError> {
    let list = api.store.list(&r.prefix(), &ListOptions::default())?;
    let mut stored = BTreeSet::new();
    for kv in &list.items {
        let Some(crd) = decode(r, kv) else { continue };
        stored.extend(group_plural(&crd));
        serve(api, &crd, kv.mod_revision);
    }
    for (group, plural) in api.registry.custom_kinds() {
        if !stored.contains(&(group.clone(), plural.clone())) {
            api.registry.remove_custom(&group, &plural, list.revision);
        }
    }
    Ok(list.revision)
}

/// Serves every stored CRD (start-up).
pub fn restore(api: &Storage) -> ApiResult<()> {
    if let Some(r) = crd_resource(api) {
        sync_with_store(api, &r)?;
    }
    Ok(())
}

/// Follows the stored CRDs for as long as the store is open.
pub fn spawn_follower(api: Arc<Storage>) {
    tokio::spawn(async move {
        crate::follower::until_closed("custom resources", || async {
            let Err(error) = follow(&api).await;
            error
        })
        .await
    });
}

/// A stored CRD, or a warning when it cannot be read.
fn decode(r: &ResourceInfo, kv: &flotilla_store::KeyValue) -> Option<Value> {
    match objects::decode(r, kv) {
        Ok(crd) => Some(crd),
        Err(error) => {
            warn!(key = %kv.key, error = %error.message, "undecodable CRD in the store");
            None
        }
    }
}

async fn follow(api: &Storage) -> Result<Infallible, StoreError> {
    let Some(r) = crd_resource(api) else {
        return std::future::pending().await;
    };
    let revision = sync_with_store(api, &r)?;
    let mut watch = api.store.watch(&r.prefix(), revision)?;
    loop {
        for event in watch.next().await? {
            // A deletion's value is the object's last.
            let Some(crd) = decode(&r, &event.kv) else {
                continue;
            };
            let revision = event.kv.mod_revision;
            let name = meta_str(&crd, "name");
            match event.kind {
                EventKind::Put if serve(api, &crd, revision) => {
                    info!(
                        crd = name,
                        revision, "serving custom resource written elsewhere"
                    );
                }
                EventKind::Delete if stop_serving(api, &crd, revision) => {
                    info!(
                        crd = name,
                        revision, "stopped serving custom resource deleted elsewhere"
                    );
                }
                _ => debug!(crd = name, revision, "custom resource already current"),
            }
        }
    }
}

/// After a CRD is stored: serve its current versions.
pub async fn after_write(api: &Arc<Storage>, r: &ResourceInfo, obj: &Value) {
    if is_crd(r) && serve(api, obj, objects::revision_of(obj)) {
        info!(crd = meta_str(obj, "name"), "serving custom resource");
    }
}

/// After a CRD is removed: stop serving it and delete its objects.
pub async fn after_delete(api: &Arc<Storage>, r: &ResourceInfo, obj: &Value) {
    if !is_crd(r) {
        return;
    }
    let resources = resources_of(obj);
    stop_serving(api, obj, objects::revision_of(obj));
    if let Some(first) = resources.first() {
        let prefix = first.prefix();
        match api.store.list(&prefix, &ListOptions::default()) {
            Ok(list) => {
                for kv in list.items {
                    if let Err(error) = api
                        .store
                        .delete(&kv.key, DeletePrecondition::default())
                        .await
                    {
                        warn!(%error, key = %kv.key, "could not delete custom object of a removed CRD");
                    }
                }
            }
            Err(error) => warn!(%error, "could not list custom objects of a removed CRD"),
        }
    }
    info!(
        crd = meta_str(obj, "name"),
        "stopped serving custom resource"
    );
}
