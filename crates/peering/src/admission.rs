//! What Liqo's pod webhook does, in the consumer's API server: a pod
//! created in a namespace labelled `liqo.io/scheduling-enabled=true`
//! tolerates the virtual nodes' taint and, as the namespace's
//! NamespaceOffloading says, must run on them (`Remote`), may (`LocalAndRemote`,
//! with a cluster selector limiting which), or must not (`Local`).

use flotilla_apiserver::admission::{Mutating, Operation, Request, View};
use flotilla_apiserver::error::ApiResult;
use k8s_openapi::api::core::v1::{
    NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Toleration,
};
use serde_json::{Value, json};

use crate::api::{
    ClusterSelector, DEFAULT_OFFLOADING_NAME, NOT_ALLOWED_TAINT, NamespaceOffloadingSpec,
    OFFLOADING_GROUP, Offloading, PodOffloading, SCHEDULING_ENABLED, SHARING_GROUP, TYPE_LABEL,
    TYPE_VIRTUAL_NODE, VERSION,
};

/// The admission plugin; `ApiServer::add_mutating_admission` puts it in
/// the chain.
pub struct OffloadedPods;

impl Mutating for OffloadedPods {
    fn admit(&self, view: &View, request: &Request, object: &mut Value) -> ApiResult<()> {
        let Some(ns) = created_pod_namespace(request) else {
            return Ok(());
        };
        // The NamespaceOffloading that exists as the pod is created
        // decides, by its spec: the namespace's label and the status
        // follow it a controller pass later, and a file applied in one
        // go (namespace, offloading, workload) must not race them. A
        // labelled namespace without one yet (the controller is making
        // the default one) gets the defaults.
        let spec = match namespace_offloading(view, ns) {
            Some(spec) => spec,
            None if namespace_label(view, ns, SCHEDULING_ENABLED).as_deref() == Some("true") => {
                NamespaceOffloadingSpec::default()
            }
            None => return Ok(()),
        };
        // An invalid spec is said on the NamespaceOffloading; its pods
        // stay local until it is fixed.
        if let Ok(offloading) = spec.interpret() {
            mutate(object, &offloading);
        }
        Ok(())
    }
}

/// The namespace of a pod being created; None for any other request.
pub fn created_pod_namespace<'a>(request: &Request<'a>) -> Option<&'a str> {
    let r = request.resource;
    (request.operation == Operation::Create && r.group.is_empty() && r.plural == "pods")
        .then_some(request.namespace)
        .flatten()
}

/// The value of label `key` on namespace `ns`.
pub fn namespace_label(view: &View, ns: &str, key: &str) -> Option<String> {
    view.get_object(("", "v1", "namespaces"), None, ns)?
        .pointer(&format!("/metadata/labels/{}", key.replace('/', "~1")))?
        .as_str()
        .map(str::to_string)
}

/// The namespace's NamespaceOffloading (`offloading` first, as Liqo reads
/// only that one, then any other), under either group.
fn namespace_offloading(view: &View, ns: &str) -> Option<NamespaceOffloadingSpec> {
    let mut all: Vec<Value> = [OFFLOADING_GROUP, SHARING_GROUP]
        .iter()
        .flat_map(|g| view.list_version_in(g, VERSION, "namespaceoffloadings", ns))
        .filter(|o| o.pointer("/metadata/deletionTimestamp").is_none())
        .collect();
    all.sort_by_key(|o| {
        let name = o.pointer("/metadata/name").and_then(Value::as_str);
        (
            name != Some(DEFAULT_OFFLOADING_NAME),
            o.pointer("/metadata/creationTimestamp")
                .and_then(Value::as_str)
                .map(str::to_string),
        )
    });
    serde_json::from_value(all.first()?.get("spec")?.clone()).ok()
}

/// Applies `offloading` to a pod being created.
pub fn mutate(pod: &mut Value, offloading: &Offloading) {
    if offloading.pods == PodOffloading::Local {
        return;
    }
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let toleration = Toleration {
        key: Some(NOT_ALLOWED_TAINT.into()),
        operator: Some("Exists".into()),
        effect: Some("NoExecute".into()),
        ..Default::default()
    };
    let tolerations = spec.entry("tolerations").or_insert_with(|| json!([]));
    if let Some(list) = tolerations.as_array_mut() {
        let t = serde_json::to_value(&toleration).unwrap_or_default();
        if !list.contains(&t) {
            list.push(t);
        }
    }
    let Some(wanted) = required_terms(offloading) else {
        return;
    };
    let path = "/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution";
    let existing: Option<NodeSelector> = Value::Object(spec.clone())
        .pointer(path)
        .and_then(|v| serde_json::from_value(v.clone()).ok());
    let merged = match existing {
        Some(e) if !e.node_selector_terms.is_empty() => and_terms(&e.node_selector_terms, &wanted),
        _ => wanted,
    };
    let affinity = spec.entry("affinity").or_insert_with(|| json!({}));
    if !affinity.is_object() {
        *affinity = json!({});
    }
    let node_affinity = &mut affinity["nodeAffinity"];
    if !node_affinity.is_object() {
        *node_affinity = json!({});
    }
    node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] =
        json!({"nodeSelectorTerms": merged});
}

