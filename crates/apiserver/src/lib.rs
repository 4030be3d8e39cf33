//! Flotilla's Kubernetes-compatible API server.
//!
//! Requests are parsed in [`request`] (protobuf bodies and answers are
//! translated to and from JSON at the edge, in `codec`), routed in
//! [`server`] and served by the
//! verbs in [`handlers`] and [`watch`] over a [`flotilla_store::Store`].
//! Which resources exist is the [`resources::Registry`]: the built-ins of
//! [`builtin`] plus whatever CRDs add ([`crd`]).
#![forbid(unsafe_code)]

pub mod admission;
pub mod allocation;
pub mod apiservices;
pub mod audit;
pub mod auth;
pub mod authz;
pub mod bootstrap;
pub mod builtin;
mod channels;
pub mod client_cert;
pub mod cluster_proxy;
mod codec;
pub mod componentstatus;
pub mod config;
mod connect;
pub mod conversion;
pub mod crd;
pub mod csr;
pub mod defaults;
pub mod discovery;
pub mod embedded_review;
pub mod error;
pub mod eviction;
pub mod extension;
pub mod failpoints;
pub mod fieldset;
mod follower;
pub mod gc;
pub mod handlers;
pub mod impersonation;
pub mod jsonpath;
pub mod kinds;
pub mod kubelet;
pub mod loopback;
pub mod managed;
pub mod merge_meta;
pub mod meta;
pub mod namespace;
pub mod node_proxy;
pub mod objects;
pub mod openapi;
pub mod patch;
mod portforward;
pub mod raw;
pub mod rbac;
pub mod registry;
pub mod request;
pub mod resource_metrics;
pub mod resources;
pub mod reviews;
pub mod scale;
pub mod schema;
pub mod server;
pub mod serviceaccounts;
pub mod spdy;
mod spdy_exec;
pub mod state;
pub mod storage;
pub mod storage_metrics;
pub mod strategic;
pub mod table;
pub mod tls;
pub mod token_file;
pub mod token_secrets;
pub mod tokens;
pub mod user;
pub mod value;
pub mod version;
pub mod watch;
pub mod x509_subject;

pub use axum_server::Handle as ServeHandle;
pub use server::{ApiServer, Config};
