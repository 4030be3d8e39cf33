//! Cluster API's core controllers.

pub mod cluster;
pub mod healthcheck;
pub mod machine;
pub mod machinedeployment;
pub mod machineset;
pub mod templates;
pub mod topology;

use serde_json::Value;

use crate::objects::set_condition;

/// Whether an infrastructure object (a Cluster's or a Machine's) is
/// provisioned, in either version's words, said as the owner's
/// InfrastructureReady condition.
pub fn infrastructure_ready(status: &mut Value, kind: &str, infra: &Value) -> bool {
    let provisioned = infra["status"]["initialization"]["provisioned"] == true
        || infra["status"]["ready"] == true;
    if provisioned {
        set_condition(status, "InfrastructureReady", "True", "Ready", "");
    } else {
        let message = format!("{kind} status.initialization.provisioned is false");
        set_condition(status, "InfrastructureReady", "False", "NotReady", &message);
    }
    provisioned
}