fn virtual_node(operator: &str) -> NodeSelectorRequirement {
    NodeSelectorRequirement {
        key: TYPE_LABEL.into(),
        operator: operator.into(),
        values: Some(vec![TYPE_VIRTUAL_NODE.into()]),
    }
}

/// The terms a pod's required node affinity gets, as Liqo's webhook: for
/// `Remote`, the cluster selector's terms each also requiring a virtual
/// node; for `LocalAndRemote` with a selector, its terms or a local node.
fn required_terms(offloading: &Offloading) -> Option<Vec<NodeSelectorTerm>> {
    let selected = offloading
        .selector
        .as_ref()
        .map(ClusterSelector::terms)
        .unwrap_or_default();
    match offloading.pods {
        PodOffloading::Local => None,
        PodOffloading::Remote => {
            let mut terms = if selected.is_empty() {
                vec![NodeSelectorTerm::default()]
            } else {
                selected
            };
            for t in &mut terms {
                t.match_expressions
                    .get_or_insert_with(Vec::new)
                    .push(virtual_node("In"));
            }
            Some(terms)
        }
        PodOffloading::LocalAndRemote if selected.is_empty() => None,
        PodOffloading::LocalAndRemote => {
            let mut terms = selected;
            terms.push(NodeSelectorTerm {
                match_expressions: Some(vec![virtual_node("NotIn")]),
                ..Default::default()
            });
            Some(terms)
        }
    }
}

/// Terms `a` AND terms `b`: every pair's requirements together.
fn and_terms(a: &[NodeSelectorTerm], b: &[NodeSelectorTerm]) -> Vec<NodeSelectorTerm> {
    let mut out = Vec::new();
    for x in a {
        for y in b {
            let mut t = x.clone();
            t.match_expressions
                .get_or_insert_with(Vec::new)
                .extend(y.match_expressions.iter().flatten().cloned());
            if let Some(f) = &y.match_fields {
                t.match_fields
                    .get_or_insert_with(Vec::new)
                    .extend(f.clone());
            }
            out.push(t);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::NamespaceMapping;

    fn offloading(pods: PodOffloading, selector: Option<ClusterSelector>) -> Offloading {
        Offloading {
            pods,
            mapping: NamespaceMapping::DefaultName,
            selector,
        }
    }

    fn pod() -> Value {
        json!({"spec": {"containers": [{"name": "c", "image": "x"}]}})
    }

    #[test]
    fn local_and_remote_only_tolerates() {
        let mut p = pod();
        mutate(&mut p, &offloading(PodOffloading::LocalAndRemote, None));
        assert_eq!(p["spec"]["tolerations"][0]["key"], NOT_ALLOWED_TAINT);
        assert_eq!(p["spec"]["tolerations"][0]["effect"], "NoExecute");
        assert!(p["spec"].get("affinity").is_none());
    }

    #[test]
    fn remote_requires_a_virtual_node_and_keeps_the_pods_own_affinity() {
        let mut p = pod();
        p["spec"]["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
            {"nodeSelectorTerms": [{"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}]}}});
        mutate(&mut p, &offloading(PodOffloading::Remote, None));
        let terms = &p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            ["nodeSelectorTerms"];
        assert_eq!(terms.as_array().unwrap().len(), 1);
        let exprs = terms[0]["matchExpressions"].as_array().unwrap();
        assert_eq!(exprs.len(), 2, "{exprs:?}");
        assert_eq!(exprs[1]["key"], TYPE_LABEL);
        assert_eq!(exprs[1]["operator"], "In");
    }

    #[test]
    fn a_selector_with_local_and_remote_allows_local_nodes_too() {
        let mut p = pod();
        let selector: k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector =
            serde_json::from_value(json!({"matchLabels": {"region": "eu"}})).unwrap();
        mutate(
            &mut p,
            &offloading(
                PodOffloading::LocalAndRemote,
                Some(ClusterSelector::Labels(selector)),
            ),
        );
        let terms =
            p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                ["nodeSelectorTerms"]
                .as_array()
                .unwrap()
                .clone();
        assert_eq!(terms.len(), 2);
        assert_eq!(terms[0]["matchExpressions"][0]["key"], "region");
        assert_eq!(terms[1]["matchExpressions"][0]["operator"], "NotIn");
    }

    #[test]
    fn local_changes_nothing() {
        let mut p = pod();
        mutate(&mut p, &offloading(PodOffloading::Local, None));
        assert_eq!(p, pod());
    }
}
