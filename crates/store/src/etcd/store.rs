//! The etcd store: keys live under a prefix in etcd, a write is one
//! transaction comparing the key's revision (etcd's mod revision is the
//! resourceVersion), and reads and watches are served from the same
//! [`WatchCache`] as the embedded store, fed by an etcd watch of the
//! prefix, as kube-apiserver's watch cache is. A write returns once the
//! cache has seen it, so a client reads its own writes through the replica
//! it wrote to.

use std::sync::{Arc, Weak};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use super::EtcdOptions;
use super::client::Client;
use super::client::pb::etcdserverpb::{RangeRequest, TxnRequest, TxnResponse, WatchCreateRequest};
use super::client::pb::mvccpb;
use super::ops::{self, CompareResult, response_delete, response_get, response_put, revision_of};

use crate::cache::{Watch, WatchCache};
use crate::{
    DeletePrecondition, Event, EventKind, KeyValue, ListOptions, ListResult, Result, Revision,
    Store, StoreError,
};

pub struct EtcdStore {
    client: Client,
    prefix: String,
    cache: Arc<WatchCache>,
    follower: JoinHandle<()>,
    write_visible_timeout: Duration,
}

/// Keys are read in pages: one response for 100,000 objects would pass
/// gRPC's message limit.
const PAGE: i64 = 1000;
/// How long a consistent read waits for the watch to reach etcd's revision.
const SYNC_PATIENCE: Duration = Duration::from_secs(1);
/// How long a refused write waits for a deletion it cannot date.
const GONE_PATIENCE: Duration = Duration::from_secs(1);
/// Attempts past a member that refuses connections (about 2 s in all).
const CONNECT_RETRIES: u32 = 6;

impl EtcdStore {
    /// Connects, reads the prefix's state, and follows it from there.
    pub async fn open(options: EtcdOptions) -> Result<Arc<Self>> {
        let client = Client::new(&options)?;
        let prefix = options.prefix.trim_end_matches('/').to_string();
        let (state, revision) = read_state(&client, &prefix).await?;
        info!(
            endpoints = ?options.endpoints,
            %prefix,
            revision,
            keys = state.len(),
            "opened etcd store"
        );
        let cache = Arc::new(WatchCache::new(
            state,
            Vec::new(),
            revision,
            revision,
            options.history_capacity,
        ));
        let follower = tokio::spawn(follow(client.clone(), prefix.clone(), cache.clone()));
        let store = Arc::new(EtcdStore {
            client,
            prefix,
            cache,
            follower,
            write_visible_timeout: options.write_visible_timeout,
        });
        if let Some(interval) = options.compaction_interval {
            crate::spawn_compactor(Arc::downgrade(&store) as Weak<dyn Store>, interval);
        }
        Ok(store)
    }

