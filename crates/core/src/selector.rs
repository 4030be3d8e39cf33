//! Label and field selectors, with the syntax and errors of upstream.

use std::collections::BTreeSet;

use serde_json::Value;

#[derive(Clone, Debug, PartialEq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, BTreeSet<String>),
    NotIn(String, BTreeSet<String>),
    Exists(String),
    DoesNotExist(String),
    /// Numeric comparisons (`key>3`), supported by upstream label selectors.
    Gt(String, i64),
    Lt(String, i64),
}

/// A parsed `labelSelector`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LabelSelector(Vec<Requirement>);

/// Splits on commas that are not inside parentheses.
fn split_top_level(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

fn valid_label_key(k: &str) -> bool {
    crate::validation::validate_qualified_name(k).is_empty()
}

fn valid_label_value(v: &str) -> bool {
    crate::validation::validate_label_value(v).is_empty()
}

impl LabelSelector {
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(LabelSelector(reqs));
        }
        for part in split_top_level(s) {
            let part = part.trim();
            if part.is_empty() {
                return Err(format!("unable to parse requirement: found '' in \"{s}\""));
            }
            let req = parse_requirement(part)?;
            reqs.push(req);
        }
        Ok(LabelSelector(reqs))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The requirements as NodeSelectorRequirements (`key`, `operator`,
    /// `values`), the form node affinity and Liqo's cluster selectors use.
    pub fn requirements_json(&self) -> Vec<Value> {
        let set = |vs: &BTreeSet<String>| vs.iter().cloned().collect::<Vec<_>>();
        self.0
            .iter()
            .map(|r| match r {
                Requirement::Equals(k, v) => {
                    serde_json::json!({"key": k, "operator": "In", "values": [v]})
                }
                Requirement::NotEquals(k, v) => {
                    serde_json::json!({"key": k, "operator": "NotIn", "values": [v]})
                }
                Requirement::In(k, vs) => {
                    serde_json::json!({"key": k, "operator": "In", "values": set(vs)})
                }
                Requirement::NotIn(k, vs) => {
                    serde_json::json!({"key": k, "operator": "NotIn", "values": set(vs)})
                }
                Requirement::Exists(k) => serde_json::json!({"key": k, "operator": "Exists"}),
                Requirement::DoesNotExist(k) => {
                    serde_json::json!({"key": k, "operator": "DoesNotExist"})
                }
                Requirement::Gt(k, n) => {
                    serde_json::json!({"key": k, "operator": "Gt", "values": [n.to_string()]})
                }
                Requirement::Lt(k, n) => {
                    serde_json::json!({"key": k, "operator": "Lt", "values": [n.to_string()]})
                }
            })
            .collect()
    }

    pub fn matches(&self, labels: Option<&serde_json::Map<String, Value>>) -> bool {
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            Requirement::Equals(k, v) => get(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => get(k) != Some(v.as_str()),
            Requirement::In(k, vs) => get(k).is_some_and(|x| vs.contains(x)),
            Requirement::NotIn(k, vs) => !get(k).is_some_and(|x| vs.contains(x)),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::DoesNotExist(k) => get(k).is_none(),
            Requirement::Gt(k, n) => get(k)
                .and_then(|x| x.parse::<i64>().ok())
                .is_some_and(|x| x > *n),
            Requirement::Lt(k, n) => get(k)
                .and_then(|x| x.parse::<i64>().ok())
                .is_some_and(|x| x < *n),
        })
    }
}

fn parse_set(s: &str, whole: &str) -> Result<BTreeSet<String>, String> {
    let inner = s
        .trim()
        .strip_prefix('(')
        .and_then(|x| x.strip_suffix(')'))
        .ok_or_else(|| {
            format!("unable to parse requirement: expected '(' and ')' in \"{whole}\"")
        })?;
    let mut set = BTreeSet::new();
    for v in inner.split(',') {
        let v = v.trim();
        if !valid_label_value(v) {
            return Err(format!("invalid label value: \"{v}\" in \"{whole}\""));
        }
        set.insert(v.to_string());
    }
    Ok(set)
}

fn parse_requirement(part: &str) -> Result<Requirement, String> {
    let check_key = |k: &str| -> Result<String, String> {
        let k = k.trim();
        if valid_label_key(k) {
            Ok(k.to_string())
        } else {
            Err(format!(
                "unable to parse requirement: invalid label key \"{k}\""
            ))
        }
    };
    let check_value = |v: &str| -> Result<String, String> {
        let v = v.trim();
        if valid_label_value(v) {
            Ok(v.to_string())
        } else {
            Err(format!(
                "unable to parse requirement: invalid label value: \"{v}\""
            ))
        }
    };
    if let Some(k) = part.strip_prefix('!') {
        return Ok(Requirement::DoesNotExist(check_key(k)?));
    }
    for (op, ctor) in [("!=", 0), ("==", 1), ("=", 1)] {
        if let Some((k, v)) = part.split_once(op) {
            let (k, v) = (check_key(k)?, check_value(v)?);
            return Ok(if ctor == 0 {
                Requirement::NotEquals(k, v)
            } else {
                Requirement::Equals(k, v)
            });
        }
    }
    for (op, gt) in [(">", true), ("<", false)] {
        if let Some((k, v)) = part.split_once(op) {
            let n = v.trim().parse::<i64>().map_err(|_| {
                format!("unable to parse requirement: for 'Gt', 'Lt' operators, the value must be an integer in \"{part}\"")
            })?;
            let k = check_key(k)?;
            return Ok(if gt {
                Requirement::Gt(k, n)
            } else {
                Requirement::Lt(k, n)
            });
        }
    }
    let words: Vec<&str> = part.splitn(2, char::is_whitespace).collect();
    if words.len() == 2 {
        let key = check_key(words[0])?;
        let rest = words[1].trim_start();
        if let Some(set) = rest.strip_prefix("notin") {
            return Ok(Requirement::NotIn(key, parse_set(set, part)?));
        }
        if let Some(set) = rest.strip_prefix("in") {
            return Ok(Requirement::In(key, parse_set(set, part)?));
        }
        return Err(format!(
            "unable to parse requirement: found '{rest}', expected: in, notin, =, ==, !=, gt, lt"
        ));
    }
    Ok(Requirement::Exists(check_key(part)?))
}

