//! What Karmada's webhooks do to `autoscaling.karmada.io` writes: a
//! FederatedHPA gets autoscaling/v2's defaults (one replica at least, 80%
//! of the pods' CPU when no metric is named, a behavior's missing rules)
//! and is checked as an HPA is, less what Karmada does not scale on (zero
//! replicas, External metrics); a CronFederatedHPA's rules are checked
//! against its target (bounds for a FederatedHPA, replicas for a
//! workload), its schedules and time zones. A refusal reads as Karmada's
//! webhook's: `admission webhook "federatedhpa.karmada.io" denied the
//! request: spec.maxReplicas: Invalid value: 0: must be greater than 0`.

use std::collections::HashSet;

use flotilla_apiserver::admission::{Mutating, Request, View};
use flotilla_apiserver::error::{ApiError, ApiResult};
use serde_json::Value;

use super::api::{API_VERSION, CronFederatedHPASpec, FederatedHPASpec, GROUP};
use flotilla_core::schedule::{Schedule, ScheduleError};

pub struct Autoscalers;

impl Mutating for Autoscalers {
    fn admit(&self, _: &View, request: &Request, object: &mut Value) -> ApiResult<()> {
        let r = request.resource;
        if r.group != GROUP || request.subresource.is_some() {
            return Ok(());
        }
        let (webhook, errors) = match r.plural.as_str() {
            "federatedhpas" => {
                flotilla_apiserver::defaults::horizontal_pod_autoscaler(object);
                ("federatedhpa.karmada.io", federated_hpa(object))
            }
            "cronfederatedhpas" => ("cronfederatedhpa.karmada.io", cron_federated_hpa(object)),
            _ => return Ok(()),
        };
        if errors.is_empty() {
            return Ok(());
        }
        let message = if errors.len() == 1 {
            errors.concat()
        } else {
            format!("[{}]", errors.join(", "))
        };
        Err(ApiError::forbidden(format!(
            "admission webhook \"{webhook}\" denied the request: {message}"
        )))
    }
}

/// Go's field errors, as `field.ErrorList` prints them.
fn invalid(field: &str, value: impl std::fmt::Display, detail: &str) -> String {
    format!("{field}: Invalid value: {value}: {detail}")
}

fn required(field: &str, detail: &str) -> String {
    format!("{field}: Required value: {detail}")
}

/// A name that can be a path segment, as upstream's
/// `ValidatePathSegmentName`.
fn path_segment(field: &str, value: &str, errors: &mut Vec<String>) {
    if value.is_empty() {
        errors.push(required(field, ""));
    } else if value == "." || value == ".." {
        errors.push(invalid(
            field,
            format!("{value:?}"),
            &format!("may not be '{value}'"),
        ));
    } else if let Some(c) = value.chars().find(|c| *c == '/' || *c == '%') {
        errors.push(invalid(
            field,
            format!("{value:?}"),
            &format!("may not contain '{c}'"),
        ));
    }
}

