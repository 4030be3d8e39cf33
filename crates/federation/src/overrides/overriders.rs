//! Each overrider applied to one manifest, without I/O. An overrider that
//! cannot apply says why; none of them skips silently.

use serde_json::{Map, Value, json};

use super::image::Image;
use crate::api::{
    CommandArgsOverrider, FieldOverrider, ImageComponent, ImageOverrider, MapOverrider,
    OverrideOperator, Overriders, PlaintextOverrider, SubPathOperation,
};

/// Where a kind keeps its pod spec, for overriders that find containers
/// by themselves (Karmada's list).
fn pod_spec_path(kind: &str) -> Option<&'static str> {
    match kind {
        "Pod" => Some("/spec"),
        "ReplicaSet" | "Deployment" | "StatefulSet" | "DaemonSet" | "Job" => {
            Some("/spec/template/spec")
        }
        _ => None,
    }
}

/// Applies `o` to `manifest` in Karmada's order; on failure, names the
/// overrider and the cause.
pub fn apply(manifest: &mut Value, o: &Overriders) -> Result<(), String> {
    for (i, x) in o.image_overrider.iter().enumerate() {
        image(manifest, x).map_err(|e| format!("imageOverrider[{i}]: {e}"))?;
    }
    for x in &o.command_overrider {
        command_args(manifest, x, "command");
    }
    for x in &o.args_overrider {
        command_args(manifest, x, "args");
    }
    for x in &o.labels_overrider {
        map_field(manifest, x, "labels");
    }
    for x in &o.annotations_overrider {
        map_field(manifest, x, "annotations");
    }
    for (i, x) in o.field_overrider.iter().enumerate() {
        field(manifest, x).map_err(|e| format!("fieldOverrider[{i}]: {e}"))?;
    }
    for (i, x) in o.plaintext.iter().enumerate() {
        plaintext(manifest, x).map_err(|e| format!("plaintext[{i}]: {e}"))?;
    }
    Ok(())
}

fn image(manifest: &mut Value, o: &ImageOverrider) -> Result<(), String> {
    let paths: Vec<String> = match &o.predicate {
        Some(p) => {
            if manifest.pointer(&p.path).and_then(Value::as_str).is_none() {
                return Err(format!("predicate.path {} is not a string field", p.path));
            }
            vec![p.path.clone()]
        }
        None => {
            let kind = manifest.get("kind").and_then(Value::as_str).unwrap_or("");
            let Some(spec) = pod_spec_path(kind) else {
                // Not a workload whose images are known: nothing to do.
                return Ok(());
            };
            let n = manifest
                .pointer(&format!("{spec}/containers"))
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            (0..n)
                .map(|i| format!("{spec}/containers/{i}/image"))
                .collect()
        }
    };
    for path in paths {
        let Some(slot) = manifest.pointer_mut(&path) else {
            continue;
        };
        let current = slot.as_str().unwrap_or("");
        let mut img = Image::parse(current).map_err(|e| format!("{path}: {e}"))?;
        let v = o.value.as_str();
        match (o.component, o.operator) {
            (ImageComponent::Registry, OverrideOperator::Add) => img.registry.push_str(v),
            (ImageComponent::Registry, OverrideOperator::Replace) => img.registry = v.into(),
            (ImageComponent::Registry, OverrideOperator::Remove) => img.registry.clear(),
            (ImageComponent::Repository, OverrideOperator::Add) => img.repository.push_str(v),
            (ImageComponent::Repository, OverrideOperator::Replace) => img.repository = v.into(),
            (ImageComponent::Repository, OverrideOperator::Remove) => img.repository.clear(),
            (ImageComponent::Tag, OverrideOperator::Add) => {
                let t = format!("{}{v}", img.tag_or_digest());
                img.set_tag_or_digest(&t);
            }
            (ImageComponent::Tag, OverrideOperator::Replace) => img.set_tag_or_digest(v),
            (ImageComponent::Tag, OverrideOperator::Remove) => {
                img.tag.clear();
                img.digest.clear();
            }
        }
        *slot = Value::String(img.to_string());
    }
    Ok(())
}

