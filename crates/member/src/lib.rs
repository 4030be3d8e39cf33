//! Flotilla's member-cluster simulator.
#![forbid(unsafe_code)]

pub mod config;
pub mod controllers;
pub mod events;
pub mod expectations;
pub mod faults;
pub mod informer;
pub mod metrics;
pub mod placement;
pub mod pod;
pub mod podutil;
pub mod runtime;
pub use flotilla_core::quantity;
pub mod sim;

pub use config::SimConfig;
pub use faults::{FaultSet, Faults, Unreachable};
pub use sim::{Clients, Simulator};
pub mod admin;
pub mod front_door;
