//! Schedules: a Backup from the Schedule's template each time its cron
//! expression (UTC, or `@every <duration>`) comes due, named
//! `<schedule>-<YYYYMMDDhhmmss>` and labelled `velero.io/schedule-name`,
//! as Velero's schedule controller makes them; the first at once unless
//! `skipImmediately`, none while `paused`.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use kube::api::{DynamicObject, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tracing::info;

use crate::api;
use crate::controller::{self, Error, json, objects, write_status};

pub const SCHEDULE_NAME_LABEL: &str = "velero.io/schedule-name";

pub async fn run(client: Client) {
    let c = client.clone();
    controller::run(client, api::schedules(), "schedule", move |s| {
        reconcile(c.clone(), s)
    })
    .await;
}

/// When a schedule comes due.
#[derive(Debug)]
enum Cadence {
    Cron(Box<flotilla_core::schedule::Schedule>),
    Every(Duration),
}

impl Cadence {
    fn parse(expression: &str) -> Result<Cadence, String> {
        let expression = expression.trim();
        if expression.is_empty() {
            return Err("Schedule must be a non-empty valid Cron expression".into());
        }
        if let Some(every) = expression.strip_prefix("@every ") {
            return flotilla_core::duration::parse_go(every.trim())
                .filter(|d| !d.is_zero())
                .map(Cadence::Every)
                .ok_or_else(|| {
                    format!("invalid schedule: failed to parse duration @every {every}")
                });
        }
        flotilla_core::schedule::Schedule::parse(expression, Some("UTC"))
            .map(|s| Cadence::Cron(Box::new(s)))
            .map_err(|e| format!("invalid schedule: {e}"))
    }

    fn next_after(&self, t: Timestamp) -> Option<Timestamp> {
        match self {
            Cadence::Cron(c) => c.next_after(t),
            Cadence::Every(d) => t.checked_add(jiff::SignedDuration::try_from(*d).ok()?).ok(),
        }
    }
}

async fn reconcile(
    client: Client,
    schedule: Arc<DynamicObject>,
) -> Result<Option<Duration>, Error> {
    let name = schedule.name_any();
    let object = json(&schedule);
    let spec = &object["spec"];
    let api = objects(&client, &api::schedules());
    let cadence = match Cadence::parse(spec["schedule"].as_str().unwrap_or_default()) {
        Ok(c) => c,
        Err(message) => {
            if object["status"]["phase"] == "FailedValidation" {
                return Ok(None);
            }
            return controller::fail_validation(&api, &name, vec![message]).await;
        }
    };
    if object["status"]["phase"] != "Enabled" {
        write_status(
            &api,
            &name,
            json!({"phase": "Enabled", "validationErrors": null}),
        )
        .await?;
    }
    if spec["paused"] == json!(true) {
        return Ok(None);
    }
    let now = Timestamp::now();
    let last = object["status"]["lastBackup"]
        .as_str()
        .and_then(|t| t.parse::<Timestamp>().ok());
    let due = match last {
        Some(last) => cadence.next_after(last),
        None if spec["skipImmediately"] == json!(true) => {
            let created = schedule.creation_timestamp().map(|t| t.0).unwrap_or(now);
            cadence.next_after(created)
        }
        None => Some(now),
    };
    let Some(due) = due else {
        return Ok(None);
    };
    if due > now {
        let wait = Duration::try_from(due.duration_since(now)).unwrap_or_default();
        return Ok(Some(wait.min(Duration::from_secs(3600))));
    }
    let backup = backup_of(&object, now);
    let backups = objects(&client, &api::backups());
    let made: DynamicObject = serde_json::from_value(backup)?;
    let backup_name = made.name_any();
    match backups.create(&PostParams::default(), &made).await {
        Ok(_) => info!(schedule = %name, backup = %backup_name, "scheduled backup created"),
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    let at = now.round(jiff::Unit::Second).unwrap_or(now).to_string();
    write_status(&api, &name, json!({"lastBackup": at})).await?;
    let next = cadence
        .next_after(now)
        .map(|n| Duration::try_from(n.duration_since(now)).unwrap_or_default())
        .unwrap_or(Duration::from_secs(3600));
    Ok(Some(next.min(Duration::from_secs(3600))))
}

/// The Backup a schedule makes at `at`.
fn backup_of(schedule: &Value, at: Timestamp) -> Value {
    let name = schedule["metadata"]["name"].as_str().unwrap_or_default();
    let stamp = at.strftime("%Y%m%d%H%M%S").to_string();
    let template = &schedule["spec"]["template"];
    let mut labels = match template["metadata"]["labels"].as_object() {
        Some(l) if !l.is_empty() => Value::Object(l.clone()),
        _ => schedule["metadata"]["labels"].clone(),
    };
    if !labels.is_object() {
        labels = json!({});
    }
    labels[SCHEDULE_NAME_LABEL] = json!(name);
    let mut spec = template.clone();
    if let Some(s) = spec.as_object_mut() {
        s.remove("metadata");
    }
    if !spec.is_object() {
        spec = json!({});
    }
    let mut metadata =
        json!({"name": format!("{name}-{stamp}"), "namespace": api::NAMESPACE, "labels": labels});
    if let Some(annotations) = schedule["metadata"]["annotations"].as_object() {
        let mut kept = annotations.clone();
        kept.remove("kubectl.kubernetes.io/last-applied-configuration");
        metadata["annotations"] = Value::Object(kept);
    }
    if schedule["spec"]["useOwnerReferencesInBackup"] == json!(true) {
        metadata["ownerReferences"] = json!([{"apiVersion": "velero.io/v1", "kind": "Schedule",
            "name": name, "uid": schedule["metadata"]["uid"], "controller": true}]);
    }
    json!({"apiVersion": "velero.io/v1", "kind": "Backup", "metadata": metadata, "spec": spec})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_schedule_names_and_labels_its_backups_as_velero() {
        let schedule = json!({"metadata": {"name": "daily", "uid": "u1", "labels": {"team": "a"}},
            "spec": {"schedule": "0 1 * * *", "useOwnerReferencesInBackup": true,
                     "template": {"includedNamespaces": ["shop"], "ttl": "24h"}}});
        let at: Timestamp = "2026-12-07T01:00:00Z".parse().unwrap();
        let b = backup_of(&schedule, at);
        assert_eq!(b["metadata"]["name"], "daily-20261207010000");
        assert_eq!(b["metadata"]["labels"]["velero.io/schedule-name"], "daily");
        assert_eq!(b["metadata"]["labels"]["team"], "a");
        assert_eq!(b["metadata"]["ownerReferences"][0]["kind"], "Schedule");
        assert_eq!(b["spec"]["includedNamespaces"][0], "shop");
    }

    #[test]
    fn cadences_as_velero_reads_them() {
        let at: Timestamp = "2026-12-07T01:30:00Z".parse().unwrap();
        let cron = Cadence::parse("0 */2 * * *").unwrap();
        assert_eq!(
            cron.next_after(at).unwrap().to_string(),
            "2026-12-07T02:00:00Z"
        );
        let every = Cadence::parse("@every 90m").unwrap();
        assert_eq!(
            every.next_after(at).unwrap().to_string(),
            "2026-12-07T03:00:00Z"
        );
        assert!(
            Cadence::parse("")
                .unwrap_err()
                .contains("non-empty valid Cron")
        );
        assert!(
            Cadence::parse("every day")
                .unwrap_err()
                .starts_with("invalid schedule")
        );
    }
}