/// commandOverrider and argsOverrider: `add` appends, `remove` drops every
/// listed value; a container of another name is left alone.
fn command_args(manifest: &mut Value, o: &CommandArgsOverrider, field: &str) {
    let kind = manifest.get("kind").and_then(Value::as_str).unwrap_or("");
    let Some(spec) = pod_spec_path(kind) else {
        return;
    };
    let Some(containers) = manifest
        .pointer_mut(&format!("{spec}/containers"))
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    for c in containers {
        if c.get("name").and_then(Value::as_str) != Some(o.container_name.as_str()) {
            continue;
        }
        let Some(c) = c.as_object_mut() else { continue };
        let current: Vec<String> = c
            .get(field)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
            .collect();
        let next: Vec<String> = match o.operator {
            OverrideOperator::Add => current.into_iter().chain(o.value.clone()).collect(),
            OverrideOperator::Remove => current
                .into_iter()
                .filter(|v| !o.value.contains(v))
                .collect(),
            // Karmada accepts only add and remove here; the CRD refuses
            // replace, so an old object with it changes nothing.
            OverrideOperator::Replace => current,
        };
        c.insert(field.into(), json!(next));
    }
}

/// labelsOverrider and annotationsOverrider: `add` sets every key,
/// `replace` and `remove` touch only keys that are there.
fn map_field(manifest: &mut Value, o: &MapOverrider, field: &str) {
    let Some(meta) = manifest.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    if o.operator == OverrideOperator::Add && !meta.get(field).is_some_and(Value::is_object) {
        meta.insert(field.into(), Value::Object(Map::new()));
    }
    let Some(map) = meta.get_mut(field).and_then(Value::as_object_mut) else {
        return;
    };
    for (k, v) in &o.value {
        match o.operator {
            OverrideOperator::Add => {
                map.insert(k.clone(), json!(v));
            }
            OverrideOperator::Replace => {
                if let Some(slot) = map.get_mut(k) {
                    *slot = json!(v);
                }
            }
            OverrideOperator::Remove => {
                map.remove(k);
            }
        }
    }
}

/// One JSON patch operation, as Karmada's overriders build them.
fn patch(
    doc: &mut Value,
    path: &str,
    operator: OverrideOperator,
    value: Option<&Value>,
) -> Result<(), String> {
    let op = match operator {
        OverrideOperator::Add => "add",
        OverrideOperator::Remove => "remove",
        OverrideOperator::Replace => "replace",
    };
    let mut operation = json!({"op": op, "path": path});
    if operator != OverrideOperator::Remove {
        operation["value"] = value.cloned().unwrap_or(Value::Null);
    }
    let p: json_patch::Patch =
        serde_json::from_value(json!([operation])).map_err(|e| format!("{op} {path}: {e}"))?;
    json_patch::patch(doc, &p).map_err(|e| format!("{op} {path}: {e}"))
}

fn plaintext(manifest: &mut Value, o: &PlaintextOverrider) -> Result<(), String> {
    patch(manifest, &o.path, o.operator, o.value.as_ref())
}

/// fieldOverrider: parses the string at `fieldPath` as JSON or YAML,
/// patches it, and writes it back in the same language.
fn field(manifest: &mut Value, o: &FieldOverrider) -> Result<(), String> {
    let Some(slot) = manifest.pointer_mut(&o.field_path) else {
        return Err(format!("fieldPath {} does not exist", o.field_path));
    };
    let Some(text) = slot.as_str() else {
        return Err(format!("fieldPath {} is not a string", o.field_path));
    };
    let apply_all = |doc: &mut Value, ops: &[SubPathOperation]| -> Result<(), String> {
        for op in ops {
            patch(doc, &op.sub_path, op.operator, op.value.as_ref())?;
        }
        Ok(())
    };
    let mut text = text.to_string();
    if !o.json.is_empty() {
        let mut doc: Value = serde_json::from_str(&text)
            .map_err(|e| format!("{} does not hold JSON: {e}", o.field_path))?;
        apply_all(&mut doc, &o.json)?;
        text = serde_json::to_string(&doc).map_err(|e| e.to_string())?;
    }
    if !o.yaml.is_empty() {
        let mut doc: Value = serde_yaml::from_str(&text)
            .map_err(|e| format!("{} does not hold YAML: {e}", o.field_path))?;
        apply_all(&mut doc, &o.yaml)?;
        text = serde_yaml::to_string(&doc).map_err(|e| e.to_string())?;
    }
    *slot = Value::String(text);
    Ok(())
}

/// The overriders as the Work's applied-overrides annotations list them.
pub fn applied_entry(policy: &str, o: &Overriders) -> Value {
    json!({"policyName": policy, "overriders": o})
}