fn target_ref(object: &Value, errors: &mut Vec<String>) {
    for part in ["kind", "name"] {
        let value = object
            .pointer(&format!("/spec/scaleTargetRef/{part}"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        path_segment(&format!("spec.scaleTargetRef.{part}"), value, errors);
    }
}

/// The object's `spec` as `T`, or the errors that say why not.
fn spec_of<T: serde::de::DeserializeOwned>(object: &Value) -> Result<T, Vec<String>> {
    match object
        .get("spec")
        .cloned()
        .map(serde_json::from_value)
        .transpose()
    {
        Ok(Some(spec)) => Ok(spec),
        Ok(None) => Err(vec![required("spec", "")]),
        Err(e) => Err(vec![invalid("spec", "", &e.to_string())]),
    }
}

fn federated_hpa(object: &Value) -> Vec<String> {
    let mut errors = Vec::new();
    target_ref(object, &mut errors);
    let spec: FederatedHPASpec = match spec_of(object) {
        Ok(spec) => spec,
        Err(errors) => return errors,
    };
    let min = spec.min_replicas.unwrap_or(1);
    if min < 1 {
        errors.push(invalid(
            "spec.minReplicas",
            min,
            "must be greater than or equal to 1",
        ));
    }
    if spec.max_replicas < 1 {
        errors.push(invalid(
            "spec.maxReplicas",
            spec.max_replicas,
            "must be greater than 0",
        ));
    } else if spec.max_replicas < min {
        errors.push(invalid(
            "spec.maxReplicas",
            spec.max_replicas,
            "must be greater than or equal to `minReplicas`",
        ));
    }
    for (i, m) in spec.metrics.iter().flatten().enumerate() {
        let at = format!("spec.metrics[{i}]");
        let sources = [
            ("Object", m.object.is_some()),
            ("Pods", m.pods.is_some()),
            ("Resource", m.resource.is_some()),
            ("ContainerResource", m.container_resource.is_some()),
            ("External", m.external.is_some()),
        ];
        if m.type_.is_empty() {
            errors.push(required(
                &format!("{at}.type"),
                "must specify a metric source type",
            ));
            continue;
        }
        if !["Object", "Pods", "Resource", "ContainerResource"].contains(&m.type_.as_str()) {
            errors.push(format!(
                "{at}.type: Unsupported value: {:?}: supported values: \"ContainerResource\", \"Object\", \"Pods\", \"Resource\"",
                m.type_
            ));
            continue;
        }
        if !sources.iter().any(|(t, set)| *t == m.type_ && *set) {
            errors.push(required(
                &format!("{at}.{}", lower_first(&m.type_)),
                "must populate information for the given metric source",
            ));
        }
        if sources.iter().filter(|(_, set)| *set).count() > 1 {
            errors.push(format!(
                "{at}: Forbidden: must populate the given metric source only"
            ));
        }
        let target = match m.type_.as_str() {
            "Resource" => m.resource.as_ref().map(|r| (&r.target, r.name.as_str())),
            "ContainerResource" => m
                .container_resource
                .as_ref()
                .map(|r| (&r.target, r.name.as_str())),
            _ => None,
        };
        if let Some((target, name)) = target {
            let field = format!("{at}.{}", lower_first(&m.type_));
            if name.is_empty() {
                errors.push(required(
                    &format!("{field}.name"),
                    "must specify a resource name",
                ));
            }
            match (target.average_utilization, &target.average_value) {
                (None, None) => errors.push(required(
                    &format!("{field}.target.averageUtilization"),
                    "must set either a target raw value or a target utilization",
                )),
                (Some(_), Some(_)) => errors.push(format!(
                    "{field}.target.averageValue: Forbidden: may not set both a target raw value and a target utilization"
                )),
                (Some(u), None) if u < 1 => errors.push(invalid(
                    &format!("{field}.target.averageUtilization"),
                    u,
                    "must be greater than 0",
                )),
                _ => {}
            }
            if !["Utilization", "Value", "AverageValue"].contains(&target.type_.as_str()) {
                errors.push(invalid(
                    &format!("{field}.target.type"),
                    format!("{:?}", target.type_),
                    "must be either Utilization, Value, or AverageValue",
                ));
            }
        }
    }
    for (direction, rules) in [
        (
            "scaleUp",
            spec.behavior.as_ref().and_then(|b| b.scale_up.as_ref()),
        ),
        (
            "scaleDown",
            spec.behavior.as_ref().and_then(|b| b.scale_down.as_ref()),
        ),
    ] {
        let Some(rules) = rules else { continue };
        let at = format!("spec.behavior.{direction}");
        match rules.stabilization_window_seconds {
            Some(w) if w < 0 => errors.push(invalid(
                &format!("{at}.stabilizationWindowSeconds"),
                w,
                "must be greater than or equal to 0",
            )),
            Some(w) if w > 3600 => errors.push(invalid(
                &format!("{at}.stabilizationWindowSeconds"),
                w,
                "must be less than or equal to 3600",
            )),
            _ => {}
        }
        if rules.policies.as_ref().is_some_and(Vec::is_empty) {
            errors.push(required(
                &format!("{at}.policies"),
                "must specify at least one Policy",
            ));
        }
        if let Some(p) = &rules.select_policy
            && !["Max", "Min", "Disabled"].contains(&p.as_str())
        {
            errors.push(format!(
                "{at}.selectPolicy: Unsupported value: {p:?}: supported values: \"Disabled\", \"Max\", \"Min\""
            ));
        }
        for (i, p) in rules.policies.iter().flatten().enumerate() {
            let at = format!("{at}.policies[{i}]");
            if p.type_ != "Pods" && p.type_ != "Percent" {
                errors.push(format!(
                    "{at}.type: Unsupported value: {:?}: supported values: \"Percent\", \"Pods\"",
                    p.type_
                ));
            }
            if p.value <= 0 {
                errors.push(invalid(
                    &format!("{at}.value"),
                    p.value,
                    "must be greater than zero",
                ));
            }
            if !(1..=1800).contains(&p.period_seconds) {
                errors.push(invalid(
                    &format!("{at}.periodSeconds"),
                    p.period_seconds,
                    "must be greater than zero and less than or equal to 1800",
                ));
            }
        }
    }
    errors
}

fn lower_first(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_lowercase().chain(c).collect())
        .unwrap_or_default()
}

fn cron_federated_hpa(object: &Value) -> Vec<String> {
    let mut errors = Vec::new();
    let spec: CronFederatedHPASpec = match spec_of(object) {
        Ok(spec) => spec,
        Err(errors) => return errors,
    };
    let target = &spec.scale_target_ref;
    let scales_fhpa = target.api_version.as_deref() == Some(API_VERSION);
    if scales_fhpa && target.kind != "FederatedHPA" {
        return vec![invalid(
            "spec.scaleTargetRef.kind",
            &target.kind,
            &format!(
                "invalid scaleTargetRef kind: {}, only support FederatedHPA",
                target.kind
            ),
        )];
    }
    target_ref(object, &mut errors);
    let mut names = HashSet::new();
    for (i, rule) in spec.rules.iter().enumerate() {
        let at = format!("spec.rules[{i}]");
        if !names.insert(rule.name.as_str()) {
            errors.push(format!("{at}.name: Duplicate value: {:?}", rule.name));
        }
        match Schedule::parse(&rule.schedule, rule.time_zone.as_deref()) {
            Ok(_) => {}
            Err(ScheduleError::Format) => errors.push(invalid(
                &format!("{at}.schedule"),
                format!("{:?}", rule.schedule),
                "invalid cron format",
            )),
            Err(e @ ScheduleError::Zone(_)) => errors.push(invalid(
                &format!("{at}.timeZone"),
                format!("{:?}", rule.time_zone.as_deref().unwrap_or_default()),
                &e.to_string(),
            )),
        }
        if scales_fhpa {
            match (rule.target_min_replicas, rule.target_max_replicas) {
                (None, None) => errors.push(invalid(
                    &format!("{at}.targetMaxReplicas"),
                    "\"\"",
                    "targetMinReplicas and targetMaxReplicas cannot be nil at the same time if you want to scale FederatedHPA",
                )),
                (min, max) => {
                    if let Some(min) = min.filter(|m| *m <= 0) {
                        errors.push(invalid(
                            &format!("{at}.targetMinReplicas"),
                            min,
                            "targetMinReplicas should be larger than 0",
                        ));
                    }
                    if let Some(max) = max.filter(|m| *m <= 0) {
                        errors.push(invalid(
                            &format!("{at}.targetMaxReplicas"),
                            max,
                            "targetMaxReplicas should be larger than 0",
                        ));
                    }
                    if min.unwrap_or(1) > max.unwrap_or(i32::MAX) {
                        errors.push(invalid(
                            &format!("{at}.targetMinReplicas"),
                            min.unwrap_or(1),
                            "targetMaxReplicas should be larger than or equal to targetMinReplicas",
                        ));
                    }
                }
            }
        } else {
            match rule.target_replicas {
                None => errors.push(invalid(
                    &format!("{at}.targetReplicas"),
                    "\"\"",
                    &format!(
                        "targetReplicas cannot be nil if you want to scale {}",
                        target.kind
                    ),
                )),
                Some(r) if r < 0 => errors.push(invalid(
                    &format!("{at}.targetReplicas"),
                    r,
                    "targetReplicas should be larger than or equal to 0",
                )),
                Some(_) => {}
            }
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_federated_hpa_is_checked_as_karmada_checks_it() {
        let ok = json!({"spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "nginx"},
            "minReplicas": 1, "maxReplicas": 10,
            "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 10}}}]}});
        assert!(federated_hpa(&ok).is_empty());
        let mut bad = ok.clone();
        bad["spec"]["maxReplicas"] = json!(0);
        bad["spec"]["minReplicas"] = json!(0);
        assert_eq!(
            federated_hpa(&bad),
            [
                "spec.minReplicas: Invalid value: 0: must be greater than or equal to 1",
                "spec.maxReplicas: Invalid value: 0: must be greater than 0"
            ]
        );
        let mut external = ok.clone();
        external["spec"]["metrics"] = json!([{"type": "External", "external": {}}]);
        assert!(federated_hpa(&external)[0].contains("Unsupported value: \"External\""));
    }

    #[test]
    fn a_cron_rule_fits_its_target() {
        let fhpa = json!({"spec": {"scaleTargetRef": {"apiVersion": API_VERSION, "kind": "FederatedHPA", "name": "nginx-fhpa"},
            "rules": [{"name": "scale-up", "schedule": "*/1 * * * *", "targetMinReplicas": 5}]}});
        assert!(cron_federated_hpa(&fhpa).is_empty());
        let workload = json!({"spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "nginx"},
            "rules": [{"name": "a", "schedule": "@every 1m", "targetReplicas": 5},
                      {"name": "a", "schedule": "0 9 * * *", "timeZone": "Nowhere/Atlantis"},
                      {"name": "b", "schedule": "0 9 * * *", "targetReplicas": -1}]}});
        assert_eq!(
            cron_federated_hpa(&workload),
            [
                "spec.rules[0].schedule: Invalid value: \"@every 1m\": invalid cron format",
                "spec.rules[1].name: Duplicate value: \"a\"",
                "spec.rules[1].timeZone: Invalid value: \"Nowhere/Atlantis\": unknown time zone Nowhere/Atlantis",
                "spec.rules[1].targetReplicas: Invalid value: \"\": targetReplicas cannot be nil if you want to scale Deployment",
                "spec.rules[2].targetReplicas: Invalid value: -1: targetReplicas should be larger than or equal to 0",
            ]
        );
    }
}
