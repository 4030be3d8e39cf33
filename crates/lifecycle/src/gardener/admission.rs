//! What Gardener's admission plugins default and refuse of a Shoot,
//! against its CloudProfile: the profile must exist and be of the
//! Shoot's provider; the region, Kubernetes version and machine types
//! must be the profile's (the version defaults to its newest, `1.31` to
//! the newest 1.31 patch, the machine image to the profile's newest); a
//! pool's minimum may not exceed its maximum; the version may not go
//! down; and the networks must be CIDRs apart from the hub's own.

use flotilla_apiserver::admission::{Operation, Request, View};
use flotilla_apiserver::error::{ApiError, ApiResult, Cause};
use serde_json::{Value, json};

use super::api::{CORE_GROUP, CORE_VERSION};
use crate::admission::{Validation, cause, valid_version};

/// The annotation without which Gardener refuses to delete a Shoot or a
/// Project.
pub const CONFIRM_DELETION: &str = "confirmation.gardener.cloud/deletion";

/// Gardener's DeletionConfirmation plugin: a Shoot or Project is deleted
/// only with `confirmation.gardener.cloud/deletion: "true"`.
pub struct DeletionConfirmation {
    pub resource: &'static str,
}

impl flotilla_apiserver::extension::DeleteAdmission for DeletionConfirmation {
    fn admit_delete(&self, object: &Value) -> ApiResult<()> {
        let confirmed = object["metadata"]["annotations"][CONFIRM_DELETION]
            .as_str()
            .is_some_and(|v| v.eq_ignore_ascii_case("true"));
        if confirmed {
            return Ok(());
        }
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        Err(ApiError::forbidden(format!(
            "{}.core.gardener.cloud \"{name}\" is forbidden: must have a \"{CONFIRM_DELETION}\" annotation to delete (kubectl annotate {} {name} {CONFIRM_DELETION}=true)",
            self.resource, self.resource
        )))
    }
}

/// Gardener's limit on a project's and a shoot's names together.
const MAX_NAMES: usize = 21;

fn unsupported(field: &str, value: &str, supported: &[String]) -> Cause {
    let list: Vec<String> = supported.iter().map(|s| format!("\"{s}\"")).collect();
    Cause {
        reason: "FieldValueNotSupported",
        field: field.into(),
        message: format!(
            "Unsupported value: \"{value}\": supported values: {}",
            list.join(", ")
        ),
    }
}

fn forbidden(field: &str, message: &str) -> Cause {
    Cause {
        reason: "FieldValueForbidden",
        field: field.into(),
        message: format!("Forbidden: {message}"),
    }
}

/// `(major, minor, patch)` of a version.
fn semver(v: &str) -> Option<(u64, u64, u64)> {
    let core = v.trim_start_matches('v').split(['-', '+']).next()?;
    let mut parts = core.split('.').map(|p| p.parse::<u64>().ok());
    Some((
        parts.next()??,
        parts.next()??,
        parts.next().flatten().unwrap_or(0),
    ))
}

/// The profile's versions, newest first, without expired ones.
fn versions(entries: &Value) -> Vec<String> {
    let mut list: Vec<String> = entries
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| {
            v["expirationDate"]
                .as_str()
                .and_then(|d| d.parse::<jiff::Timestamp>().ok())
                .is_none_or(|d| d > jiff::Timestamp::now())
        })
        .filter_map(|v| v["version"].as_str().map(String::from))
        .collect();
    list.sort_by_key(|v| std::cmp::Reverse(semver(v)));
    list
}

/// The newest supported (not preview) version of the list, else the
/// newest.
fn newest(entries: &Value, of: impl Fn(&str) -> bool) -> Option<String> {
    let all = versions(entries);
    let preview = |v: &str| {
        entries
            .as_array()
            .into_iter()
            .flatten()
            .any(|e| e["version"] == v && e["classification"].as_str() == Some("preview"))
    };
    all.iter()
        .find(|v| of(v) && !preview(v))
        .or_else(|| all.iter().find(|v| of(v)))
        .cloned()
}

