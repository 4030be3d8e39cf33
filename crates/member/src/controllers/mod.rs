//! One controller per concern, as kube-controller-manager, kube-scheduler
//! and the kubelet divide the work.

pub mod cronjob;
pub mod daemonset;
pub mod deployment;
pub mod endpoints;
pub mod hpa;
pub mod job;
pub mod kubelet;
pub mod nodes;
pub mod pods;
pub mod replicaset;
pub mod scheduler;
pub mod statefulset;
pub mod status;
pub mod volumes;
