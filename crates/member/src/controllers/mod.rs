//! One controller per concern, as kube-controller-manager and
//! kube-scheduler divide the work (the kubelet's pod side is
//! [`crate::kubelet`]).

pub mod cronjob;
pub mod daemonset;
pub mod deployment;
pub mod endpoints;
pub mod hpa;
pub mod job;
pub mod nodes;
pub mod pods;
pub mod replicaset;
pub mod scheduler;
pub mod statefulset;
pub mod status;
pub mod volumes;
