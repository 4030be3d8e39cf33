//! Object metadata rules: names, labels, annotations, and server-set fields.

use rand::Rng;
use serde_json::{Map, Value};

use crate::error::Cause;

const DNS1123_LABEL_MAX: usize = 63;
const DNS1123_SUBDOMAIN_MAX: usize = 253;

fn is_label_char(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'
}

/// Errors for an RFC 1123 label (`my-name`, ≤ 63).
pub fn validate_dns1123_label(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > DNS1123_LABEL_MAX {
        errs.push(format!(
            "must be no more than {DNS1123_LABEL_MAX} characters"
        ));
    }
    let ok =
        !v.is_empty() && v.chars().all(is_label_char) && !v.starts_with('-') && !v.ends_with('-');
    if !ok {
        errs.push("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')".into());
    }
    errs
}

/// Errors for a name that must only be usable as a path segment, as
/// upstream's `IsValidPathSegmentName` (RBAC's names).
pub fn validate_path_segment_name(v: &str) -> Vec<String> {
    if v == "." || v == ".." {
        return vec![format!("may not be '{v}'")];
    }
    ["/", "%"]
        .into_iter()
        .filter(|c| v.contains(c))
        .map(|c| format!("may not contain '{c}'"))
        .collect()
}

/// Errors for an RFC 1123 subdomain (`example.com`, ≤ 253).
pub fn validate_dns1123_subdomain(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > DNS1123_SUBDOMAIN_MAX {
        errs.push(format!(
            "must be no more than {DNS1123_SUBDOMAIN_MAX} characters"
        ));
    }
    let ok = !v.is_empty()
        && v.split('.').all(|l| {
            !l.is_empty()
                && l.chars().all(is_label_char)
                && !l.starts_with('-')
                && !l.ends_with('-')
        });
    if !ok {
        errs.push("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".into());
    }
    errs
}

fn is_name_part(v: &str) -> bool {
    !v.is_empty()
        && v.len() <= 63
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
        && v.starts_with(|c: char| c.is_ascii_alphanumeric())
        && v.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// Errors for a qualified name (`prefix/name`), the form of label and annotation keys.
pub fn validate_qualified_name(v: &str) -> Vec<String> {
    let (prefix, name) = match v.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, v),
    };
    let mut errs = Vec::new();
    if let Some(p) = prefix {
        if p.is_empty() {
            errs.push("prefix part must be non-empty".into());
        } else {
            errs.extend(
                validate_dns1123_subdomain(p)
                    .into_iter()
                    .map(|e| format!("prefix part {e}")),
            );
        }
    }
    if !is_name_part(name) {
        errs.push("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with at most 63 characters".into());
    }
    errs
}

/// Errors for a label value (empty, or ≤ 63 of `[A-Za-z0-9_.-]` starting and ending alphanumeric).
pub fn validate_label_value(v: &str) -> Vec<String> {
    if v.is_empty() || is_name_part(v) {
        vec![]
    } else {
        vec!["a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')".into()]
    }
}

const ANNOTATIONS_MAX_BYTES: usize = 256 * 1024;

