//! Structural-schema processing of objects on write: pruning of unknown
//! fields (reported for `fieldValidation`), defaulting and validation.
//!
//! Built-in kinds walk their k8s-openapi schema for unknown fields only (type
//! errors come from a typed decode, as Go's decoder reports them); custom
//! resources are pruned, defaulted and validated against their CRD schema.

use serde_json::{Map, Value};

use crate::error::Cause;

/// Finds a component schema by `$ref`.
pub type Resolver<'a> = &'a dyn Fn(&str) -> Option<&'a Value>;

#[derive(Default, Debug)]
pub struct Outcome {
    /// Paths of fields the schema does not know (removed from the object).
    pub unknown: Vec<String>,
    /// Validation failures (only when validating).
    pub causes: Vec<Cause>,
}

pub struct Walker<'a> {
    resolve: Resolver<'a>,
    /// Apply `default`s and check types and constraints (custom resources).
    validate: bool,
    pub outcome: Outcome,
}

impl<'a> Walker<'a> {
    pub fn new(resolve: Resolver<'a>, validate: bool) -> Self {
        Walker {
            resolve,
            validate,
            outcome: Outcome::default(),
        }
    }

    /// Follows `$ref` and single-element `allOf` wrappers.
    fn deref(&self, mut schema: &'a Value) -> &'a Value {
        for _ in 0..16 {
            if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
                match (self.resolve)(r) {
                    Some(s) => {
                        schema = s;
                        continue;
                    }
                    None => return schema,
                }
            }
            if let Some([only]) = schema
                .get("allOf")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
            {
                schema = only;
                continue;
            }
            break;
        }
        schema
    }

