//! ApplicationSet: the `clusters` generator over the fleet's Clusters
//! (their labels, annotations and API endpoints), its parameters rendered
//! into `spec.template` (fasttemplate `{{name}}` or, with `goTemplate`,
//! `{{.name}}` field references) to make one Application per selected
//! cluster, owned by the ApplicationSet. Status conditions follow Argo
//! CD's ApplicationSet controller: `ErrorOccurred`, `ParametersGenerated`
//! and `ResourcesUpToDate`, with its reasons.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Map, Value, json};
use tracing::{info, warn};

use super::api::{
    APPSET_LABEL, FIELD_MANAGER, GROUP, RESOURCES_FINALIZER, VERSION, application_resource,
    application_set_resource,
};
use crate::api::Cluster;

/// Why a template did not render.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RenderError {
    #[error("failed to execute go template {template}: {reason}")]
    GoTemplate { template: String, reason: String },
    #[error("generator {0} is not supported: only the clusters generator is")]
    Generator(String),
}

/// How a template is written: fasttemplate (`{{name}}`), or Go's
/// (`{{.name}}`), `strict` with `goTemplateOptions: [missingkey=error]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Syntax {
    Fast,
    Go { strict: bool },
}

/// Argo CD's `nameNormalized`: lower case, and what a DNS-1123 subdomain
/// does not allow becomes `-`.
pub fn normalize(name: &str) -> String {
    name.to_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .take(253)
        .collect()
}

/// The parameters of one cluster, flat (`metadata.labels.env`) as the
/// fasttemplate renderer sees them; `values` are rendered with the others
/// first.
pub fn cluster_params(
    cluster: &Cluster,
    values: &BTreeMap<String, String>,
    go: Syntax,
) -> Result<BTreeMap<String, String>, RenderError> {
    let name = cluster.name_any();
    let mut params = BTreeMap::new();
    params.insert("name".to_string(), name.clone());
    params.insert("nameNormalized".to_string(), normalize(&name));
    params.insert(
        "server".to_string(),
        cluster.spec.api_endpoint.clone().unwrap_or_default(),
    );
    for (k, v) in cluster.labels() {
        params.insert(format!("metadata.labels.{k}"), v.clone());
    }
    for (k, v) in cluster.annotations() {
        params.insert(format!("metadata.annotations.{k}"), v.clone());
    }
    let mut rendered = BTreeMap::new();
    for (k, v) in values {
        rendered.insert(format!("values.{k}"), render_str(v, &params, go)?);
    }
    params.extend(rendered);
    Ok(params)
}

/// Renders one string: `{{ key }}` with fasttemplate (unknown keys stay
/// as written, as Argo CD leaves them), or `{{ .a.b }}` and
/// `{{ index .a.b "key" }}` with `go` (anything else is an error rather
/// than a guess).
pub fn render_str(
    s: &str,
    params: &BTreeMap<String, String>,
    go: Syntax,
) -> Result<String, RenderError> {
    let mut out = String::new();
    let mut rest = s;
    while let Some(start) = rest.find("{{") {
        let Some(len) = rest[start + 2..].find("}}") else {
            break;
        };
        out.push_str(&rest[..start]);
        let tag = rest[start + 2..start + 2 + len].trim();
        let whole = &rest[start..start + 4 + len];
        match go {
            Syntax::Go { strict } => out.push_str(&go_field(tag, params, s, strict)?),
            Syntax::Fast => match params.get(tag) {
                Some(v) => out.push_str(v),
                None => out.push_str(whole),
            },
        }
        rest = &rest[start + 4 + len..];
    }
    out.push_str(rest);
    Ok(out)
}

