//! How the exports of one service across the clusterset become one
//! ServiceImport, without I/O (KEP-1645): an export of a missing or
//! ExternalName Service is not Valid; among the valid ones the oldest
//! ServiceExport (creationTimestamp, then cluster id) wins every property
//! that cannot be merged (type, session affinity and its config), and
//! every export then says Conflict with which field, who won and why;
//! ports are the union, by name and by protocol and port, the older export
//! keeping a clashing one.

use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

/// One cluster's ServiceExport of the service, and its Service.
#[derive(Clone, Debug, PartialEq)]
pub struct Export {
    pub cluster: String,
    pub created: Timestamp,
    /// None: the cluster has no Service of that name.
    pub service: Option<ServiceFacts>,
    /// The export's `exportedLabels` and `exportedAnnotations` (v1beta1).
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
}

/// What of a Service the import is made of.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServiceFacts {
    /// ClusterIP, NodePort, LoadBalancer or ExternalName.
    pub type_: String,
    /// `clusterIP: None`.
    pub headless: bool,
    pub ports: Vec<Port>,
    pub session_affinity: String,
    pub session_affinity_config: Option<Value>,
    /// `spec.ipFamilies`: which ClusterSetIPs the import gets.
    pub ip_families: Vec<String>,
    pub internal_traffic_policy: Option<String>,
    pub traffic_distribution: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Port {
    pub name: String,
    pub protocol: String,
    pub port: i32,
    pub app_protocol: Option<String>,
}

/// The import every cluster gets.
#[derive(Clone, Debug, PartialEq)]
pub struct Import {
    /// ClusterSetIP or Headless.
    pub type_: &'static str,
    pub ports: Vec<Port>,
    pub session_affinity: String,
    pub session_affinity_config: Option<Value>,
    /// The winning export's IP families (IPv4 when it names none).
    pub ip_families: Vec<String>,
    pub internal_traffic_policy: Option<String>,
    pub traffic_distribution: Option<String>,
    /// The winning export's exported labels and annotations.
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// The clusters whose endpoints it serves: every valid export.
    pub clusters: Vec<String>,
}

/// A condition for one export.
#[derive(Clone, Debug, PartialEq)]
pub struct ExportCondition {
    pub type_: &'static str,
    pub status: bool,
    pub reason: String,
    pub message: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Merged {
    /// None while no export is valid: no import exists then.
    pub import: Option<Import>,
    /// Per cluster: Valid, and for valid exports Conflict.
    pub conditions: BTreeMap<String, Vec<ExportCondition>>,
}

fn condition(type_: &'static str, status: bool, reason: &str, message: String) -> ExportCondition {
    ExportCondition {
        type_,
        status,
        reason: reason.to_string(),
        message,
    }
}

fn import_type(s: &ServiceFacts) -> &'static str {
    if s.headless {
        "Headless"
    } else {
        "ClusterSetIP"
    }
}

