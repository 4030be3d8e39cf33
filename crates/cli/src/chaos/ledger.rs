//! What the load was told: every acknowledged write of a template, and
//! the writes whose answer never came (the hub was killed or stopped
//! under them), which may or may not have happened. No I/O: the checks
//! compare what the fleet holds with what this allows.

use std::collections::BTreeMap;

/// A template's value (`data.v`), or None for "absent".
pub type Value = Option<String>;

#[derive(Clone, Debug, Default, PartialEq)]
struct Entry {
    /// The last acknowledged state; None until one is.
    acked: Option<Value>,
    /// Writes tried since, whose answers were lost.
    unsure: Vec<Value>,
}

/// Every template the load touched.
#[derive(Clone, Debug, Default)]
pub struct Ledger {
    entries: BTreeMap<String, Entry>,
}

impl Ledger {
    /// `name` is now `value` (None: deleted), as the hub answered.
    pub fn acked(&mut self, name: &str, value: Value) {
        let e = self.entries.entry(name.to_string()).or_default();
        e.acked = Some(value);
        e.unsure.clear();
    }

    /// A write of `value` to `name` whose answer was lost.
    pub fn unsure(&mut self, name: &str, value: Value) {
        self.entries
            .entry(name.to_string())
            .or_default()
            .unsure
            .push(value);
    }

    /// What `name` may be now: its last acknowledged state, or any write
    /// tried since (never written: absent).
    pub fn allowed(&self, name: &str) -> Vec<Value> {
        let Some(e) = self.entries.get(name) else {
            return vec![None];
        };
        let mut all = vec![e.acked.clone().unwrap_or(None)];
        all.extend(e.unsure.iter().cloned());
        all
    }

    /// Whether `name` is known present with its value (acknowledged and
    /// nothing unsure since).
    pub fn known(&self, name: &str) -> Option<&Value> {
        self.entries
            .get(name)
            .filter(|e| e.unsure.is_empty())
            .and_then(|e| e.acked.as_ref())
    }

    /// The names that may be present now (acknowledged or unsure).
    pub fn maybe_present(&self) -> Vec<String> {
        self.names()
            .filter(|n| self.allowed(n).iter().any(Option::is_some))
            .cloned()
            .collect()
    }

    pub fn names(&self) -> impl Iterator<Item = &String> {
        self.entries.keys()
    }

    /// How many writes were acknowledged or unsure, for the report.
    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

/// The hub's templates (`name` → value) against the ledger: a line per
/// template whose state no write allows, or that no write made.
pub fn templates_violations(ledger: &Ledger, hub: &BTreeMap<String, String>) -> Vec<String> {
    let mut out = Vec::new();
    for name in ledger.names() {
        let now: Value = hub.get(name).cloned();
        let allowed = ledger.allowed(name);
        if !allowed.contains(&now) {
            out.push(format!(
                "template {name}: the hub holds {}, acknowledged {} (unsure writes since: {})",
                show(&now),
                show(&allowed[0]),
                allowed[1..].iter().map(show).collect::<Vec<_>>().join(", ")
            ));
        }
    }
    for name in hub.keys() {
        if !ledger.entries.contains_key(name) {
            out.push(format!(
                "template {name}: on the hub, never written by the load"
            ));
        }
    }
    out
}

/// A member's copies (`name` → value) against the hub's templates: a
/// line per missing, orphaned or stale copy.
pub fn copies_violations(
    member: &str,
    hub: &BTreeMap<String, String>,
    copies: &BTreeMap<String, String>,
) -> Vec<String> {
    let mut out = Vec::new();
    for (name, value) in hub {
        match copies.get(name) {
            None => out.push(format!("{member}: copy of {name} missing")),
            Some(v) if v != value => out.push(format!(
                "{member}: copy of {name} holds v={v}, the template v={value}"
            )),
            Some(_) => {}
        }
    }
    for name in copies.keys() {
        if !hub.contains_key(name) {
            out.push(format!(
                "{member}: orphaned copy {name} (no such template on the hub)"
            ));
        }
    }
    out
}

fn show(v: &Value) -> String {
    match v {
        Some(v) => format!("v={v}"),
        None => "nothing".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn an_acknowledged_write_must_be_there_and_an_unsure_one_may_be() {
        let mut l = Ledger::default();
        l.acked("a", Some("1".into()));
        l.acked("b", Some("1".into()));
        l.unsure("b", Some("2".into()));
        l.unsure("c", Some("1".into()));
        l.acked("d", Some("1".into()));
        l.acked("d", None);
        // a as acknowledged, b either, c either, d deleted.
        assert!(templates_violations(&l, &map(&[("a", "1"), ("b", "2")])).is_empty());
        assert!(templates_violations(&l, &map(&[("a", "1"), ("b", "1"), ("c", "1")])).is_empty());
        // a lost; d back; e from nowhere.
        let v = templates_violations(&l, &map(&[("b", "1"), ("d", "1"), ("e", "9")]));
        assert_eq!(v.len(), 3, "{v:?}");
        assert!(v[0].starts_with("template a: the hub holds nothing, acknowledged v=1"));
        assert!(v[1].starts_with("template d: the hub holds v=1, acknowledged nothing"));
        assert!(v[2].contains("template e: on the hub, never written"));
        // An older value is not allowed once a newer one was acknowledged.
        l.acked("a", Some("2".into()));
        assert_eq!(
            templates_violations(&l, &map(&[("a", "1"), ("b", "1")])).len(),
            1
        );
        assert_eq!(l.known("a"), Some(&Some("2".into())));
        assert_eq!(l.known("b"), None, "unsure since");
    }

    #[test]
    fn copies_missing_stale_and_orphaned_are_each_named() {
        let hub = map(&[("a", "1"), ("b", "2"), ("c", "3")]);
        let copies = map(&[("a", "1"), ("b", "1"), ("x", "5")]);
        let v = copies_violations("member2", &hub, &copies);
        assert_eq!(
            v,
            [
                "member2: copy of b holds v=1, the template v=2",
                "member2: copy of c missing",
                "member2: orphaned copy x (no such template on the hub)"
            ]
        );
        assert!(copies_violations("m", &hub, &hub).is_empty());
    }
}