    /// `x-kubernetes-list-type`: a `set` holds no value twice, a `map` no
    /// two items with the same `x-kubernetes-list-map-keys`.
    fn check_list_type(&mut self, items: &[Value], schema: &Value, path: &str) {
        let identity: Box<dyn Fn(&Value) -> Value> =
            match schema.get("x-kubernetes-list-type").and_then(Value::as_str) {
                Some("set") => Box::new(Value::clone),
                Some("map") => {
                    let keys: Vec<String> = schema
                        .get("x-kubernetes-list-map-keys")
                        .and_then(Value::as_array)
                        .map(|k| {
                            k.iter()
                                .filter_map(Value::as_str)
                                .map(str::to_string)
                                .collect()
                        })
                        .unwrap_or_default();
                    Box::new(move |item| {
                        let present = keys
                            .iter()
                            .filter_map(|k| Some((k.clone(), item.get(k)?.clone())));
                        Value::Object(present.collect())
                    })
                }
                _ => return,
            };
        let mut seen: Vec<Value> = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let id = identity(item);
            if seen.contains(&id) {
                self.cause(
                    "FieldValueDuplicate",
                    &format!("{path}[{i}]"),
                    format!("Duplicate value: {}", go_value(&id)),
                );
            } else {
                seen.push(id);
            }
        }
    }

    fn cause(&mut self, reason: &'static str, path: &str, message: String) {
        self.outcome.causes.push(Cause {
            reason,
            field: path.to_string(),
            message,
        });
    }

    /// Processes the root of an object: apiVersion, kind and metadata are
    /// always allowed at the top of a resource and of embedded resources.
    pub fn walk_root(&mut self, value: &mut Value, schema: &'a Value) {
        self.walk(value, schema, "", true);
    }

    /// Walks one field of the root (`status`), named `field` in causes.
    pub fn walk_field(&mut self, value: &mut Value, schema: &'a Value, field: &str) {
        self.walk(value, schema, field, false);
    }

    fn walk(&mut self, value: &mut Value, schema: &'a Value, path: &str, root: bool) {
        let schema = self.deref(schema);
        let preserve = schema
            .get("x-kubernetes-preserve-unknown-fields")
            .and_then(Value::as_bool)
            == Some(true);
        let embedded = schema
            .get("x-kubernetes-embedded-resource")
            .and_then(Value::as_bool)
            == Some(true);
        if value.is_null() {
            if self.validate
                && !root
                && schema.get("nullable").and_then(Value::as_bool) != Some(true)
                && schema.get("type").is_some()
            {
                let t = schema.get("type").and_then(Value::as_str).unwrap_or("");
                self.cause(
                    "FieldValueTypeInvalid",
                    path,
                    format!(
                        "Invalid value: \"null\": {path} in body must be of type {t}: \"null\""
                    ),
                );
            }
            return;
        }
        if schema
            .get("x-kubernetes-int-or-string")
            .and_then(Value::as_bool)
            == Some(true)
        {
            if self.validate && !(value.is_string() || value.is_i64() || value.is_u64()) {
                self.cause(
                    "FieldValueTypeInvalid",
                    path,
                    format!("Invalid value: {value}: {path} in body must be of type int-or-string"),
                );
            }
            return;
        }
        let ty = schema.get("type").and_then(Value::as_str);
        if self.validate
            && let Some(ty) = ty
        {
            let ok = match ty {
                "object" => value.is_object(),
                "array" => value.is_array(),
                "string" => value.is_string(),
                "integer" => value.is_i64() || value.is_u64(),
                "number" => value.is_number(),
                "boolean" => value.is_boolean(),
                _ => true,
            };
            if !ok {
                let actual = match value {
                    Value::Object(_) => "object",
                    Value::Array(_) => "array",
                    Value::String(_) => "string",
                    Value::Number(n) if n.is_f64() => "number",
                    Value::Number(_) => "integer",
                    Value::Bool(_) => "boolean",
                    Value::Null => "null",
                };
                self.cause(
                    "FieldValueTypeInvalid",
                    path,
                    format!("Invalid value: \"{actual}\": {path} in body must be of type {ty}: \"{actual}\""),
                );
                return;
            }
        }
        if self.validate {
            self.check_constraints(value, schema, path);
        }
        match value {
            Value::Object(map) => self.walk_object(map, schema, path, root || embedded, preserve),
            Value::Array(items) => {
                if let Some(item_schema) = schema.get("items") {
                    for (i, item) in items.iter_mut().enumerate() {
                        self.walk(item, item_schema, &format!("{path}[{i}]"), false);
                    }
                }
            }
            _ => {}
        }
    }

    fn walk_object(
        &mut self,
        map: &mut Map<String, Value>,
        schema: &'a Value,
        path: &str,
        resource_root: bool,
        preserve: bool,
    ) {
        let props = schema.get("properties").and_then(Value::as_object);
        let additional = schema.get("additionalProperties");
        if self.validate
            && let Some(props) = props
        {
            for (name, prop) in props {
                if !map.contains_key(name)
                    && let Some(default) = self.deref(prop).get("default")
                {
                    map.insert(name.clone(), default.clone());
                }
            }
        }
        let keys: Vec<String> = map.keys().cloned().collect();
        for key in keys {
            let child = join(path, &key);
            if resource_root && matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
                if let Some(p) = props.and_then(|p| p.get(&key))
                    && key == "metadata"
                    && self.deref(p).get("properties").is_some()
                    && let Some(v) = map.get_mut(&key)
                {
                    self.walk(v, p, &child, false);
                }
                continue;
            }
            if map.get(&key).is_some_and(Value::is_null)
                && self.drop_null(map, &key, props, additional)
            {
                continue;
            }
            if let Some(p) = props.and_then(|p| p.get(&key)) {
                if let Some(v) = map.get_mut(&key) {
                    self.walk(v, p, &child, false);
                }
            } else if let Some(a) = additional.filter(|a| a.is_object()) {
                if let Some(v) = map.get_mut(&key) {
                    self.walk(v, a, &child, false);
                }
            } else if preserve || additional.and_then(Value::as_bool) == Some(true) {
                // Kept as is.
            } else if props.is_some()
                || additional.is_some()
                || schema.get("type").and_then(Value::as_str) == Some("object")
            {
                map.remove(&key);
                self.outcome.unknown.push(child);
            }
        }
        if self.validate
            && let Some(required) = schema.get("required").and_then(Value::as_array)
        {
            for r in required.iter().filter_map(Value::as_str) {
                if !map.contains_key(r) {
                    self.cause(
                        "FieldValueRequired",
                        &join(path, r),
                        "Required value".into(),
                    );
                }
            }
        }
    }

    /// A field sent as `null`: gone from a built-in object, as Go's
    /// decoder makes it its zero value, which is not written; in a custom
    /// resource, defaulted where its schema has a default, kept where it
    /// is `nullable`, else pruned (apiextensions-apiserver's
    /// PruneNonNullableNullsWithoutDefaults). Whether it went.
    fn drop_null(
        &self,
        map: &mut Map<String, Value>,
        key: &str,
        props: Option<&'a Map<String, Value>>,
        additional: Option<&'a Value>,
    ) -> bool {
        let property = props.and_then(|p| p.get(key));
        if !self.validate {
            if property.is_some() {
                map.remove(key);
            }
            return property.is_some();
        }
        let Some(schema) = property.or(additional.filter(|a| a.is_object())) else {
            return false;
        };
        let schema = self.deref(schema);
        if schema.get("nullable").and_then(Value::as_bool) == Some(true) {
            return false;
        }
        match schema.get("default") {
            Some(default) => {
                map.insert(key.to_string(), default.clone());
                false
            }
            None => {
                map.remove(key);
                true
            }
        }
    }

    fn check_constraints(&mut self, value: &Value, schema: &Value, path: &str) {
        if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
            && !allowed.contains(value)
        {
            let list: Vec<String> = allowed.iter().map(|v| v.to_string()).collect();
            self.cause(
                "FieldValueNotSupported",
                path,
                format!(
                    "Unsupported value: {value}: supported values: {}",
                    list.join(", ")
                ),
            );
        }
        let num = |k: &str| schema.get(k).and_then(Value::as_f64);
        if let Some(n) = value.as_f64() {
            if let Some(min) = num("minimum") {
                let exclusive =
                    schema.get("exclusiveMinimum").and_then(Value::as_bool) == Some(true);
                if n < min || (exclusive && n == min) {
                    self.cause("FieldValueInvalid", path, format!("Invalid value: {value}: {path} in body should be greater than or equal to {min}"));
                }
            }
            if let Some(max) = num("maximum") {
                let exclusive =
                    schema.get("exclusiveMaximum").and_then(Value::as_bool) == Some(true);
                if n > max || (exclusive && n == max) {
                    self.cause("FieldValueInvalid", path, format!("Invalid value: {value}: {path} in body should be less than or equal to {max}"));
                }
            }
        }
        if let Some(s) = value.as_str() {
            let len = s.chars().count() as f64;
            if let Some(min) = num("minLength")
                && len < min
            {
                self.cause(
                    "FieldValueInvalid",
                    path,
                    format!(
                        "Invalid value: \"{s}\": {path} in body should be at least {min} chars long"
                    ),
                );
            }
            if let Some(max) = num("maxLength")
                && len > max
            {
                self.cause(
                    "FieldValueTooLong",
                    path,
                    format!("Too long: may not be more than {max} bytes"),
                );
            }
            if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
                match regex::Regex::new(pattern) {
                    Ok(re) if !re.is_match(s) => self.cause(
                        "FieldValueInvalid",
                        path,
                        format!("Invalid value: \"{s}\": {path} in body should match '{pattern}'"),
                    ),
                    _ => {}
                }
            }
        }
        if let Some(items) = value.as_array() {
            let len = items.len() as f64;
            if let Some(min) = num("minItems")
                && len < min
            {
                self.cause(
                    "FieldValueInvalid",
                    path,
                    format!(
                        "Invalid value: {len}: {path} in body should have at least {min} items"
                    ),
                );
            }
            if let Some(max) = num("maxItems")
                && len > max
            {
                self.cause(
                    "FieldValueTooMany",
                    path,
                    format!("Too many: {len}: must have at most {max} items"),
                );
            }
            self.check_list_type(items, schema, path);
        }
        if let Some(map) = value.as_object() {
            let len = map.len() as f64;
            if let Some(min) = num("minProperties")
                && len < min
            {
                self.cause(
                    "FieldValueInvalid",
                    path,
                    format!(
                        "Invalid value: {len}: {path} in body should have at least {min} properties"
                    ),
                );
            }
            if let Some(max) = num("maxProperties")
                && len > max
            {
                self.cause(
                    "FieldValueTooMany",
                    path,
                    format!("Too many: {len}: must have at most {max} properties"),
                );
            }
        }
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// A value as upstream's messages print it (Go's `%#v` of the decoded
/// JSON): `"a"`, `map[string]interface {}{"effect":"NoSchedule", "key":"k"}`.
fn go_value(v: &Value) -> String {
    match v {
        Value::Object(m) => {
            // Go prints a map's keys sorted.
            let mut fields: Vec<String> = m
                .iter()
                .map(|(k, v)| format!("{k:?}:{}", go_value(v)))
                .collect();
            fields.sort();
            format!("map[string]interface {{}}{{{}}}", fields.join(", "))
        }
        Value::Array(a) => {
            let items: Vec<String> = a.iter().map(go_value).collect();
            format!("[]interface {{}}{{{}}}", items.join(", "))
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn prunes_defaults_and_validates() {
        let schema = json!({"type": "object", "properties": {
            "spec": {"type": "object", "required": ["size"], "properties": {
                "size": {"type": "integer", "minimum": 1},
                "mode": {"type": "string", "default": "fast", "enum": ["fast", "slow"]},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}});
        let mut obj = json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "a"},
                             "spec": {"size": 0, "extra": 1, "free": {"any": {"thing": 1}}}});
        let none = |_: &str| -> Option<&Value> { None };
        let mut w = Walker::new(&none, true);
        w.walk_root(&mut obj, &schema);
        assert_eq!(w.outcome.unknown, vec!["spec.extra"]);
        assert_eq!(obj["spec"]["mode"], "fast");
        assert_eq!(obj["spec"]["free"]["any"]["thing"], 1);
        assert_eq!(obj["metadata"]["name"], "a");
        assert_eq!(w.outcome.causes.len(), 1);
        assert_eq!(w.outcome.causes[0].field, "spec.size");

        let mut bad = json!({"spec": {"mode": "other", "size": "x"}});
        let none = |_: &str| -> Option<&Value> { None };
        let mut w = Walker::new(&none, true);
        w.walk_root(&mut bad, &schema);
        let fields: Vec<_> = w.outcome.causes.iter().map(|c| c.field.as_str()).collect();
        assert!(
            fields.contains(&"spec.mode") && fields.contains(&"spec.size"),
            "{fields:?}"
        );
    }

    #[test]
    fn list_types_refuse_duplicates() {
        let schema = json!({"type": "object", "properties": {
            "taints": {"type": "array", "x-kubernetes-list-type": "map",
                       "x-kubernetes-list-map-keys": ["key", "effect"],
                       "items": {"type": "object", "properties": {
                           "key": {"type": "string"}, "effect": {"type": "string"},
                           "value": {"type": "string"}}}},
            "names": {"type": "array", "x-kubernetes-list-type": "set",
                      "items": {"type": "string"}}}});
        let mut obj = json!({
            "taints": [{"key": "k", "effect": "NoSchedule", "value": "a"},
                       {"key": "k", "effect": "NoExecute"},
                       {"key": "k", "effect": "NoSchedule", "value": "b"}],
            "names": ["a", "b", "a"]});
        let none = |_: &str| -> Option<&Value> { None };
        let mut w = Walker::new(&none, true);
        w.walk_root(&mut obj, &schema);
        let causes: Vec<_> = w
            .outcome
            .causes
            .iter()
            .map(|c| (c.field.as_str(), c.message.as_str()))
            .collect();
        assert_eq!(
            causes,
            vec![
                (
                    "taints[2]",
                    "Duplicate value: map[string]interface {}{\"effect\":\"NoSchedule\", \"key\":\"k\"}"
                ),
                ("names[2]", "Duplicate value: \"a\""),
            ]
        );
    }
}