/// Merges the exports of one service (`namespace/name` only for messages).
pub fn merge(service: &str, exports: &[Export]) -> Merged {
    let mut conditions: BTreeMap<String, Vec<ExportCondition>> = BTreeMap::new();
    let mut valid: Vec<(&Export, &ServiceFacts)> = Vec::new();
    for e in exports {
        let verdict = match &e.service {
            None => condition(
                "Valid",
                false,
                "NoService",
                format!("Service {service} does not exist in cluster {}", e.cluster),
            ),
            Some(s) if s.type_ == "ExternalName" => condition(
                "Valid",
                false,
                "InvalidServiceType",
                format!("Service {service} is of type ExternalName, which cannot be exported"),
            ),
            Some(s) => {
                valid.push((e, s));
                condition(
                    "Valid",
                    true,
                    "Valid",
                    format!("Service {service} is exported"),
                )
            }
        };
        conditions.insert(e.cluster.clone(), vec![verdict]);
    }
    valid.sort_by(|(a, _), (b, _)| a.created.cmp(&b.created).then(a.cluster.cmp(&b.cluster)));
    let Some(&(oldest, first)) = valid.first() else {
        return Merged {
            import: None,
            conditions,
        };
    };
    let why = format!(
        "{}'s export is the oldest (created {})",
        oldest.cluster, oldest.created
    );
    // Conflicting fields: reason, and the message naming the field, the
    // clusters that disagree and the winner.
    let mut conflicts: Vec<(&'static str, String)> = Vec::new();
    let mut single =
        |reason: &'static str, field: &str, value: &dyn Fn(&Export, &ServiceFacts) -> String| {
            let winner = value(oldest, first);
            let losers: Vec<String> = valid
                .iter()
                .filter(|(e, s)| value(e, s) != winner)
                .map(|(e, s)| format!("{} has {}", e.cluster, value(e, s)))
                .collect();
            if !losers.is_empty() {
                conflicts.push((
                    reason,
                    format!(
                        "{field}: {}; {} from {} is used: {why}",
                        losers.join(", "),
                        winner,
                        oldest.cluster
                    ),
                ));
            }
        };
    let or_none = |v: &Option<String>| v.clone().unwrap_or_else(|| "none".into());
    let map = |m: &BTreeMap<String, String>| {
        if m.is_empty() {
            "none".to_string()
        } else {
            serde_json::to_string(m).unwrap_or_default()
        }
    };
    single("TypeConflict", "type", &|_, s| import_type(s).to_string());
    single("SessionAffinityConflict", "sessionAffinity", &|_, s| {
        s.session_affinity.clone()
    });
    single(
        "SessionAffinityConfigConflict",
        "sessionAffinityConfig",
        &|_, s| {
            s.session_affinity_config
                .as_ref()
                .map_or("none".into(), Value::to_string)
        },
    );
    single(
        "InternalTrafficPolicyConflict",
        "internalTrafficPolicy",
        &|_, s| or_none(&s.internal_traffic_policy),
    );
    single(
        "TrafficDistributionConflict",
        "trafficDistribution",
        &|_, s| or_none(&s.traffic_distribution),
    );
    single("IPFamilyConflict", "ipFamilies", &|_, s| {
        if s.ip_families.is_empty() {
            "IPv4".into()
        } else {
            s.ip_families.join(",")
        }
    });
    single("LabelsConflict", "exportedLabels", &|e, _| map(&e.labels));
    single("AnnotationsConflict", "exportedAnnotations", &|e, _| {
        map(&e.annotations)
    });
    let mut ports: Vec<Port> = Vec::new();
    let mut port_clashes: Vec<String> = Vec::new();
    for (e, s) in &valid {
        for p in &s.ports {
            let same_name = ports.iter().find(|q| q.name == p.name);
            let same_port = ports
                .iter()
                .find(|q| q.protocol == p.protocol && q.port == p.port);
            match (same_name, same_port) {
                (Some(q), Some(r)) if q == r && q.app_protocol == p.app_protocol => {}
                (None, None) => ports.push(p.clone()),
                (Some(q), _) | (None, Some(q)) => port_clashes.push(format!(
                    "{} has {} {}/{}, clashing with {} {}/{}",
                    e.cluster,
                    display_name(&p.name),
                    p.port,
                    p.protocol,
                    display_name(&q.name),
                    q.port,
                    q.protocol
                )),
            }
        }
    }
    if !port_clashes.is_empty() {
        conflicts.push((
            "PortConflict",
            format!(
                "ports: {}; the older export's port is kept: {why}",
                port_clashes.join("; ")
            ),
        ));
    }
    ports.sort_by(|a, b| a.name.cmp(&b.name).then(a.port.cmp(&b.port)));
    let conflict = if conflicts.is_empty() {
        condition(
            "Conflict",
            false,
            "NoConflicts",
            "No conflicts with the other clusters' exports".into(),
        )
    } else {
        let reasons: Vec<&str> = conflicts.iter().map(|(r, _)| *r).collect();
        let messages: Vec<&str> = conflicts.iter().map(|(_, m)| m.as_str()).collect();
        condition("Conflict", true, &reasons.join(","), messages.join(". "))
    };
    for (e, _) in &valid {
        if let Some(c) = conditions.get_mut(&e.cluster) {
            c.push(conflict.clone());
        }
    }
    Merged {
        import: Some(Import {
            type_: import_type(first),
            ports,
            session_affinity: first.session_affinity.clone(),
            session_affinity_config: first.session_affinity_config.clone(),
            ip_families: if first.ip_families.is_empty() {
                vec!["IPv4".to_string()]
            } else {
                first.ip_families.clone()
            },
            internal_traffic_policy: first.internal_traffic_policy.clone(),
            traffic_distribution: first.traffic_distribution.clone(),
            labels: oldest.labels.clone(),
            annotations: oldest.annotations.clone(),
            clusters: {
                let mut c: Vec<String> = valid.iter().map(|(e, _)| e.cluster.clone()).collect();
                c.sort();
                c
            },
        }),
        conditions,
    }
}

