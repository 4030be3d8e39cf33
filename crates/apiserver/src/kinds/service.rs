//! Services: upstream's defaults (type, session affinity, IP families,
//! target ports, ...), answered with themselves on deletion. Their
//! ClusterIPs and NodePorts are `allocation.rs`'s.

use serde_json::Value;

use super::Strategy;

pub struct Services;

impl Strategy for Services {
    fn default(&self, obj: &mut Value) {
        crate::defaults::service(obj);
    }

    fn returns_deleted_object(&self) -> bool {
        true
    }
}
