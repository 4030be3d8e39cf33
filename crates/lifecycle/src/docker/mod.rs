//! The local infrastructure provider, on CAPD's kinds: a DockerCluster is
//! a Flotilla member's API endpoint on this host, a DockerMachine one of
//! its nodes.

pub mod cluster;
pub mod loadbalancer;
pub mod machine;
pub mod process;
