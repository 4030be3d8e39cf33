//! The etcd backend, for a control plane that must survive its host.
//!
//! The backend is the default-on cargo feature `etcd`: its gRPC client is
//! generated at build time from etcd's protobuf definitions
//! (`proto/etcd`, compiled by protox, so no protoc is needed). A build
//! without the feature is embedded-only and smaller, and `EtcdStore::open`
//! then says how to get a build that has it.

use std::time::Duration;

#[cfg(feature = "etcd")]
mod client;
#[cfg(feature = "etcd")]
mod ops;
#[cfg(feature = "etcd")]
mod store;

#[cfg(feature = "etcd")]
pub use store::EtcdStore;

/// etcd's own default client URL.
pub const DEFAULT_ENDPOINT: &str = "http://127.0.0.1:2379";
/// Where Flotilla keeps its keys in etcd unless told otherwise.
pub const DEFAULT_PREFIX: &str = "/registry/flotilla";

/// Where the etcd cluster is and how to reach it.
#[derive(Clone, Debug)]
pub struct EtcdOptions {
    pub endpoints: Vec<String>,
    /// Every key is stored under it (kube-apiserver's `--etcd-prefix`).
    pub prefix: String,
    /// PEM files: the CA that signed etcd's certificate, and a client
    /// certificate and key when etcd asks for one.
    pub ca_file: Option<std::path::PathBuf>,
    pub cert_file: Option<std::path::PathBuf>,
    pub key_file: Option<std::path::PathBuf>,
    pub history_capacity: usize,
    pub compaction_interval: Option<Duration>,
    /// How long a write waits for the watch to bring it into the cache.
    pub write_visible_timeout: Duration,
}

impl Default for EtcdOptions {
    fn default() -> Self {
        EtcdOptions {
            endpoints: vec![DEFAULT_ENDPOINT.into()],
            prefix: DEFAULT_PREFIX.into(),
            ca_file: None,
            cert_file: None,
            key_file: None,
            history_capacity: 100_000,
            compaction_interval: Some(Duration::from_secs(300)),
            write_visible_timeout: Duration::from_secs(30),
        }
    }
}

#[cfg(not(feature = "etcd"))]
mod absent {
    use std::sync::Arc;

    use async_trait::async_trait;
    use bytes::Bytes;

    use super::EtcdOptions;
    use crate::{
        DeletePrecondition, KeyValue, ListOptions, ListResult, Result, Revision, Store, StoreError,
        Watch,
    };

    /// The etcd store of a build without the `etcd` feature: it cannot be
    /// opened, so no value of it exists.
    pub enum EtcdStore {}

    impl EtcdStore {
        pub async fn open(_options: EtcdOptions) -> Result<Arc<Self>> {
            Err(StoreError::Unavailable(
                "this flotilla was built without etcd support; rebuild it with the default \
                 features (cargo build --release --features etcd)"
                    .into(),
            ))
        }
    }

    #[async_trait]
    impl Store for EtcdStore {
        async fn create(&self, _: &str, _: Bytes) -> Result<KeyValue> {
            match *self {}
        }
        async fn update(&self, _: &str, _: Bytes, _: Revision) -> Result<KeyValue> {
            match *self {}
        }
        async fn delete(&self, _: &str, _: DeletePrecondition) -> Result<KeyValue> {
            match *self {}
        }
        fn get(&self, _: &str) -> Result<Option<KeyValue>> {
            match *self {}
        }
        fn list(&self, _: &str, _: &ListOptions) -> Result<ListResult> {
            match *self {}
        }
        fn watch(&self, _: &str, _: Revision) -> Result<Watch> {
            match *self {}
        }
        fn current_revision(&self) -> Revision {
            match *self {}
        }
        fn compacted_revision(&self) -> Revision {
            match *self {}
        }
        async fn compact(&self, _: Revision) -> Result<()> {
            match *self {}
        }
    }
}

#[cfg(not(feature = "etcd"))]
pub use absent::EtcdStore;