fn go_field(
    tag: &str,
    params: &BTreeMap<String, String>,
    template: &str,
    strict: bool,
) -> Result<String, RenderError> {
    let error = |reason: String| RenderError::GoTemplate {
        template: template.to_string(),
        reason,
    };
    let key = if let Some(args) = tag.strip_prefix("index ") {
        let mut parts = args.split_whitespace();
        match (parts.next(), parts.next(), parts.next()) {
            (Some(map), Some(k), None) if map.starts_with('.') => {
                format!("{}.{}", &map[1..], k.trim_matches('"'))
            }
            _ => return Err(error(format!("unsupported expression {{{{{tag}}}}}"))),
        }
    } else if let Some(field) = tag.strip_prefix('.') {
        if field.contains(char::is_whitespace) || field.contains('|') {
            return Err(error(format!(
                "unsupported expression {{{{{tag}}}}}: only field references are rendered"
            )));
        }
        field.to_string()
    } else {
        return Err(error(format!(
            "unsupported expression {{{{{tag}}}}}: only field references are rendered"
        )));
    };
    // Go's templates print a missing map key as "<no value>", unless
    // told to fail.
    match params.get(&key) {
        Some(v) => Ok(v.clone()),
        None if strict => Err(error(format!(
            "map has no entry for key \"{}\"",
            key.rsplit('.').next().unwrap_or_default()
        ))),
        None => Ok("<no value>".into()),
    }
}

/// Renders every string of `template` (map keys too).
pub fn render_value(
    template: &Value,
    params: &BTreeMap<String, String>,
    go: Syntax,
) -> Result<Value, RenderError> {
    Ok(match template {
        Value::String(s) => Value::String(render_str(s, params, go)?),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|v| render_value(v, params, go))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(map) => {
            let mut out = Map::new();
            for (k, v) in map {
                out.insert(render_str(k, params, go)?, render_value(v, params, go)?);
            }
            Value::Object(out)
        }
        other => other.clone(),
    })
}

/// The clusters a `clusters` generator selects: all with no selector.
pub fn selected<'a>(generator: &Value, clusters: &'a [Cluster]) -> Vec<&'a Cluster> {
    let selector: LabelSelector = generator
        .get("selector")
        .and_then(|s| serde_json::from_value(s.clone()).ok())
        .unwrap_or_default();
    let mut out: Vec<&Cluster> = clusters
        .iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .filter(|c| crate::selector::labels_match(&selector, c.labels()))
        .collect();
    out.sort_by_key(|c| c.name_any());
    out
}

/// The Applications an ApplicationSet wants, or the first rendering
/// error with Argo CD's reason for it.
pub fn desired(appset: &Value, clusters: &[Cluster]) -> Result<Vec<Value>, (String, String)> {
    let go = if appset
        .pointer("/spec/goTemplate")
        .and_then(Value::as_bool)
        .unwrap_or(false)
    {
        let strict = appset
            .pointer("/spec/goTemplateOptions")
            .and_then(Value::as_array)
            .is_some_and(|o| o.iter().any(|x| x == "missingkey=error"));
        Syntax::Go { strict }
    } else {
        Syntax::Fast
    };
    let name = appset["metadata"]["name"].as_str().unwrap_or_default();
    let namespace = appset["metadata"]["namespace"].as_str().unwrap_or_default();
    let generators = appset
        .pointer("/spec/generators")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut apps = Vec::new();
    for generator in &generators {
        let Some(clusters_gen) = generator.get("clusters") else {
            let kind = generator
                .as_object()
                .and_then(|o| o.keys().find(|k| *k != "selector").cloned())
                .unwrap_or_default();
            return Err((
                "ApplicationGenerationFromParamsError".into(),
                RenderError::Generator(kind).to_string(),
            ));
        };
        let values: BTreeMap<String, String> = clusters_gen
            .get("values")
            .and_then(|v| serde_json::from_value(v.clone()).ok())
            .unwrap_or_default();
        // A generator's own template is merged over the ApplicationSet's.
        let mut template = appset
            .pointer("/spec/template")
            .cloned()
            .unwrap_or(json!({}));
        if let Some(own) = clusters_gen.get("template") {
            merge(&mut template, own);
        }
        for cluster in selected(clusters_gen, clusters) {
            let render = |e: RenderError| ("RenderTemplateParamsError".to_string(), e.to_string());
            let params = cluster_params(cluster, &values, go).map_err(render)?;
            let t = render_value(&template, &params, go).map_err(render)?;
            apps.push(application(&t, name, namespace));
        }
    }
    Ok(apps)
}

fn merge(base: &mut Value, over: &Value) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                merge(b.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        (b, o) if !o.is_null() && o != &json!("") && o != &json!({}) => *b = o.clone(),
        _ => {}
    }
}