/// Validates labels, annotations, finalizers and ownerReferences in `meta`.
pub fn validate_object_meta(meta: &Map<String, Value>) -> Vec<Cause> {
    let mut causes = Vec::new();
    let invalid = |field: String, value: &str, msg: String| Cause {
        reason: "FieldValueInvalid",
        field,
        message: format!("Invalid value: \"{value}\": {msg}"),
    };
    if let Some(labels) = meta.get("labels") {
        match labels.as_object() {
            Some(labels) => {
                for (k, v) in labels {
                    for e in validate_qualified_name(k) {
                        causes.push(invalid("metadata.labels".into(), k, e));
                    }
                    match v.as_str() {
                        Some(s) => {
                            for e in validate_label_value(s) {
                                causes.push(invalid(format!("metadata.labels[{k}]"), s, e));
                            }
                        }
                        None => causes.push(invalid(
                            format!("metadata.labels[{k}]"),
                            &v.to_string(),
                            "must be a string".into(),
                        )),
                    }
                }
            }
            None if labels.is_null() => {}
            None => causes.push(invalid(
                "metadata.labels".into(),
                &labels.to_string(),
                "must be a map of strings".into(),
            )),
        }
    }
    if let Some(annotations) = meta.get("annotations").and_then(Value::as_object) {
        let mut total = 0;
        for (k, v) in annotations {
            for e in validate_qualified_name(&k.to_lowercase()) {
                causes.push(invalid("metadata.annotations".into(), k, e));
            }
            total += k.len() + v.as_str().map_or(0, str::len);
        }
        if total > ANNOTATIONS_MAX_BYTES {
            causes.push(Cause {
                reason: "FieldValueTooLong",
                field: "metadata.annotations".into(),
                message: format!("Too long: may not be more than {ANNOTATIONS_MAX_BYTES} bytes"),
            });
        }
    }
    if let Some(finalizers) = meta.get("finalizers").and_then(Value::as_array) {
        for (i, f) in finalizers.iter().enumerate() {
            let s = f.as_str().unwrap_or("");
            for e in validate_qualified_name(s) {
                causes.push(invalid(format!("metadata.finalizers[{i}]"), s, e));
            }
        }
    }
    if let Some(owners) = meta.get("ownerReferences").and_then(Value::as_array) {
        let controllers = owners
            .iter()
            .filter(|o| o.get("controller").and_then(Value::as_bool) == Some(true))
            .count();
        if controllers > 1 {
            causes.push(Cause {
                reason: "FieldValueInvalid",
                field: "metadata.ownerReferences".into(),
                message: "Invalid value: only one reference can have Controller set to true".into(),
            });
        }
        for (i, o) in owners.iter().enumerate() {
            for f in ["apiVersion", "kind", "name", "uid"] {
                if o.get(f).and_then(Value::as_str).unwrap_or("").is_empty() {
                    causes.push(Cause {
                        reason: "FieldValueRequired",
                        field: format!("metadata.ownerReferences[{i}].{f}"),
                        message: "Required value".into(),
                    });
                }
            }
        }
    }
    causes
}

/// `prefix` plus 5 random lower-case alphanumerics, truncated to fit.
pub fn generate_name(prefix: &str) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    let suffix: String = (0..5)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect();
    let max_prefix = DNS1123_SUBDOMAIN_MAX - 5;
    let prefix = if prefix.len() > max_prefix {
        &prefix[..max_prefix]
    } else {
        prefix
    };
    format!("{prefix}{suffix}")
}

/// A time, as RFC 3339 UTC with second precision: its fraction of a
/// second dropped, as upstream writes a `metav1.Time`, so that no
/// timestamp is ahead of the clock.
pub fn format_time(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Now, as [`format_time`] writes it. Every write stamps one
/// (managedFields, conditions); a thread formats each second once.
pub fn now() -> String {
    thread_local! {
        static FORMATTED: std::cell::RefCell<(i64, String)> =
            const { std::cell::RefCell::new((i64::MIN, String::new())) };
    }
    let now = jiff::Timestamp::now();
    FORMATTED.with_borrow_mut(|(at, text)| {
        if *at != now.as_second() {
            *text = format_time(now);
            *at = now.as_second();
        }
        text.clone()
    })
}

pub fn new_uid() -> String {
    uuid::Uuid::new_v4().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timestamp_drops_its_fraction_rather_than_rounding_into_the_future() {
        let t: jiff::Timestamp = "2026-11-28T23:59:31.9Z".parse().unwrap();
        assert_eq!(format_time(t), "2026-11-28T23:59:31Z");
        let stamped: jiff::Timestamp = now().parse().unwrap();
        assert!(stamped <= jiff::Timestamp::now());
    }

    #[test]
    fn names() {
        assert!(validate_dns1123_subdomain("a.b-c").is_empty());
        assert!(!validate_dns1123_subdomain("A").is_empty());
        assert!(!validate_dns1123_subdomain("-a").is_empty());
        assert!(!validate_dns1123_label("a.b").is_empty());
        assert!(validate_qualified_name("example.com/My_name").is_empty());
        assert!(!validate_qualified_name("/x").is_empty());
        assert!(validate_label_value("").is_empty());
        assert!(!validate_label_value("a b").is_empty());
        assert_eq!(generate_name("web-").len(), 9);
    }
}
