//! `kubectl get shoots` as Gardener's API server answers it: its columns,
//! the hibernation state and the last operation computed from the Shoot
//! ("Create Succeeded (100%)"), the wide ones at priority 1.

use flotilla_apiserver::extension::{Column, TableConvertor};
use flotilla_apiserver::table::human_duration;
use serde_json::{Value, json};

pub struct Shoots;

const fn col(
    name: &'static str,
    type_: &'static str,
    format: &'static str,
    priority: i64,
) -> Column {
    Column {
        name,
        type_,
        format,
        description: "",
        priority,
    }
}

fn condition(shoot: &Value, type_: &str) -> Value {
    shoot["status"]["conditions"]
        .as_array()
        .and_then(|l| l.iter().find(|c| c["type"] == type_))
        .map_or(json!("<unknown>"), |c| c["status"].clone())
}

fn hibernation(shoot: &Value) -> &'static str {
    let spec = shoot["spec"]["hibernation"]["enabled"].as_bool() == Some(true);
    let status = shoot["status"]["hibernated"].as_bool() == Some(true);
    match (spec, status) {
        (true, true) => "Hibernated",
        (true, false) => "Hibernating",
        (false, true) => "Waking Up",
        (false, false) => "Awake",
    }
}

fn cloud_profile(shoot: &Value) -> String {
    let spec = &shoot["spec"];
    match spec["cloudProfile"]["kind"].as_str() {
        Some("NamespacedCloudProfile") => format!(
            "{}/{}",
            shoot["metadata"]["namespace"].as_str().unwrap_or_default(),
            spec["cloudProfile"]["name"].as_str().unwrap_or_default()
        ),
        _ => spec["cloudProfile"]["name"]
            .as_str()
            .or_else(|| spec["cloudProfileName"].as_str())
            .unwrap_or_default()
            .to_string(),
    }
}

impl TableConvertor for Shoots {
    fn columns(&self) -> Vec<Column> {
        vec![
            col("Name", "string", "name", 0),
            col("CloudProfile", "string", "name", 0),
            col("Provider", "string", "name", 0),
            col("Region", "string", "name", 0),
            col("Seed", "string", "name", 1),
            col("K8S Version", "string", "name", 0),
            col("Hibernation", "string", "name", 0),
            col("Last Operation", "string", "name", 0),
            col("Status", "string", "name", 0),
            col("Purpose", "string", "name", 1),
            col("Gardener Version", "string", "name", 1),
            col("APIServer", "string", "name", 1),
            col("Control", "string", "name", 1),
            col("Observability", "string", "name", 1),
            col("Nodes", "string", "name", 1),
            col("System", "string", "name", 1),
            col("Age", "date", "", 0),
        ]
    }

    fn cells(&self, shoot: &Value) -> Vec<Value> {
        let spec = &shoot["spec"];
        let status = &shoot["status"];
        let or = |v: &Value, default: &str| v.as_str().map_or(json!(default), |s| json!(s));
        let last = &status["lastOperation"];
        let last_operation = if last.is_object() {
            json!(format!(
                "{} {} ({}%)",
                last["type"].as_str().unwrap_or_default(),
                last["state"].as_str().unwrap_or_default(),
                last["progress"].as_i64().unwrap_or(0)
            ))
        } else {
            json!("<pending>")
        };
        let age = shoot["metadata"]["creationTimestamp"]
            .as_str()
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
            .map_or(json!("<unknown>"), |t| {
                json!(human_duration(
                    jiff::Timestamp::now().as_second() - t.as_second()
                ))
            });
        vec![
            shoot["metadata"]["name"].clone(),
            json!(cloud_profile(shoot)),
            or(&spec["provider"]["type"], ""),
            or(&spec["region"], ""),
            or(&spec["seedName"], "<none>"),
            or(&spec["kubernetes"]["version"], ""),
            json!(hibernation(shoot)),
            last_operation,
            or(
                &shoot["metadata"]["labels"][super::api::STATUS_LABEL],
                "<pending>",
            ),
            or(&spec["purpose"], "<none>"),
            or(&status["gardener"]["version"], "<unknown>"),
            condition(shoot, "APIServerAvailable"),
            condition(shoot, "ControlPlaneHealthy"),
            condition(shoot, "ObservabilityComponentsHealthy"),
            condition(shoot, "EveryNodeReady"),
            condition(shoot, "SystemComponentsHealthy"),
            age,
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_follow_gardeners_columns() {
        let shoot = json!({
            "metadata": {"name": "local", "namespace": "garden-local",
                         "labels": {"shoot.gardener.cloud/status": "healthy"}},
            "spec": {"cloudProfileName": "local", "provider": {"type": "local"}, "region": "local",
                     "kubernetes": {"version": "1.32.0"}, "hibernation": {"enabled": true}},
            "status": {"hibernated": false,
                       "lastOperation": {"type": "Reconcile", "state": "Processing", "progress": 80},
                       "conditions": [{"type": "EveryNodeReady", "status": "False"}]},
        });
        let cells = Shoots.cells(&shoot);
        assert_eq!(cells.len(), Shoots.columns().len());
        assert_eq!(cells[1], "local");
        assert_eq!(cells[4], "<none>");
        assert_eq!(cells[6], "Hibernating");
        assert_eq!(cells[7], "Reconcile Processing (80%)");
        assert_eq!(cells[8], "healthy");
        assert_eq!(cells[14], "False");
        assert_eq!(cells[11], "<unknown>");
    }
}
