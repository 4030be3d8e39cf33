//! The subset of Kubernetes JSONPath that printer columns use:
//! `.a.b`, `['a.b']`, `[0]`, `[*]` and `[?(@.k=="v")]`.

use serde_json::Value;

#[derive(Debug, PartialEq)]
enum Step {
    Field(String),
    Index(usize),
    All,
    Filter(Vec<String>, String),
}

fn parse(path: &str) -> Option<Vec<Step>> {
    let path = path.trim().trim_start_matches('{').trim_end_matches('}');
    let path = path.strip_prefix('$').unwrap_or(path);
    let mut steps = Vec::new();
    let chars: Vec<char> = path.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '.' => {
                let start = i + 1;
                i = start;
                while i < chars.len() && chars[i] != '.' && chars[i] != '[' {
                    i += 1;
                }
                let name: String = chars[start..i].iter().collect();
                if !name.is_empty() {
                    steps.push(Step::Field(name));
                }
            }
            '[' => {
                let end = chars[i..].iter().position(|c| *c == ']')? + i;
                let inner: String = chars[i + 1..end].iter().collect();
                let inner = inner.trim();
                if inner == "*" {
                    steps.push(Step::All);
                } else if let Ok(n) = inner.parse::<usize>() {
                    steps.push(Step::Index(n));
                } else if let Some(f) = inner.strip_prefix("?(@.").and_then(|f| f.strip_suffix(')'))
                {
                    let (lhs, rhs) = f.split_once("==")?;
                    let rhs = rhs.trim().trim_matches(|c| c == '"' || c == '\'');
                    steps.push(Step::Filter(
                        lhs.trim().split('.').map(String::from).collect(),
                        rhs.to_string(),
                    ));
                } else {
                    // `['cluster\.x-k8s\.io/cluster-name']`: a backslash
                    // escapes the character after it, as in upstream's
                    // printer columns.
                    let quoted = inner.trim_matches(|c| c == '\'' || c == '"');
                    let mut name = String::new();
                    let mut escaped = false;
                    for c in quoted.chars() {
                        if c == '\\' && !escaped {
                            escaped = true;
                            continue;
                        }
                        escaped = false;
                        name.push(c);
                    }
                    steps.push(Step::Field(name));
                }
                i = end + 1;
            }
            _ => {
                // A path without a leading dot, as some CRDs write it.
                let start = i;
                while i < chars.len() && chars[i] != '.' && chars[i] != '[' {
                    i += 1;
                }
                steps.push(Step::Field(chars[start..i].iter().collect()));
            }
        }
    }
    Some(steps)
}

/// Every value `path` selects in `v`.
pub fn select(v: &Value, path: &str) -> Vec<Value> {
    let Some(steps) = parse(path) else {
        return vec![];
    };
    let mut current = vec![v];
    for step in &steps {
        let mut next = Vec::new();
        for c in current {
            match step {
                Step::Field(f) => next.extend(c.get(f)),
                Step::Index(n) => next.extend(c.get(*n)),
                Step::All => match c {
                    Value::Array(a) => next.extend(a.iter()),
                    Value::Object(m) => next.extend(m.values()),
                    _ => {}
                },
                Step::Filter(lhs, rhs) => {
                    if let Value::Array(a) = c {
                        for item in a {
                            let mut x = Some(item);
                            for f in lhs {
                                x = x.and_then(|x| x.get(f));
                            }
                            let matches = match x {
                                Some(Value::String(s)) => s == rhs,
                                Some(other) => {
                                    serde_json::to_string(other).is_ok_and(|o| o == *rhs)
                                }
                                None => false,
                            };
                            if matches {
                                next.push(item);
                            }
                        }
                    }
                }
            }
        }
        current = next;
    }
    current.into_iter().cloned().collect()
}

/// The first selected value, if any.
pub fn first(v: &Value, path: &str) -> Option<Value> {
    select(v, path).into_iter().next()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn selects_fields_indices_and_filters() {
        let o = json!({"spec": {"replicas": 3, "a.b": "dot"},
                       "status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "X", "status": "False"}]}});
        assert_eq!(first(&o, ".spec.replicas"), Some(json!(3)));
        assert_eq!(first(&o, ".spec['a.b']"), Some(json!("dot")));
        assert_eq!(first(&o, ".spec['a\\.b']"), Some(json!("dot")));
        assert_eq!(first(&o, ".status.conditions[1].type"), Some(json!("X")));
        assert_eq!(
            first(&o, ".status.conditions[?(@.type==\"Ready\")].status"),
            Some(json!("True"))
        );
        assert_eq!(select(&o, ".status.conditions[*].type").len(), 2);
        assert_eq!(first(&o, ".spec.missing"), None);
    }
}
