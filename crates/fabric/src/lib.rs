//! Flotilla's cross-cluster network fabric, Submariner's model over
//! WireGuard in userspace: each member's gateways meet on an underlay,
//! publish their cluster to the broker (the hub), open an encrypted
//! tunnel to every other cluster's active gateway and route the
//! clusters' pod and service CIDRs (or, with Globalnet, their global
//! CIDRs) through it.
//!
//! - [`api`]: Submariner's `submariner.io/v1` kinds, the contract;
//! - [`broker`]: the member's access to the broker (`flotilla join`);
//! - [`gateway`]: the gateway controller (election, publishing, peers,
//!   routes, status), with its pure [`gateway::plan`];
//! - [`wireguard`]: the tunnels (boringtun over a TUN device with
//!   offloads) and their in-band health [`probe`]s;
//! - [`offload`]: the underlay socket's batches (UDP GSO and GRO);
//! - [`dataplane`]: routes and the gateway node's nftables table;
//! - [`globalnet`]: global egress and ingress IPs;
//! - [`exports`]: whether exported Services answer on their ports;
//! - [`underlay`]: the network the gateways meet on;
//! - [`lease`]: leader election over a Lease;
//! - [`metrics`]: Submariner's gateway metrics;
//! - [`supervisor`]: a member's gateway processes, one per gateway node.

#![forbid(unsafe_code)]

pub mod api;
pub mod broker;
pub mod dataplane;
pub mod exports;
pub mod gateway;
pub mod globalnet;
pub mod identity;
pub mod lease;
pub mod metrics;
pub mod offload;
pub mod probe;
pub mod supervisor;
pub mod underlay;
pub mod wireguard;
