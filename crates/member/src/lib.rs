//! Flotilla's member-cluster simulator.
#![forbid(unsafe_code)]

pub mod cluster;
pub mod config;
pub mod controllers;
pub mod dns;
pub mod events;
pub mod expectations;
pub mod faults;
pub mod informer;
pub mod kubelet;
pub mod metrics;
pub mod placement;
pub mod pod;
pub mod podutil;
pub mod proxy;
pub mod roster;
pub mod runtime;
pub mod simulator;
pub use flotilla_core::quantity;

pub use cluster::Clients;
pub use config::SimConfig;
pub use faults::{FaultSet, Faults, Unreachable};
pub use simulator::Simulator;
pub mod admin;
pub mod front_door;
