//! Kubernetes' rules for names and label values (apimachinery's
//! `validation`): each check returns the reasons a value is invalid, empty
//! when it is valid.

pub const DNS1123_LABEL_MAX: usize = 63;
pub const DNS1123_SUBDOMAIN_MAX: usize = 253;

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_label_values_follow_apimachinery() {
        assert!(validate_dns1123_subdomain("a.b-c").is_empty());
        assert!(!validate_dns1123_subdomain("A").is_empty());
        assert!(!validate_dns1123_subdomain("-a").is_empty());
        assert!(!validate_dns1123_label("a.b").is_empty());
        assert!(validate_qualified_name("example.com/My_name").is_empty());
        assert!(!validate_qualified_name("/x").is_empty());
        assert!(validate_label_value("").is_empty());
        assert!(!validate_label_value("a b").is_empty());
    }
}
