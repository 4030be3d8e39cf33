//! Flotilla's federation control plane: the Karmada-compatible API
//! (`cluster.karmada.io`, `policy.karmada.io`, `work.karmada.io`) and the
//! controllers that turn templates and policies into objects in member
//! clusters. Everything here talks to the hub and to members through
//! kube-rs, as any client would.
#![forbid(unsafe_code)]

pub mod agent;
pub mod agents;
pub mod api;
pub mod autoscaling;
pub mod binding;
pub mod cluster;
pub mod clustersets;
pub mod conditions;
pub mod context;
pub mod controlplane;
pub mod crds;
pub mod dependencies;
pub mod detector;
pub mod error;
pub mod execution;
pub mod failover;
pub mod fanout;
pub mod finalizer;
pub mod frontends;
pub mod interpreter;
pub mod join;
pub mod kinds;
pub mod leader;
pub mod mcs;
pub mod member_identity;
pub mod members;
pub mod metrics;
pub mod metrics_adapter;
pub mod names;
pub mod overrides;
pub mod packed;
pub mod passes;
pub mod proxy;
pub mod queue;
pub mod quota;
pub mod rebalancer;
pub mod recent;
pub mod roles;
pub mod scheduler;
pub mod selector;
pub mod status;
pub mod taint_policy;
pub mod templates;
pub mod time;
pub mod writes;