fn display_name(name: &str) -> String {
    if name.is_empty() {
        "an unnamed port".into()
    } else {
        format!("port {name:?}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port(name: &str, port: i32) -> Port {
        Port {
            name: name.into(),
            protocol: "TCP".into(),
            port,
            app_protocol: None,
        }
    }

    fn export(cluster: &str, created: i64, service: Option<ServiceFacts>) -> Export {
        Export {
            cluster: cluster.into(),
            created: Timestamp::from_second(created).unwrap(),
            service,
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
        }
    }

    fn service(headless: bool, ports: Vec<Port>) -> ServiceFacts {
        ServiceFacts {
            type_: "ClusterIP".into(),
            headless,
            ports,
            session_affinity: "None".into(),
            session_affinity_config: None,
            ip_families: Vec::new(),
            internal_traffic_policy: None,
            traffic_distribution: None,
        }
    }

    fn conflict<'a>(m: &'a Merged, cluster: &str) -> &'a ExportCondition {
        m.conditions[cluster]
            .iter()
            .find(|c| c.type_ == "Conflict")
            .expect("a Conflict condition")
    }

    #[test]
    fn compatible_exports_merge_their_ports() {
        let m = merge(
            "shop/web",
            &[
                export(
                    "member2",
                    20,
                    Some(service(
                        false,
                        vec![port("http", 80), port("metrics", 9090)],
                    )),
                ),
                export("member1", 10, Some(service(false, vec![port("http", 80)]))),
            ],
        );
        let import = m.import.clone().unwrap();
        assert_eq!(import.type_, "ClusterSetIP");
        assert_eq!(import.ports, vec![port("http", 80), port("metrics", 9090)]);
        assert_eq!(import.clusters, vec!["member1", "member2"]);
        assert!(!conflict(&m, "member1").status);
        assert_eq!(conflict(&m, "member2").reason, "NoConflicts");
    }

    #[test]
    fn the_oldest_export_wins_and_every_export_says_so() {
        let m = merge(
            "shop/web",
            &[
                export("member1", 10, Some(service(false, vec![port("http", 80)]))),
                export("member2", 20, Some(service(true, vec![port("http", 8080)]))),
            ],
        );
        let import = m.import.clone().unwrap();
        assert_eq!(import.type_, "ClusterSetIP");
        assert_eq!(import.ports, vec![port("http", 80)]);
        for cluster in ["member1", "member2"] {
            let c = conflict(&m, cluster);
            assert!(c.status);
            assert_eq!(c.reason, "TypeConflict,PortConflict");
            for needle in [
                "type: member2 has Headless; ClusterSetIP from member1 is used",
                "member1's export is the oldest",
                "member2 has port \"http\" 8080/TCP, clashing with port \"http\" 80/TCP",
            ] {
                assert!(c.message.contains(needle), "{needle} in {}", c.message);
            }
        }
        // Oldest by creation time, not by order or name.
        let swapped = merge(
            "shop/web",
            &[
                export("member1", 30, Some(service(false, vec![port("http", 80)]))),
                export("member2", 20, Some(service(true, vec![port("http", 80)]))),
            ],
        );
        assert_eq!(swapped.import.unwrap().type_, "Headless");
    }

    #[test]
    fn invalid_exports_say_why_and_alone_make_no_import() {
        let mut external = service(false, vec![]);
        external.type_ = "ExternalName".into();
        let m = merge(
            "shop/web",
            &[
                export("member1", 10, None),
                export("member2", 20, Some(external)),
            ],
        );
        assert_eq!(m.import, None);
        let valid = |c: &str| m.conditions[c][0].clone();
        assert_eq!(
            (valid("member1").status, valid("member1").reason.as_str()),
            (false, "NoService")
        );
        assert_eq!(valid("member2").reason, "InvalidServiceType");
        assert!(
            m.conditions["member1"]
                .iter()
                .all(|c| c.type_ != "Conflict")
        );

        // With one valid export, the import is that one's.
        let m = merge(
            "shop/web",
            &[
                export("member1", 10, None),
                export("member2", 20, Some(service(true, vec![]))),
            ],
        );
        let import = m.import.unwrap();
        assert_eq!(
            (import.type_, import.clusters),
            ("Headless", vec!["member2".to_string()])
        );
    }

    #[test]
    fn exported_labels_and_traffic_fields_come_from_the_oldest_export() {
        let mut old = export("east", 100, Some(service(false, vec![port("http", 80)])));
        old.labels = BTreeMap::from([("tier".to_string(), "web".to_string())]);
        if let Some(s) = old.service.as_mut() {
            s.internal_traffic_policy = Some("Local".into());
        }
        let mut young = export("west", 200, Some(service(false, vec![port("http", 80)])));
        young.labels = BTreeMap::from([("tier".to_string(), "api".to_string())]);
        young.annotations = BTreeMap::from([("note".to_string(), "x".to_string())]);
        let m = merge("shop/web", &[young, old]);
        let import = m.import.as_ref().expect("an import");
        assert_eq!(import.labels["tier"], "web");
        assert!(import.annotations.is_empty());
        assert_eq!(import.internal_traffic_policy.as_deref(), Some("Local"));
        let c = conflict(&m, "west");
        assert_eq!(
            c.reason,
            "InternalTrafficPolicyConflict,LabelsConflict,AnnotationsConflict"
        );
        assert!(
            c.message
                .contains("exportedLabels: west has {\"tier\":\"api\"}"),
            "{}",
            c.message
        );
        assert!(c.message.contains("from east is used"), "{}", c.message);
    }
}