/// A parsed `fieldSelector`: conjunction of `field=value` / `field!=value`.
#[derive(Clone, Debug, Default)]
pub struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    /// Parses and checks every field against `supported`.
    pub fn parse(s: &str, supported: &dyn Fn(&str) -> bool) -> Result<Self, String> {
        let mut terms = Vec::new();
        if s.trim().is_empty() {
            return Ok(FieldSelector(terms));
        }
        for part in s.split(',') {
            let part = part.trim();
            let (field, eq, value) = if let Some((f, v)) = part.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = part.split_once("==") {
                (f, true, v)
            } else if let Some((f, v)) = part.split_once('=') {
                (f, true, v)
            } else {
                return Err(format!(
                    "invalid selector: '{s}'; can't understand '{part}'"
                ));
            };
            let field = field.trim();
            if !supported(field) {
                return Err(format!("field label not supported: {field}"));
            }
            terms.push((field.to_string(), eq, value.trim().to_string()));
        }
        Ok(FieldSelector(terms))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The value `field` must equal, when a term requires one.
    pub fn equal_to(&self, field: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(f, eq, _)| *eq && f == field)
            .map(|(_, _, v)| v.as_str())
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(field, eq, value)| {
            let actual = field_value(obj, field);
            (actual == *value) == *eq
        })
    }
}

/// The string value of a selectable field (`a.b.c` as a path); absent,
/// its Go zero value, as upstream formats the typed field: `false` for the
/// booleans, `0` for the counts, empty for the rest (so
/// `spec.unschedulable==false` selects the nodes that never set it).
pub fn field_value(obj: &Value, field: &str) -> String {
    let absent = || match field {
        "spec.unschedulable" | "spec.hostNetwork" => "false".to_string(),
        "status.replicas" | "status.successful" => "0".to_string(),
        _ => String::new(),
    };
    let mut v = obj;
    for part in field.split('.') {
        match v.get(part) {
            Some(x) => v = x,
            None => return absent(),
        }
    }
    match v {
        Value::String(s) => s.clone(),
        Value::Null => absent(),
        other => other.to_string(),
    }
}

/// A `metav1.LabelSelector` (`matchLabels`, `matchExpressions`) in the
/// string form of `kubectl get -l`: `app=web,tier in (a,b),!legacy`.
pub fn format_label_selector(selector: &Value) -> String {
    let mut parts = Vec::new();
    if let Some(labels) = selector.get("matchLabels").and_then(Value::as_object) {
        for (k, v) in labels {
            parts.push(format!("{k}={}", v.as_str().unwrap_or_default()));
        }
    }
    let expressions = selector.get("matchExpressions").and_then(Value::as_array);
    for e in expressions.into_iter().flatten() {
        let key = e.get("key").and_then(Value::as_str).unwrap_or_default();
        let values: Vec<&str> = e
            .get("values")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let values = values.join(",");
        match e
            .get("operator")
            .and_then(Value::as_str)
            .unwrap_or_default()
        {
            "In" => parts.push(format!("{key} in ({values})")),
            "NotIn" => parts.push(format!("{key} notin ({values})")),
            "Exists" => parts.push(key.to_string()),
            "DoesNotExist" => parts.push(format!("!{key}")),
            _ => {}
        }
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(v: Value) -> serde_json::Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn equality_and_set_based_selectors() {
        let l = labels(json!({"app": "web", "tier": "front", "n": "5"}));
        let m = |s: &str| LabelSelector::parse(s).unwrap().matches(Some(&l));
        assert!(m("app=web"));
        assert!(m("app==web,tier!=back"));
        assert!(m("app in (web, api),tier notin (back)"));
        assert!(m("app,!missing"));
        assert!(!m("missing"));
        assert!(!m("app notin (web)"));
        assert!(m("n>4") && !m("n<5"));
        assert!(LabelSelector::parse("app=we b").is_err());
        assert!(LabelSelector::parse("app in web").is_err());
    }

    #[test]
    fn field_selectors_check_supported_fields() {
        let ok = |f: &str| f == "metadata.name";
        let o = json!({"metadata": {"name": "a"}});
        assert!(
            FieldSelector::parse("metadata.name=a", &ok)
                .unwrap()
                .matches(&o)
        );
        assert!(
            !FieldSelector::parse("metadata.name!=a", &ok)
                .unwrap()
                .matches(&o)
        );
        assert!(FieldSelector::parse("spec.x=a", &ok).is_err());
    }

    #[test]
    fn absent_fields_read_as_their_go_zero_values() {
        let node = json!({"spec": {}});
        assert_eq!(field_value(&node, "spec.unschedulable"), "false");
        let cordoned = json!({"spec": {"unschedulable": true}});
        assert_eq!(field_value(&cordoned, "spec.unschedulable"), "true");
        assert_eq!(field_value(&json!({}), "status.replicas"), "0");
        assert_eq!(field_value(&json!({}), "spec.nodeName"), "");
    }
}
