//! Which namespaces and resources a Backup or Restore takes, as Velero's
//! include/exclude lists decide: an empty include list or `*` takes
//! everything, an exclusion always wins. No I/O.

use serde_json::Value;

/// Velero's `IncludesExcludes` of one dimension.
#[derive(Clone, Debug, Default)]
pub struct IncludesExcludes {
    includes: Vec<String>,
    excludes: Vec<String>,
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str())
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

impl IncludesExcludes {
    /// From a spec's `included<X>` and `excluded<X>` lists.
    pub fn of(includes: &Value, excludes: &Value) -> IncludesExcludes {
        IncludesExcludes {
            includes: strings(includes),
            excludes: strings(excludes),
        }
    }

    pub fn exclude(&mut self, more: &[&str]) {
        self.excludes.extend(more.iter().map(|s| s.to_string()));
    }

    /// Whether `name` is taken; `aliases` are other names of the same
    /// thing (a resource's plural, `plural.group`, kind, short names).
    pub fn includes(&self, aliases: &[&str]) -> bool {
        let named = |list: &[String]| {
            list.iter()
                .any(|x| x == "*" || aliases.iter().any(|a| a.eq_ignore_ascii_case(x)))
        };
        if named(&self.excludes) {
            return false;
        }
        self.includes.is_empty() || named(&self.includes)
    }

    /// Whether everything is taken (no include list but `*`, nothing
    /// excluded).
    pub fn everything(&self) -> bool {
        self.excludes.is_empty() && self.includes.iter().all(|i| i == "*")
    }

    pub fn included(&self) -> &[String] {
        &self.includes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn exclusions_win_and_an_empty_list_takes_everything() {
        let all = IncludesExcludes::of(&Value::Null, &Value::Null);
        assert!(all.everything() && all.includes(&["shop"]));
        let star = IncludesExcludes::of(&json!(["*"]), &json!(["kube-system"]));
        assert!(!star.everything());
        assert!(star.includes(&["shop"]) && !star.includes(&["kube-system"]));
        let some = IncludesExcludes::of(&json!(["Deployments"]), &Value::Null);
        assert!(some.includes(&["deployments", "deployments.apps", "deployment"]));
        assert!(!some.includes(&["pods"]));
    }
}
