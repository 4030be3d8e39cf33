//! Cluster API's core controllers.

pub mod cluster;
pub mod healthcheck;
pub mod machine;
pub mod machinedeployment;
pub mod machineset;
pub mod templates;
pub mod topology;