/// A rendered template as an Application of the ApplicationSet.
fn application(template: &Value, appset: &str, namespace: &str) -> Value {
    let meta = &template["metadata"];
    let mut labels = meta["labels"].as_object().cloned().unwrap_or_default();
    labels.insert(APPSET_LABEL.into(), json!(appset));
    let mut metadata = json!({
        "name": meta["name"],
        "namespace": meta["namespace"].as_str().filter(|s| !s.is_empty()).unwrap_or(namespace),
        "labels": labels,
    });
    for key in ["annotations", "finalizers"] {
        if !meta[key].is_null() {
            metadata[key] = meta[key].clone();
        }
    }
    json!({
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "kind": "Application",
        "metadata": metadata,
        "spec": template["spec"],
    })
}

/// Argo CD's three conditions for the outcome of one reconcile: an error
/// (reason, message) or none.
pub fn conditions(error: Option<(&str, &str)>, previous: &[Value], now: &Value) -> Vec<Value> {
    let (error_occurred, params, up_to_date) = match error {
        Some((reason, message)) => (
            ("True", reason, message),
            if reason == "RenderTemplateParamsError"
                || reason == "ApplicationGenerationFromParamsError"
            {
                ("False", "ErrorOccurred", message)
            } else {
                (
                    "True",
                    "ParametersGenerated",
                    "Successfully generated parameters for all Applications",
                )
            },
            ("False", reason, message),
        ),
        None => (
            (
                "False",
                "ApplicationSetUpToDate",
                "Successfully generated parameters for all Applications",
            ),
            (
                "True",
                "ParametersGenerated",
                "Successfully generated parameters for all Applications",
            ),
            (
                "True",
                "ApplicationSetUpToDate",
                "All applications have been generated successfully",
            ),
        ),
    };
    [
        ("ErrorOccurred", error_occurred),
        ("ParametersGenerated", params),
        ("ResourcesUpToDate", up_to_date),
    ]
    .into_iter()
    .map(|(type_, (status, reason, message))| {
        let old = previous.iter().find(|c| c["type"] == type_);
        let time = match old {
            Some(c) if c["status"] == status => c["lastTransitionTime"].clone(),
            _ => now.clone(),
        };
        json!({"type": type_, "status": status, "reason": reason, "message": message,
               "lastTransitionTime": time})
    })
    .collect()
}

// ---------------------------------------------------------------- reconcile

