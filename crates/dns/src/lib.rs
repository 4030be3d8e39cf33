//! DNS for Flotilla: `clusterset.local` for a fleet: the MCS DNS specification
//! served over UDP and TCP from the hub's ServiceImports and their
//! EndpointSlices, which the control plane's MCS controller keeps. The
//! wire format is hickory-proto's; the zone is computed per query
//! ([`zone`]), so an answer is as fresh as the hub's watch. The same
//! server answers a member's own `cluster.local` ([`cluster`]), and in a
//! member also `clusterset.local` from the member's own imports
//! ([`server::Caches::follow_optional`]), so that names resolve while the
//! hub is away.

#![forbid(unsafe_code)]

pub mod cluster;
pub mod server;
pub mod zone;