/// Defaults and validates a Shoot being created or updated.
pub fn shoot(
    validation: &Validation,
    view: &View,
    request: &Request,
    shoot: &mut Value,
    causes: &mut Vec<Cause>,
) -> ApiResult<()> {
    let name = shoot["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    // The deprecated name and the reference say the same.
    let spec = &mut shoot["spec"];
    match (
        spec["cloudProfile"]["name"].as_str(),
        spec["cloudProfileName"].as_str(),
    ) {
        (None, Some(n)) => spec["cloudProfile"] = json!({"kind": "CloudProfile", "name": n}),
        (Some(n), None)
            if spec["cloudProfile"]["kind"]
                .as_str()
                .is_none_or(|k| k == "CloudProfile") =>
        {
            spec["cloudProfileName"] = json!(n);
        }
        _ => {}
    }
    if spec["cloudProfile"].is_object() && spec["cloudProfile"]["kind"].is_null() {
        spec["cloudProfile"]["kind"] = json!("CloudProfile");
    }
    let old = request.old;
    if old.is_some_and(|o| !o["metadata"]["deletionTimestamp"].is_null()) {
        return Ok(());
    }
    // What the scheduler and this plugin write need not be checked again.
    let unchanged = old.is_some_and(|o| {
        let strip = |s: &Value| {
            let mut s = s.clone();
            if let Some(m) = s.as_object_mut() {
                m.remove("seedName");
                m.remove("networking");
            }
            s
        };
        strip(&o["spec"]) == strip(&shoot["spec"])
    });
    if request.operation == Operation::Create {
        let project = request
            .namespace
            .unwrap_or_default()
            .trim_start_matches("garden-");
        if project.len() + name.len() > MAX_NAMES {
            causes.push(forbidden("metadata.name", &format!(
                "the length of the shoot name and the project name must not exceed {MAX_NAMES} characters (project: {project}; shoot with name: {name})"
            )));
        }
    }
    let networks: Vec<(String, &str)> = ["pods", "services", "nodes"]
        .iter()
        .filter_map(|w| {
            shoot["spec"]["networking"][*w]
                .as_str()
                .map(|t| (format!("spec.networking.{w}"), t))
        })
        .collect();
    let (pods_services, nodes): (Vec<_>, Vec<_>) = networks
        .into_iter()
        .partition(|(f, _)| !f.ends_with("nodes"));
    validation.check_ranges(&pods_services, causes);
    validation.check_ranges(&nodes, causes);
    if let Err(invalid) = super::hibernation::parse(shoot) {
        causes.extend(
            invalid
                .into_iter()
                .map(|(field, message)| cause(&field, message)),
        );
    }
    if unchanged {
        return Ok(());
    }
    let profile_name = shoot["spec"]["cloudProfile"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let Some(profile) = view.get_object(
        (CORE_GROUP, CORE_VERSION, "cloudprofiles"),
        None,
        &profile_name,
    ) else {
        return Err(ApiError::forbidden(format!(
            "shoots.core.gardener.cloud \"{name}\" is forbidden: could not find referenced cloud profile: cloudprofiles.core.gardener.cloud \"{profile_name}\" not found"
        )));
    };
    let profile_type = profile["spec"]["type"].as_str().unwrap_or_default();
    let shoot_type = shoot["spec"]["provider"]["type"]
        .as_str()
        .unwrap_or_default();
    if profile_type != shoot_type {
        return Err(ApiError::forbidden(format!(
            "shoots.core.gardener.cloud \"{name}\" is forbidden: provider type in shoot must equal provider type of referenced CloudProfile: \"{profile_type}\""
        )));
    }
    let regions: Vec<String> = profile["spec"]["regions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["name"].as_str().map(String::from))
        .collect();
    let region = shoot["spec"]["region"].as_str().unwrap_or_default();
    if !regions.iter().any(|r| r == region) {
        causes.push(unsupported("spec.region", region, &regions));
    }
    kubernetes_version(&profile, shoot, old, causes);
    workers(&profile, shoot, causes);
    Ok(())
}

fn kubernetes_version(
    profile: &Value,
    shoot: &mut Value,
    old: Option<&Value>,
    causes: &mut Vec<Cause>,
) {
    let entries = &profile["spec"]["kubernetes"]["versions"];
    let supported = versions(entries);
    let field = "spec.kubernetes.version";
    let version = match shoot["spec"]["kubernetes"]["version"].as_str() {
        None => newest(entries, |_| true),
        // `1.31`: its newest patch.
        Some(v) if v.split('.').count() == 2 => {
            let minor = semver(v);
            newest(entries, |c| semver(c).map(|(a, b, _)| (a, b, 0)) == minor)
                .or(Some(v.to_string()))
        }
        Some(v) => Some(v.to_string()),
    };
    let Some(version) = version else {
        causes.push(cause(
            field,
            "Required value: the cloud profile offers no Kubernetes version".into(),
        ));
        return;
    };
    shoot["spec"]["kubernetes"]["version"] = json!(version);
    if !valid_version(&version) || !supported.contains(&version) {
        let was = old.and_then(|o| o["spec"]["kubernetes"]["version"].as_str());
        // Kept as it was (expired since): not a new choice.
        if was != Some(version.as_str()) {
            causes.push(unsupported(field, &version, &supported));
        }
    }
    if let Some(was) = old.and_then(|o| o["spec"]["kubernetes"]["version"].as_str())
        && semver(&version) < semver(was)
    {
        causes.push(forbidden(
            field,
            &format!("kubernetes version downgrade is not supported ({was} to {version})"),
        ));
    }
}

fn workers(profile: &Value, shoot: &mut Value, causes: &mut Vec<Cause>) {
    let types: Vec<String> = profile["spec"]["machineTypes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str().map(String::from))
        .collect();
    let image = profile["spec"]["machineImages"]
        .as_array()
        .and_then(|i| i.first());
    let Some(pools) = shoot["spec"]["provider"]["workers"].as_array_mut() else {
        return;
    };
    for (i, pool) in pools.iter_mut().enumerate() {
        let at = |f: &str| format!("spec.provider.workers[{i}].{f}");
        let machine_type = pool["machine"]["type"].as_str().unwrap_or_default();
        if !types.iter().any(|t| t == machine_type) {
            causes.push(unsupported(&at("machine.type"), machine_type, &types));
        }
        if pool["machine"]["image"].is_null()
            && let Some(image) = image
            && let Some(version) = newest(&image["versions"], |_| true)
        {
            pool["machine"]["image"] = json!({"name": image["name"], "version": version});
        }
        let minimum = pool["minimum"].as_i64().unwrap_or(0);
        let maximum = pool["maximum"].as_i64().unwrap_or(0);
        if minimum < 0 {
            causes.push(cause(
                &at("minimum"),
                format!("Invalid value: {minimum}: must be greater than or equal to 0"),
            ));
        }
        if minimum > maximum {
            causes.push(forbidden(
                &at("minimum"),
                "minimum value must not be greater than maximum value",
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_version_is_the_default_and_a_minor_takes_its_newest_patch() {
        let entries = json!([{"version": "1.31.1"}, {"version": "1.32.0"}, {"version": "1.31.9"},
                             {"version": "1.33.0", "classification": "preview"},
                             {"version": "1.30.0", "expirationDate": "2020-01-01T00:00:00Z"}]);
        assert_eq!(newest(&entries, |_| true).as_deref(), Some("1.32.0"));
        assert_eq!(versions(&entries), ["1.33.0", "1.32.0", "1.31.9", "1.31.1"]);
        let profile = json!({"spec": {"kubernetes": {"versions": entries}}});
        let mut shoot = json!({"spec": {"kubernetes": {"version": "1.31"}}});
        let mut causes = Vec::new();
        kubernetes_version(&profile, &mut shoot, None, &mut causes);
        assert_eq!(shoot["spec"]["kubernetes"]["version"], "1.31.9");
        assert!(causes.is_empty());
        let old = json!({"spec": {"kubernetes": {"version": "1.32.0"}}});
        kubernetes_version(&profile, &mut shoot, Some(&old), &mut causes);
        assert_eq!(causes.len(), 1);
        assert!(causes[0].message.contains("downgrade"));
        let mut expired = json!({"spec": {"kubernetes": {"version": "1.30.0"}}});
        let mut causes = Vec::new();
        kubernetes_version(&profile, &mut expired, None, &mut causes);
        assert_eq!(causes[0].reason, "FieldValueNotSupported");
    }

    #[test]
    fn pools_need_the_profiles_machine_types_and_minimum_at_most_maximum() {
        let profile = json!({"spec": {"machineTypes": [{"name": "local"}],
            "machineImages": [{"name": "local", "versions": [{"version": "1.0.0"}]}]}});
        let mut shoot = json!({"spec": {"provider": {"workers": [
            {"name": "a", "machine": {"type": "local"}, "minimum": 1, "maximum": 2},
            {"name": "b", "machine": {"type": "huge"}, "minimum": 3, "maximum": 2},
        ]}}});
        let mut causes = Vec::new();
        workers(&profile, &mut shoot, &mut causes);
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "spec.provider.workers[1].machine.type",
                "spec.provider.workers[1].minimum"
            ]
        );
        assert_eq!(
            shoot["spec"]["provider"]["workers"][0]["machine"]["image"]["version"],
            "1.0.0"
        );
    }
}
