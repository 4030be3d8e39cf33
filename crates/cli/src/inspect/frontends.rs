//! The objects of the foreign fleet APIs (KubeFed, Open Cluster
//! Management, Argo CD) as `flotilla get` shows them: they live on the
//! hub, not in the members, so each is listed there once per cluster it
//! goes to, with what its own API reports for that cluster.

use serde_json::Value;

/// The API groups whose objects are the hub's own front-end objects.
const GROUPS: &[&str] = &[
    "types.kubefed.io",
    "work.open-cluster-management.io",
    "argoproj.io",
];

/// Whether `group` is a front end's, shown from the hub.
pub fn is_front_end(group: &str) -> bool {
    GROUPS.contains(&group)
}

/// One cluster a front-end object goes to, and its state there.
#[derive(Debug, PartialEq)]
pub struct Row {
    pub cluster: String,
    pub status: String,
}

fn condition<'a>(obj: &'a Value, type_: &str) -> Option<&'a str> {
    obj.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)?
        .get("status")?
        .as_str()
}

fn text(v: &Value, pointer: &str) -> String {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// The clusters an object goes to, by its kind's own fields: KubeFed's
/// `status.clusters` (placed clusters, a status only on failure), a
/// ManifestWork's namespace (its cluster's), an Application's
/// destination (a `server` named by the fleet cluster of that endpoint in
/// `endpoints`, name then endpoint). Kinds that only decide (placements,
/// sets) have none.
pub fn rows(obj: &Value, endpoints: &[(String, String)]) -> Vec<Row> {
    let api_version = obj["apiVersion"].as_str().unwrap_or_default();
    let group = api_version.split_once('/').map_or("", |(g, _)| g);
    let kind = obj["kind"].as_str().unwrap_or_default();
    match (group, kind) {
        ("types.kubefed.io", _) => {
            let propagated = condition(obj, "Propagation").unwrap_or("Unknown");
            obj.pointer("/status/clusters")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|c| Row {
                    cluster: text(c, "/name"),
                    status: match c["status"].as_str() {
                        Some(failed) => failed.to_string(),
                        None if propagated == "True" => "Propagated".into(),
                        None => "Pending".into(),
                    },
                })
                .collect()
        }
        ("work.open-cluster-management.io", "ManifestWork") => {
            let state = |t: &str| format!("{t}={}", condition(obj, t).unwrap_or("Unknown"));
            vec![Row {
                cluster: text(obj, "/metadata/namespace"),
                status: format!("{} {}", state("Applied"), state("Available")),
            }]
        }
        ("argoproj.io", "Application") => {
            let destination = obj
                .pointer("/spec/destination")
                .cloned()
                .unwrap_or_default();
            let cluster = match text(&destination, "/name") {
                n if n.is_empty() => {
                    let server = text(&destination, "/server");
                    endpoints
                        .iter()
                        .find(|(_, e)| *e == server)
                        .map_or(server, |(name, _)| name.clone())
                }
                n => n,
            };
            let state = |p: &str| match text(obj, p) {
                s if s.is_empty() => "Unknown".to_string(),
                s => s,
            };
            vec![Row {
                cluster,
                status: format!(
                    "{}/{}",
                    state("/status/sync/status"),
                    state("/status/health/status")
                ),
            }]
        }
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_api_says_where_its_objects_go() {
        let fed = json!({"apiVersion": "types.kubefed.io/v1beta1", "kind": "FederatedDeployment",
            "status": {"conditions": [{"type": "Propagation", "status": "False"}],
                       "clusters": [{"name": "a"}, {"name": "b", "status": "ClusterNotReady"}]}});
        assert_eq!(
            rows(&fed, &[]),
            vec![
                Row {
                    cluster: "a".into(),
                    status: "Pending".into()
                },
                Row {
                    cluster: "b".into(),
                    status: "ClusterNotReady".into()
                },
            ]
        );
        let mw = json!({"apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
            "metadata": {"namespace": "c1"},
            "status": {"conditions": [{"type": "Applied", "status": "True"}]}});
        assert_eq!(rows(&mw, &[])[0].cluster, "c1");
        assert_eq!(rows(&mw, &[])[0].status, "Applied=True Available=Unknown");
        let app = json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "spec": {"destination": {"server": "https://x:6443"}},
            "status": {"sync": {"status": "Synced"}, "health": {"status": "Healthy"}}});
        assert_eq!(rows(&app, &[])[0].cluster, "https://x:6443");
        let fleet = [("east".to_string(), "https://x:6443".to_string())];
        assert_eq!(rows(&app, &fleet)[0].cluster, "east");
        assert_eq!(rows(&app, &fleet)[0].status, "Synced/Healthy");
        let appset = json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "ApplicationSet"});
        assert!(rows(&appset, &[]).is_empty());
    }
}