/// Brings one ApplicationSet's Applications to what it renders and
/// writes its status.
pub async fn reconcile(
    hub: &Client,
    clusters: &[Cluster],
    appset: &DynamicObject,
) -> kube::Result<()> {
    let name = appset.name_any();
    let namespace = appset.namespace().unwrap_or_default();
    let value = serde_json::to_value(appset).map_err(kube::Error::SerdeError)?;
    let uid = appset.metadata.uid.clone().unwrap_or_default();
    let apps: Api<DynamicObject> =
        Api::namespaced_with(hub.clone(), &namespace, &application_resource());
    let existing = apps
        .list(&kube::api::ListParams::default().labels(&format!("{APPSET_LABEL}={name}")))
        .await?;
    let policy = value
        .pointer("/spec/syncPolicy/applicationsSync")
        .and_then(Value::as_str)
        .unwrap_or("sync");
    let (allow_update, allow_delete) = match policy {
        "create-only" => (false, false),
        "create-update" => (true, false),
        "create-delete" => (false, true),
        _ => (true, true),
    };
    let mut error: Option<(String, String)> = None;
    let wanted = match desired(&value, clusters) {
        Ok(w) => w,
        Err(e) => {
            error = Some(e);
            Vec::new()
        }
    };
    let mut names = BTreeSet::new();
    for mut app in wanted {
        let app_name = app["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if !names.insert(app_name.clone()) {
            error.get_or_insert((
                "ApplicationValidationError".into(),
                format!(
                    "ApplicationSet {name} contains applications with duplicate name: {app_name}"
                ),
            ));
            continue;
        }
        let found = existing.items.iter().find(|a| a.name_any() == app_name);
        if found.is_some() && !allow_update {
            continue;
        }
        app["metadata"]["ownerReferences"] = json!([{
            "apiVersion": format!("{GROUP}/{VERSION}"), "kind": "ApplicationSet",
            "name": name, "uid": uid, "controller": true, "blockOwnerDeletion": true,
        }]);
        let same = found.is_some_and(|a| {
            a.data.get("spec") == app.get("spec") && a.labels().get(APPSET_LABEL) == Some(&name)
        });
        if same {
            continue;
        }
        let api: Api<DynamicObject> = match app["metadata"]["namespace"].as_str() {
            Some(ns) if ns != namespace => {
                Api::namespaced_with(hub.clone(), ns, &application_resource())
            }
            _ => apps.clone(),
        };
        match api
            .patch(
                &app_name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&app),
            )
            .await
        {
            Ok(_) => info!(appset = %name, app = %app_name, "Application generated"),
            Err(kube::Error::Api(e)) if (400..500).contains(&e.code) => {
                // Argo CD reports the API's refusal and carries on with the rest.
                warn!(error = %e.message, appset = %name, app = %app_name, "generated Application refused");
                error.get_or_insert(("UpdateApplicationError".into(), e.message.clone()));
            }
            Err(e) => return Err(e),
        }
    }
    if allow_delete
        && error.as_ref().is_none_or(|(r, _)| {
            r != "RenderTemplateParamsError" && r != "ApplicationGenerationFromParamsError"
        })
    {
        let preserve = value
            .pointer("/spec/syncPolicy/preserveResourcesOnDeletion")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        for app in &existing.items {
            let owned = app.owner_references().iter().any(|o| o.uid == uid);
            if !owned
                || names.contains(&app.name_any())
                || app.metadata.deletion_timestamp.is_some()
            {
                continue;
            }
            if preserve && app.finalizers().iter().any(|f| f == RESOURCES_FINALIZER) {
                let kept: Vec<&String> = app
                    .finalizers()
                    .iter()
                    .filter(|f| *f != RESOURCES_FINALIZER)
                    .collect();
                crate::writes::merge_patch(
                    &apps,
                    &app.name_any(),
                    &json!({"metadata": {"finalizers": kept}}),
                )
                .await?;
            }
            match apps.delete(&app.name_any(), &DeleteParams::default()).await {
                Ok(_) => {
                    info!(appset = %name, app = %app.name_any(), "Application no longer generated: deleted")
                }
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
    }
    write_status(hub, &value, &namespace, &name, &existing.items, error).await
}

async fn write_status(
    hub: &Client,
    appset: &Value,
    namespace: &str,
    name: &str,
    apps: &[DynamicObject],
    error: Option<(String, String)>,
) -> kube::Result<()> {
    let previous: Vec<Value> = appset
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let now = serde_json::to_value(crate::conditions::now()).map_err(kube::Error::SerdeError)?;
    let conds = conditions(
        error.as_ref().map(|(r, m)| (r.as_str(), m.as_str())),
        &previous,
        &now,
    );
    let mut resources: Vec<Value> = apps
        .iter()
        .filter(|a| a.metadata.deletion_timestamp.is_none())
        .map(|a| {
            let mut r = json!({"group": GROUP, "version": VERSION, "kind": "Application",
                   "namespace": a.namespace(), "name": a.name_any()});
            if let Some(s) = a.data.pointer("/status/sync/status") {
                r["status"] = s.clone();
            }
            if let Some(h) = a.data.pointer("/status/health") {
                r["health"] = h.clone();
            }
            r
        })
        .collect();
    resources.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    let status = json!({"conditions": conds, "resources": resources});
    if appset.get("status") == Some(&status) {
        return Ok(());
    }
    let api: Api<DynamicObject> =
        Api::namespaced_with(hub.clone(), namespace, &application_set_resource());
    match crate::writes::merge_patch_status(&api, name, &json!({"status": status})).await {
        Err(e) if crate::error::is_not_found(&e) => Ok(()),
        Err(e) => Err(e),
        Ok(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ClusterSpec;

    fn cluster(name: &str, env: &str) -> Cluster {
        let mut c = Cluster::new(
            name,
            ClusterSpec {
                api_endpoint: Some(format!("https://{name}.example:6443")),
                ..ClusterSpec::default()
            },
        );
        c.metadata.labels = Some([("environment".to_string(), env.to_string())].into());
        c
    }

    fn appset(go: bool, name: &str) -> Value {
        json!({
            "metadata": {"name": "guestbook", "namespace": "argocd"},
            "spec": {
                "goTemplate": go,
                "generators": [{"clusters": {
                    "selector": {"matchLabels": {"environment": "production"}},
                    "values": {"revision": if go { "{{.metadata.labels.environment}}-main" } else { "{{metadata.labels.environment}}-main" }},
                }}],
                "template": {
                    "metadata": {"name": name},
                    "spec": {
                        "project": "default",
                        "source": {"repoURL": "file:///repo", "path": "guestbook",
                                   "targetRevision": if go { "{{.values.revision}}" } else { "{{values.revision}}" }},
                        "destination": {"server": if go { "{{.server}}" } else { "{{server}}" }, "namespace": "guestbook"},
                    },
                },
            },
        })
    }

    #[test]
    fn a_clusters_generator_renders_one_application_per_selected_cluster() {
        let clusters = [
            cluster("prod-a", "production"),
            cluster("dev", "staging"),
            cluster("Prod_B", "production"),
        ];
        for go in [false, true] {
            let name = if go {
                "{{.nameNormalized}}-guestbook"
            } else {
                "{{nameNormalized}}-guestbook"
            };
            let apps = desired(&appset(go, name), &clusters).unwrap();
            let names: Vec<&str> = apps
                .iter()
                .map(|a| a["metadata"]["name"].as_str().unwrap())
                .collect();
            assert_eq!(names, ["prod-b-guestbook", "prod-a-guestbook"], "go: {go}");
            let a = &apps[1];
            assert_eq!(a["metadata"]["namespace"], "argocd");
            assert_eq!(a["metadata"]["labels"][APPSET_LABEL], "guestbook");
            assert_eq!(
                a["spec"]["destination"]["server"],
                "https://prod-a.example:6443"
            );
            assert_eq!(a["spec"]["source"]["targetRevision"], "production-main");
        }
    }

    #[test]
    fn fasttemplate_keeps_unknown_keys_and_go_templates_refuse_functions() {
        let params = BTreeMap::from([("name".to_string(), "c1".to_string())]);
        let go = Syntax::Go { strict: false };
        assert_eq!(
            render_str("{{ name }}-{{nope}}", &params, Syntax::Fast).unwrap(),
            "c1-{{nope}}"
        );
        assert_eq!(
            render_str("{{.name}}/{{ .nope }}", &params, go).unwrap(),
            "c1/<no value>"
        );
        assert!(render_str("{{.nope}}", &params, Syntax::Go { strict: true }).is_err());
        assert_eq!(
            render_str(
                r#"{{index .metadata.labels "a/b"}}"#,
                &BTreeMap::from([("metadata.labels.a/b".to_string(), "x".to_string())]),
                go
            )
            .unwrap(),
            "x"
        );
        assert!(matches!(
            render_str("{{ upper .name }}", &params, go),
            Err(RenderError::GoTemplate { .. })
        ));
    }

    #[test]
    fn errors_become_argo_cds_conditions() {
        let now = json!("2026-01-01T00:00:00Z");
        let c = conditions(Some(("UpdateApplicationError", "bad name")), &[], &now);
        assert_eq!(c[0]["type"], "ErrorOccurred");
        assert_eq!(c[0]["status"], "True");
        assert_eq!(c[0]["reason"], "UpdateApplicationError");
        assert_eq!(c[1]["status"], "True");
        assert_eq!(c[2]["type"], "ResourcesUpToDate");
        assert_eq!(c[2]["status"], "False");
        let ok = conditions(None, &c, &json!("later"));
        assert_eq!(ok[2]["status"], "True");
        assert_eq!(ok[2]["reason"], "ApplicationSetUpToDate");
        // ParametersGenerated stayed True: its transition time is kept.
        assert_eq!(ok[1]["lastTransitionTime"], now);
        let render = conditions(Some(("RenderTemplateParamsError", "x")), &[], &now);
        assert_eq!(render[1]["status"], "False");
    }

    #[test]
    fn names_are_normalized_as_argo_cd_does() {
        assert_eq!(normalize("Prod_B.eu"), "prod-b.eu");
    }
}