    fn etcd_key(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    /// Waits until the cache holds `revision`, so that what was just
    /// written is what the next read through this store returns.
    async fn visible(&self, kv: KeyValue) -> Result<KeyValue> {
        match tokio::time::timeout(
            self.write_visible_timeout,
            self.cache.wait_for(kv.mod_revision),
        )
        .await
        {
            Ok(result) => result.map(|()| kv),
            Err(_) => Err(StoreError::Unavailable(format!(
                "revision {} was written to etcd but the watch did not deliver it within {:?}",
                kv.mod_revision, self.write_visible_timeout
            ))),
        }
    }

    /// Waits until the cache holds what refused a transaction (its failure
    /// branch read the key), so that the caller's next read shows it: a
    /// key another replica created or changed a moment ago. Without this a
    /// create refused as AlreadyExists could be followed by a read that
    /// finds nothing. A key found gone is waited for at the transaction's
    /// revision, briefly: that revision may belong to a write outside the
    /// prefix, which the watch never brings. Past the wait the refusal
    /// stands as it is.
    async fn catch_up(&self, response: &TxnResponse) {
        let key_revision =
            response_get(response).and_then(|g| g.kvs.first().map(|kv| kv.mod_revision));
        let (revision, patience) = match key_revision {
            Some(revision) => (revision, self.write_visible_timeout),
            None => (revision_of(response), GONE_PATIENCE),
        };
        if tokio::time::timeout(patience, self.cache.wait_for(revision))
            .await
            .is_err()
        {
            debug!(
                revision,
                "the etcd watch did not bring a refused write's revision in time"
            );
        }
    }

    /// Runs a transaction, again on another member when the one picked
    /// could not even be connected to: the request never left, so this
    /// cannot apply a write twice. Any other failure is the caller's.
    async fn txn(&self, txn: TxnRequest) -> Result<TxnResponse> {
        let mut attempt = 0;
        loop {
            match self.client.txn(txn.clone()).await {
                Err(s)
                    if attempt < CONNECT_RETRIES
                        && s.code() == tonic::Code::Unavailable
                        && s.message().contains("connect") =>
                {
                    attempt += 1;
                    debug!(attempt, error = %s, "etcd member unreachable; trying another");
                    tokio::time::sleep(Duration::from_millis(100 * u64::from(attempt))).await;
                }
                result => return Ok(result?),
            }
        }
    }
}

/// Why a compare-and-swap on `key` was refused, from the read of the key
/// in the transaction's failure branch: it is gone, or it moved on.
fn refused(key: &str, expected: Revision, response: &TxnResponse) -> StoreError {
    let now = response_get(response).and_then(|g| g.kvs.first().map(|kv| kv.mod_revision));
    match now {
        None => StoreError::NotFound(key.to_string()),
        Some(actual) => StoreError::Conflict {
            key: key.to_string(),
            expected,
            actual,
        },
    }
}

impl Drop for EtcdStore {
    fn drop(&mut self) {
        self.follower.abort();
        self.cache.close();
    }
}

/// The value is copied out: the decoded message's bytes are a slice of the
/// gRPC read buffer, and a cache holding the slice (the watch cache's
/// newest events) would hold the whole buffer.
fn to_key_value(key: &str, kv: &mvccpb::KeyValue) -> KeyValue {
    KeyValue {
        key: Arc::from(key),
        value: Bytes::copy_from_slice(&kv.value),
        create_revision: kv.create_revision,
        mod_revision: kv.mod_revision,
    }
}

/// Every key under `prefix` at one revision, page by page.
async fn read_state(client: &Client, prefix: &str) -> Result<(Vec<KeyValue>, Revision)> {
    let start = format!("{prefix}/");
    let end = prefix_end(&start);
    let mut from = start.clone().into_bytes();
    let mut revision = 0;
    let mut state = Vec::new();
    loop {
        let page = client
            .range(RangeRequest {
                key: from.clone(),
                range_end: end.clone(),
                limit: PAGE,
                // The first page fixes the revision every later page reads at.
                revision,
                ..RangeRequest::default()
            })
            .await?;
        if revision == 0 {
            revision = page.header.as_ref().map_or(0, |h| h.revision);
        }
        for item in &page.kvs {
            if let Some(key) = key_under(item, prefix) {
                state.push(to_key_value(key, item));
            }
        }
        match page.kvs.last() {
            Some(last) if page.more => {
                from = last.key.clone();
                from.push(0);
            }
            _ => break,
        }
    }
    Ok((state, revision))
}

/// The part of `kv`'s key after `prefix`, if it is under it.
fn key_under<'a>(kv: &'a mvccpb::KeyValue, prefix: &str) -> Option<&'a str> {
    std::str::from_utf8(&kv.key).ok()?.strip_prefix(prefix)
}

