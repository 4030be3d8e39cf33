//! Cluster API's core controllers.

pub mod cluster;
pub mod machine;
pub mod machinedeployment;
pub mod machineset;
pub mod templates;
