//! Which Works wait for their workload's data (failover with data,
//! `data.rs`): the binding controller writes them suspended and marked,
//! the data migration controller delivers them. No I/O here.

use kube::ResourceExt;
use kube::api::DynamicObject;

use crate::api::Work;

/// On a workload template: its volumes' data moves with it on failover.
pub use flotilla_core::volume_data::MIGRATE_DATA_ANNOTATION;
/// On a Work: it waits for the workload's data, coming from the named
/// cluster, before it is delivered.
pub const AWAITING_ANNOTATION: &str = "backup.flotilla.io/awaiting-data-from";

/// Whether the template asks for its data to move with it.
pub fn wants_data(template: &DynamicObject) -> bool {
    template
        .annotations()
        .get(MIGRATE_DATA_ANNOTATION)
        .is_some_and(|v| v == "true")
}

/// Where the data of a workload that asks for it comes from before its
/// Work in a cluster is delivered: a Work still waiting keeps waiting; a
/// new one waits when the workload is leaving another cluster (`leaving`:
/// clusters with its Works that it no longer targets, or is evicted from).
pub fn awaiting_from(wants: bool, existing: Option<&Work>, leaving: &[String]) -> Option<String> {
    if !wants {
        return None;
    }
    match existing {
        Some(work) => work.annotations().get(AWAITING_ANNOTATION).cloned(),
        None => leaving.first().cloned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{WorkSpec, Workload};

    fn work(awaiting: Option<&str>) -> Work {
        let mut w = Work::new(
            "w",
            WorkSpec {
                workload: Workload::new(&[]).expect("empty"),
                suspend_dispatching: None,
                preserve_resources_on_deletion: None,
            },
        );
        if let Some(from) = awaiting {
            w.metadata.annotations =
                Some([(AWAITING_ANNOTATION.to_string(), from.to_string())].into());
        }
        w
    }

    #[test]
    fn only_a_workload_that_asks_and_moves_waits_and_it_waits_until_delivered() {
        let leaving = vec!["east".to_string()];
        assert_eq!(awaiting_from(false, None, &leaving), None, "not asked");
        assert_eq!(
            awaiting_from(true, None, &[]),
            None,
            "first placement, or spreading"
        );
        assert_eq!(
            awaiting_from(true, None, &leaving),
            Some("east".into()),
            "moving"
        );
        let waiting = work(Some("east"));
        assert_eq!(
            awaiting_from(true, Some(&waiting), &[]),
            Some("east".into()),
            "still waiting"
        );
        let delivered = work(None);
        assert_eq!(
            awaiting_from(true, Some(&delivered), &leaving),
            None,
            "delivered stays delivered"
        );
    }
}