/// The first key after every key that starts with `prefix`.
fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// Feeds the cache from etcd for ever, resuming after the last revision
/// it holds when the watch breaks.
async fn follow(client: Client, prefix: String, cache: Arc<WatchCache>) {
    loop {
        match follow_once(&client, &prefix, &cache).await {
            Ok(()) => debug!("etcd watch ended; resuming"),
            Err(StoreError::Compacted { requested, oldest }) => {
                // The events since the cache's revision are gone: read the
                // state again and bring the cache to it.
                warn!(
                    requested,
                    oldest, "etcd compacted past the watch; relisting"
                );
                if let Err(error) = resync(&client, &prefix, &cache).await {
                    warn!(%error, "cannot relist from etcd");
                }
            }
            Err(error) => warn!(%error, "etcd watch failed; resuming"),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn follow_once(client: &Client, prefix: &str, cache: &WatchCache) -> Result<()> {
    let start = format!("{prefix}/");
    let mut stream = client
        .watch(WatchCreateRequest {
            range_end: prefix_end(&start),
            key: start.into_bytes(),
            start_revision: cache.revision() + 1,
            prev_kv: true,
            ..WatchCreateRequest::default()
        })
        .await?;
    while let Some(response) = stream.message().await? {
        if response.compact_revision > 0 {
            return Err(StoreError::Compacted {
                requested: cache.revision() + 1,
                oldest: response.compact_revision,
            });
        }
        if response.canceled {
            return Ok(());
        }
        let events: Vec<Event> = response
            .events
            .iter()
            .filter_map(|e| {
                let kv = e.kv.as_ref()?;
                let key = key_under(kv, prefix)?;
                let prev = e.prev_kv.as_ref().map(|p| to_key_value(key, p));
                Some(match e.r#type() {
                    mvccpb::event::EventType::Put => Event {
                        kind: EventKind::Put,
                        kv: to_key_value(key, kv),
                        prev,
                    },
                    mvccpb::event::EventType::Delete => Event {
                        kind: EventKind::Delete,
                        // The last value, at the deletion's revision.
                        kv: KeyValue {
                            key: Arc::from(key),
                            value: prev.as_ref().map(|p| p.value.clone()).unwrap_or_default(),
                            create_revision: prev.as_ref().map_or(0, |p| p.create_revision),
                            mod_revision: kv.mod_revision,
                        },
                        prev,
                    },
                })
            })
            .collect();
        cache.apply(events);
    }
    Ok(())
}

/// Brings the cache to etcd's state after a gap in the watch: what changed
/// or went is applied as events at the relisted revision.
async fn resync(client: &Client, prefix: &str, cache: &WatchCache) -> Result<()> {
    let (state, revision) = read_state(client, prefix).await?;
    let mut events = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for kv in state {
        seen.insert(kv.key.clone());
        let old = cache.get(&kv.key);
        if old.as_ref().map(|o| o.mod_revision) != Some(kv.mod_revision) {
            events.push(Event {
                kind: EventKind::Put,
                kv: KeyValue {
                    mod_revision: revision,
                    ..kv
                },
                prev: old,
            });
        }
    }
    for old in cache.list("", &ListOptions::default())?.items {
        if !seen.contains(&old.key) {
            events.push(Event {
                kind: EventKind::Delete,
                kv: KeyValue {
                    mod_revision: revision,
                    ..old.clone()
                },
                prev: Some(old),
            });
        }
    }
    cache.compact(cache.revision());
    cache.apply(events);
    Ok(())
}

#[async_trait]
impl Store for EtcdStore {
    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue> {
        let k = self.etcd_key(key);
        let txn = TxnRequest {
            compare: vec![ops::create_revision(&k, CompareResult::Equal, 0)],
            success: vec![ops::put(&k, &value, false)],
            failure: vec![ops::get(&k)],
        };
        let response = self.txn(txn).await?;
        if !response.succeeded {
            self.catch_up(&response).await;
            return Err(StoreError::AlreadyExists(key.to_string()));
        }
        let revision = revision_of(&response);
        self.visible(KeyValue {
            key: Arc::from(key),
            value,
            create_revision: revision,
            mod_revision: revision,
        })
        .await
    }

    async fn update(&self, key: &str, value: Bytes, expected: Revision) -> Result<KeyValue> {
        let k = self.etcd_key(key);
        let txn = TxnRequest {
            compare: vec![ops::mod_revision(&k, CompareResult::Equal, expected)],
            success: vec![ops::put(&k, &value, true)],
            failure: vec![ops::get(&k)],
        };
        let response = self.txn(txn).await?;
        if !response.succeeded {
            self.catch_up(&response).await;
            return Err(refused(key, expected, &response));
        }
        let revision = revision_of(&response);
        // An update keeps the key's create revision.
        let create_revision = response_put(&response)
            .and_then(|p| p.prev_kv.as_ref())
            .map_or(revision, |kv| kv.create_revision);
        self.visible(KeyValue {
            key: Arc::from(key),
            value,
            create_revision,
            mod_revision: revision,
        })
        .await
    }

    async fn delete(&self, key: &str, precondition: DeletePrecondition) -> Result<KeyValue> {
        let k = self.etcd_key(key);
        let compare = match precondition.mod_revision {
            Some(rev) => ops::mod_revision(&k, CompareResult::Equal, rev),
            None => ops::create_revision(&k, CompareResult::Greater, 0),
        };
        let txn = TxnRequest {
            compare: vec![compare],
            success: vec![ops::delete(&k)],
            failure: vec![ops::get(&k)],
        };
        let response = self.txn(txn).await?;
        if !response.succeeded {
            self.catch_up(&response).await;
            return Err(refused(
                key,
                precondition.mod_revision.unwrap_or(0),
                &response,
            ));
        }
        let revision = revision_of(&response);
        let prev = response_delete(&response)
            .and_then(|d| d.prev_kvs.first())
            .map(|kv| to_key_value(key, kv));
        let Some(prev) = prev else {
            return Err(StoreError::NotFound(key.to_string()));
        };
        self.visible(KeyValue {
            mod_revision: revision,
            ..prev
        })
        .await
    }

    fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        Ok(self.cache.get(key))
    }

    fn list(&self, prefix: &str, options: &ListOptions) -> Result<ListResult> {
        self.cache.list(prefix, options)
    }

    fn watch(&self, prefix: &str, after: Revision) -> Result<Watch> {
        self.cache.watch(prefix, after)
    }

    fn current_revision(&self) -> Revision {
        self.cache.revision()
    }

    fn compacted_revision(&self) -> Revision {
        self.cache.compacted()
    }

    /// Reads etcd's revision through its consensus and waits for the watch
    /// to bring the cache to it, as kube-apiserver's consistent reads from
    /// its watch cache do. Revisions written outside the prefix never
    /// arrive: past [`SYNC_PATIENCE`] the read goes ahead with what the
    /// cache holds, which is why etcd should be Flotilla's alone.
    async fn sync(&self) -> Result<()> {
        let revision = self.client.current_revision(self.prefix.as_bytes()).await?;
        if self.cache.revision() >= revision {
            return Ok(());
        }
        match tokio::time::timeout(SYNC_PATIENCE, self.cache.wait_for(revision)).await {
            Ok(result) => result,
            Err(_) => {
                debug!(
                    revision,
                    cached = self.cache.revision(),
                    "etcd's revision not reached by the watch; reading what the cache holds"
                );
                Ok(())
            }
        }
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        let revision = revision.min(self.cache.revision());
        match self.client.compact(revision).await {
            Ok(()) => {}
            // Another replica compacted as far already.
            Err(s) if s.message().contains("compacted") => {}
            Err(e) => return Err(e.into()),
        }
        self.cache.compact(revision);
        debug!(revision, "compacted");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::prefix_end;

    #[test]
    fn a_prefix_ends_after_its_last_key() {
        assert_eq!(prefix_end("/a/"), b"/a0".to_vec());
        assert_eq!(prefix_end("a\u{7f}"), b"a\x80".to_vec());
    }
}
