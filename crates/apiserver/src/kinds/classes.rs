//! Kinds whose only behaviour is upstream's defaults: PriorityClass,
//! StorageClass, NetworkPolicy, HorizontalPodAutoscaler (its v1 view is
//! `conversion.rs`).

use serde_json::Value;

use super::Strategy;
use crate::defaults;

pub struct PriorityClasses;
pub struct StorageClasses;
pub struct NetworkPolicies;
pub struct HorizontalPodAutoscalers;

impl Strategy for PriorityClasses {
    fn default(&self, obj: &mut Value) {
        defaults::priority_class(obj);
    }
}

impl Strategy for StorageClasses {
    fn default(&self, obj: &mut Value) {
        defaults::storage_class(obj);
    }
}

impl Strategy for NetworkPolicies {
    fn default(&self, obj: &mut Value) {
        defaults::network_policy(obj);
    }
}

impl Strategy for HorizontalPodAutoscalers {
    fn default(&self, obj: &mut Value) {
        defaults::horizontal_pod_autoscaler(obj);
    }
}
