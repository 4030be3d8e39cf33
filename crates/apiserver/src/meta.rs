//! Object metadata rules: names, labels, annotations, and server-set fields.

use rand::Rng;
use serde_json::{Map, Value};

use flotilla_core::validation::{
    DNS1123_SUBDOMAIN_MAX, validate_label_value, validate_qualified_name,
};

use crate::error::Cause;

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
    fn generated_names_are_the_prefix_and_five_characters() {
        assert_eq!(generate_name("web-").len(), 9);
    }
}
