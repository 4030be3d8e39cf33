//! LimitRanger: a LimitRange of type Container gives a pod's containers
//! their `default` limits and `defaultRequest` requests (the limit when it
//! has none) and refuses what is outside `min` and `max`, as upstream's
//! plugin, which also records what it set in the
//! `kubernetes.io/limit-ranger` annotation.

use serde_json::{Value, json};

use super::{Mutating, Operation, Request, Validating, View, amount, containers, containers_mut};
use crate::error::{ApiError, ApiResult};
use crate::objects::meta_str;

pub struct LimitRanger;

fn is_new_pod(request: &Request) -> bool {
    request.operation == Operation::Create
        && request.resource.group.is_empty()
        && request.resource.plural == "pods"
}

/// The `type: Container` items of the namespace's LimitRanges.
fn container_limits(view: &View, namespace: &str) -> Vec<Value> {
    view.list_in("", "limitranges", namespace)
        .into_iter()
        .flat_map(|lr| {
            lr.pointer("/spec/limits")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        })
        .filter(|item| item.get("type").and_then(Value::as_str) == Some("Container"))
        .collect()
}

impl Mutating for LimitRanger {
    fn admit(&self, view: &View, request: &Request, pod: &mut Value) -> ApiResult<()> {
        let Some(ns) = request.namespace.filter(|_| is_new_pod(request)) else {
            return Ok(());
        };
        let items = container_limits(view, ns);
        if items.is_empty() {
            return Ok(());
        }
        let mut set = Vec::new();
        for container in containers_mut(pod) {
            let name = container
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            // Upstream's pod defaulting gives a request its own limit before
            // admission: only limits the client gave count for that.
            let given_limits = container.pointer("/resources/limits").cloned();
            for item in &items {
                let defaults = |key: &str| {
                    item.get(key)
                        .and_then(Value::as_object)
                        .cloned()
                        .unwrap_or_default()
                };
                let limits = defaults("default");
                // A LimitRange's defaultRequest defaults to its default.
                let mut requests = limits.clone();
                requests.extend(defaults("defaultRequest"));
                for (field, values) in [("limits", limits), ("requests", requests)] {
                    for (resource, value) in values {
                        if container
                            .pointer(&format!("/resources/{field}/{resource}"))
                            .is_some()
                        {
                            continue;
                        }
                        let own = (field == "requests")
                            .then(|| {
                                given_limits
                                    .as_ref()
                                    .and_then(|l| l.get(&resource))
                                    .cloned()
                            })
                            .flatten();
                        let resources = &mut container["resources"];
                        if !resources.is_object() {
                            *resources = json!({});
                        }
                        if !resources[field].is_object() {
                            resources[field] = json!({});
                        }
                        resources[field][&resource] = own.unwrap_or(value);
                        let what = if field == "limits" {
                            "limit"
                        } else {
                            "request"
                        };
                        set.push(format!("{resource} {what} for container {name}"));
                    }
                }
            }
        }
        if !set.is_empty() {
            let meta = crate::objects::meta_mut(pod);
            let annotations = meta.entry("annotations").or_insert_with(|| json!({}));
            if let Some(a) = annotations.as_object_mut() {
                a.insert(
                    "kubernetes.io/limit-ranger".into(),
                    json!(format!("LimitRanger plugin set: {}", set.join("; "))),
                );
            }
        }
        Ok(())
    }
}

impl Validating for LimitRanger {
    fn validate(&self, view: &View, request: &Request, pod: &Value) -> ApiResult<()> {
        let Some(ns) = request.namespace.filter(|_| is_new_pod(request)) else {
            return Ok(());
        };
        let items = container_limits(view, ns);
        for container in containers(pod) {
            for item in &items {
                for (bound, over) in [("max", true), ("min", false)] {
                    for (resource, limit) in item
                        .get(bound)
                        .and_then(Value::as_object)
                        .into_iter()
                        .flatten()
                    {
                        let Some(limit_value) = amount(Some(limit)) else {
                            continue;
                        };
                        let field = if over { "limits" } else { "requests" };
                        let what = if over { "limit" } else { "request" };
                        let actual = container.pointer(&format!("/resources/{field}/{resource}"));
                        let limit_text = limit.as_str().map_or(limit.to_string(), String::from);
                        let message = match amount(actual) {
                            None => format!(
                                "{} {resource} usage per Container is {limit_text}.  No {what} is specified",
                                if over { "maximum" } else { "minimum" }
                            ),
                            Some(v) if (over && v > limit_value) || (!over && v < limit_value) => {
                                let shown = actual
                                    .and_then(Value::as_str)
                                    .map_or_else(|| v.to_string(), String::from);
                                format!(
                                    "{} {resource} usage per Container is {limit_text}, but {what} is {shown}",
                                    if over { "maximum" } else { "minimum" }
                                )
                            }
                            Some(_) => continue,
                        };
                        return Err(ApiError::forbidden(format!(
                            "pods \"{}\" is forbidden: {message}",
                            meta_str(pod, "name")
                        )));
                    }
                }
            }
        }
        Ok(())
    }
}
