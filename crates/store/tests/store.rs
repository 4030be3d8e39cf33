//! Behaviour of the stores through the `Store` contract: the suite runs
//! against the embedded store and against a real etcd (`on_both!`); what
//! depends on the backend (history across restarts) is tested per backend.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use flotilla_store::testing::Etcd;
use flotilla_store::{
    DeletePrecondition, EtcdOptions, EtcdStore, EventKind, ListOptions, SqliteOptions, SqliteStore,
    Store, StoreError,
};

/// Where a test's store keeps its data; `open` again reaches the same data
/// as a restarted control plane would.
enum Backend {
    Embedded(tempfile::TempDir),
    Etcd(Etcd),
}

impl Backend {
    fn embedded() -> Backend {
        Backend::Embedded(tempfile::tempdir().unwrap())
    }

    fn etcd() -> Backend {
        Backend::Etcd(flotilla_store::testing::single())
    }

    async fn open(&self) -> Arc<dyn Store> {
        match self {
            Backend::Embedded(dir) => open(dir.path()),
            Backend::Etcd(etcd) => open_etcd(etcd).await,
        }
    }
}

async fn open_etcd(etcd: &Etcd) -> Arc<EtcdStore> {
    EtcdStore::open(EtcdOptions {
        endpoints: vec![etcd.client_url.clone()],
        compaction_interval: None,
        ..Default::default()
    })
    .await
    .expect("open the etcd store")
}

/// Runs a suite test, `async fn NAME(backend: &Backend)`, on both backends.
macro_rules! on_both {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn embedded() {
                super::$name(&super::Backend::embedded()).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn etcd() {
                super::$name(&super::Backend::etcd()).await;
            }
        }
    )*};
}

on_both!(
    revisions_are_global_and_cas_is_enforced,
    list_at_an_older_revision_and_paginate,
    watch_from_revision_and_expire_after_compaction,
    concurrent_writers_get_distinct_revisions,
    large_values_read_back_exactly,
    a_watch_far_behind_gets_every_event_in_order,
    watches_from_anywhere_in_the_window_see_each_value_and_its_previous,
    writes_succeed_while_readers_list_and_get,
    an_update_from_a_read_value_is_checked_against_the_newest,
);

fn open(dir: &std::path::Path) -> Arc<SqliteStore> {
    SqliteStore::open(
        dir,
        SqliteOptions {
            compaction_interval: None,
            ..Default::default()
        },
    )
    .expect("open store")
}

/// The store in `dir` with a window of `events`: reads of anything older
/// come from the log.
fn open_with_window(dir: &std::path::Path, events: usize) -> Arc<SqliteStore> {
    SqliteStore::open(
        dir,
        SqliteOptions {
            compaction_interval: None,
            history_capacity: events,
            ..Default::default()
        },
    )
    .expect("open store")
}

fn b(s: &str) -> Bytes {
    Bytes::from(s.to_string())
}

async fn revisions_are_global_and_cas_is_enforced(backend: &Backend) {
    let store = backend.open().await;
    let a = store.create("/a", b("1")).await.unwrap();
    let c = store.create("/c", b("1")).await.unwrap();
    assert_eq!(c.mod_revision, a.mod_revision + 1);
    assert!(matches!(
        store.create("/a", b("2")).await,
        Err(StoreError::AlreadyExists(_))
    ));
    let a2 = store.update("/a", b("2"), a.mod_revision).await.unwrap();
    assert_eq!(a2.create_revision, a.create_revision);
    assert!(matches!(
        store.update("/a", b("3"), a.mod_revision).await,
        Err(StoreError::Conflict { .. })
    ));
    assert!(matches!(
        store
            .delete(
                "/a",
                DeletePrecondition {
                    mod_revision: Some(a.mod_revision)
                }
            )
            .await,
        Err(StoreError::Conflict { .. })
    ));
    let gone = store
        .delete("/a", DeletePrecondition::default())
        .await
        .unwrap();
    assert_eq!(gone.value, b("2"));
    assert!(store.get("/a").unwrap().is_none());
    assert!(matches!(
        store.update("/a", b("3"), gone.mod_revision).await,
        Err(StoreError::NotFound(_))
    ));
}

/// Updates from each of `reads` (a deleted key's last value, its
/// deletion's result) are `NotFound`, and the key stays deleted.
async fn no_update_revives(store: &dyn Store, reads: &[&flotilla_store::KeyValue]) {
    for read in reads {
        assert!(matches!(
            store.update_from(read, b("revived")).await,
            Err(StoreError::NotFound(_))
        ));
        assert!(store.get(&read.key).unwrap().is_none());
    }
}

/// The events of `watch` until it has sent at least `n`, each batch
/// within 5 s.
async fn at_least(mut watch: flotilla_store::Watch, n: usize) -> Vec<flotilla_store::Event> {
    let mut events = Vec::new();
    while events.len() < n {
        let batch = tokio::time::timeout(Duration::from_secs(5), watch.next())
            .await
            .expect("events within 5 s")
            .unwrap();
        events.extend(batch);
    }
    events
}

/// `update_from` is `update` at the read value's revision: a value
/// changed or deleted since it was read is refused, and the update's
/// event carries the value it replaced.
async fn an_update_from_a_read_value_is_checked_against_the_newest(backend: &Backend) {
    let store = backend.open().await;
    let start = store.current_revision();
    store.create("/u/a", b("1")).await.unwrap();
    let read = store.get("/u/a").unwrap().unwrap();
    let second = store.update_from(&read, b("2")).await.unwrap();
    assert_eq!(second.create_revision, read.create_revision);
    assert!(matches!(
        store.update_from(&read, b("3")).await,
        Err(StoreError::Conflict { .. })
    ));
    assert_eq!(store.get("/u/a").unwrap().unwrap().value, b("2"));
    let latest = store.get("/u/a").unwrap().unwrap();
    let gone = store
        .delete("/u/a", DeletePrecondition::default())
        .await
        .unwrap();
    no_update_revives(&*store, &[&latest, &gone]).await;
    let events = at_least(store.watch("/u/", start).unwrap(), 3).await;
    assert_eq!(events[1].kv.value, b("2"));
    assert_eq!(
        events[1].prev.as_ref().map(|p| p.value.clone()),
        Some(b("1"))
    );
    assert_eq!(events[2].kind, EventKind::Delete);
}

/// Writes `n` small values under `prefix`, 64 at a time.
async fn fill(store: &Arc<SqliteStore>, prefix: &str, n: usize) {
    for chunk in (0..n).collect::<Vec<_>>().chunks(64) {
        let mut writes = tokio::task::JoinSet::new();
        for i in chunk {
            let (store, key) = (store.clone(), format!("{prefix}{i}"));
            writes.spawn(async move { store.create(&key, b("x")).await });
        }
        while let Some(written) = writes.join_next().await {
            written.unwrap().unwrap();
        }
    }
}

/// A value read from the log, its key's last change gone from the watch
/// window (a Work's status written long after its create, in a burst):
/// an update from it is checked against the log, and the window's event
/// of it carries the value it replaced, for watches that start before it,
/// also once the event is held only packed (older than the window's
/// newest 1,024, which it holds plain too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_from_a_value_the_window_no_longer_holds_is_checked_against_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(
        dir.path(),
        SqliteOptions {
            compaction_interval: None,
            history_capacity: 1_200,
            ..Default::default()
        },
    )
    .unwrap();
    store.create("/u/a", big("a-1")).await.unwrap();
    store.create("/u/b", big("b-1")).await.unwrap();
    let stale_b = store.get("/u/b").unwrap().unwrap();
    store.update_from(&stale_b, big("b-2")).await.unwrap();
    fill(&store, "/before/", 1_300).await;
    let before = store.current_revision();
    // Both read back from the log: their keys' events have left the window.
    let a = store.get("/u/a").unwrap().unwrap();
    assert!(matches!(
        store.update_from(&stale_b, big("b-3")).await,
        Err(StoreError::Conflict { .. })
    ));
    // Two writers from the same read: one wins, whether or not they
    // commit in one group.
    let (one, two) = tokio::join!(
        store.update_from(&a, big("a-2")),
        store.update_from(&a, big("a-3"))
    );
    assert!(one.is_ok() != two.is_ok(), "{one:?} {two:?}");
    let won = store.get("/u/a").unwrap().unwrap();
    assert!(won.value == big("a-2") || won.value == big("a-3"));
    // A deletion's result names no live value: no update revives it.
    let b = store.get("/u/b").unwrap().unwrap();
    let gone = store
        .delete("/u/b", DeletePrecondition::default())
        .await
        .unwrap();
    fill(&store, "/after/", 1_100).await;
    no_update_revives(&*store, &[&gone, &b]).await;
    let events = at_least(store.watch("/u/", before).unwrap(), 2).await;
    assert_eq!(events.len(), 2, "only the winner wrote, then the deletion");
    assert_eq!(events[0].kv.value, won.value);
    assert_eq!(
        events[0]
            .prev
            .as_ref()
            .map(|p| (p.value.clone(), p.mod_revision, p.create_revision)),
        Some((big("a-1"), a.mod_revision, a.create_revision))
    );
    assert_eq!(events[1].kind, EventKind::Delete);
}

/// Counters incremented by many writers at once, each a read and a
/// compare-and-swap retried on conflict, with every committed group handed
/// to the publishing thread (`pipeline_from: 0`): a write is checked
/// against groups committed but not yet synced or seen, so no increment
/// is lost, none is answered before it is durable, and watches see every
/// change once, in order, with the value it replaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_checked_against_groups_not_yet_published_lose_no_update() {
    no_update_lost(SqliteOptions {
        compaction_interval: None,
        pipeline_from: 0,
        ..Default::default()
    })
    .await;
}

/// The same, with groups handed over for their size alone, whatever
/// waits behind them (as the store runs with cores to spare).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_handed_over_for_their_size_lose_no_update() {
    no_update_lost(SqliteOptions {
        compaction_interval: None,
        pipeline_from: usize::MAX,
        pipeline_groups_from: 1,
        ..Default::default()
    })
    .await;
}

async fn no_update_lost(options: SqliteOptions) {
    const KEYS: usize = 4;
    const WRITERS: usize = 16;
    const EACH: usize = 25;
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path(), options.clone()).unwrap();
    for k in 0..KEYS {
        store.create(&format!("/n/{k}"), b("0")).await.unwrap();
    }
    let start = store.current_revision();
    let mut writers = tokio::task::JoinSet::new();
    for w in 0..WRITERS {
        let store = store.clone();
        writers.spawn(async move {
            for i in 0..EACH {
                let key = format!("/n/{}", (w + i) % KEYS);
                loop {
                    let read = store.get(&key).unwrap().unwrap();
                    let n: u64 = std::str::from_utf8(&read.value).unwrap().parse().unwrap();
                    match store.update_from(&read, b(&(n + 1).to_string())).await {
                        Ok(_) => break,
                        Err(StoreError::Conflict { .. }) => continue,
                        Err(e) => panic!("{e}"),
                    }
                }
            }
        });
    }
    while let Some(done) = writers.join_next().await {
        done.unwrap();
    }
    let total = |store: &SqliteStore| -> u64 {
        (0..KEYS)
            .map(|k| {
                let kv = store.get(&format!("/n/{k}")).unwrap().unwrap();
                std::str::from_utf8(&kv.value)
                    .unwrap()
                    .parse::<u64>()
                    .unwrap()
            })
            .sum()
    };
    assert_eq!(total(&store), (WRITERS * EACH) as u64);
    let stats = store.writer_stats().unwrap();
    assert!(stats.publisher_busy_seconds > 0.0, "{stats:?}");
    assert!(
        stats.syncs >= 1 && stats.syncs <= stats.commits,
        "{stats:?}"
    );
    // Each key's changes in order, each replacing the one before.
    let events = at_least(store.watch("/n/", start).unwrap(), WRITERS * EACH).await;
    assert_eq!(events.len(), WRITERS * EACH);
    for pair in events.windows(2) {
        assert!(pair[0].kv.mod_revision < pair[1].kv.mod_revision);
    }
    for event in &events {
        let n: u64 = std::str::from_utf8(&event.kv.value)
            .unwrap()
            .parse()
            .unwrap();
        let prev = event.prev.as_ref().expect("an update replaces a value");
        let before: u64 = std::str::from_utf8(&prev.value).unwrap().parse().unwrap();
        assert_eq!(n, before + 1, "{event:?}");
    }
    drop(store);
    let reopened = SqliteStore::open(dir.path(), options).unwrap();
    assert_eq!(total(&reopened), (WRITERS * EACH) as u64);
}

/// A store dropped lets go of its files: its threads end, the last
/// connection closes, and SQLite folds the write-ahead log into the
/// database file and removes it. (A store whose threads lived on would
/// hold a connection and its files for the life of the process: a member
/// simulator opens and drops one per member.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_store_closes_its_files() {
    let dir = tempfile::tempdir().unwrap();
    let wal = dir.path().join("flotilla.db-wal");
    {
        let store = open(dir.path());
        let mut writes = tokio::task::JoinSet::new();
        for i in 0..64 {
            let store = store.clone();
            writes.spawn(async move { store.create(&format!("/d/{i}"), b("v")).await });
        }
        while let Some(written) = writes.join_next().await {
            written.unwrap().unwrap();
        }
        assert!(wal.exists(), "the log is open while the store is");
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while wal.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the store's log is still open 10 s after it was dropped"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        open(dir.path())
            .list("/d/", &ListOptions::default())
            .unwrap()
            .items
            .len(),
        64
    );
}

async fn list_at_an_older_revision_and_paginate(backend: &Backend) {
    let store = backend.open().await;
    for i in 0..10 {
        store.create(&format!("/p/{i}"), b("v1")).await.unwrap();
    }
    let at = store.current_revision();
    store
        .update(
            "/p/3",
            b("v2"),
            store.get("/p/3").unwrap().unwrap().mod_revision,
        )
        .await
        .unwrap();
    store
        .delete("/p/4", DeletePrecondition::default())
        .await
        .unwrap();
    store.create("/p/99", b("new")).await.unwrap();
    store.create("/q/0", b("other prefix")).await.unwrap();

    let old = store
        .list(
            "/p/",
            &ListOptions {
                revision: Some(at),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(old.revision, at);
    assert_eq!(old.items.len(), 10);
    assert_eq!(
        old.items
            .iter()
            .find(|kv| &*kv.key == "/p/3")
            .unwrap()
            .value,
        b("v1")
    );

    let now = store.list("/p/", &ListOptions::default()).unwrap();
    assert_eq!(now.items.len(), 10);
    assert!(now.items.iter().all(|kv| &*kv.key != "/p/4"));

    // Pages of 3 at a fixed revision see the same snapshot.
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let page = store
            .list(
                "/p/",
                &ListOptions {
                    revision: Some(at),
                    start_after: after.clone(),
                    limit: Some(3),
                },
            )
            .unwrap();
        seen.extend(page.items.iter().map(|kv| kv.key.to_string()));
        if !page.more {
            break;
        }
        after = page.items.last().map(|kv| kv.key.to_string());
    }
    assert_eq!(seen.len(), 10);
}

async fn watch_from_revision_and_expire_after_compaction(backend: &Backend) {
    let store = backend.open().await;
    let first = store.create("/w/a", b("1")).await.unwrap();
    let watch = store.watch("/w/", first.mod_revision).unwrap();
    store.create("/x/ignored", b("1")).await.unwrap();
    store
        .update("/w/a", b("2"), first.mod_revision)
        .await
        .unwrap();
    store
        .delete("/w/a", DeletePrecondition::default())
        .await
        .unwrap();
    let events = at_least(watch, 2).await;
    assert_eq!(events[0].kind, EventKind::Put);
    assert_eq!(events[0].prev.as_ref().unwrap().value, b("1"));
    assert_eq!(events[1].kind, EventKind::Delete);
    assert_eq!(events[1].kv.value, b("2"));

    let now = store.current_revision();
    store.compact(now - 1).await.unwrap();
    assert!(matches!(
        store.watch("/w/", first.mod_revision),
        Err(StoreError::Compacted { .. })
    ));
    assert!(matches!(
        store.list(
            "/w/",
            &ListOptions {
                revision: Some(first.mod_revision),
                ..Default::default()
            }
        ),
        Err(StoreError::Compacted { .. })
    ));
    assert!(store.watch("/w/", now - 1).is_ok());
}

#[tokio::test]
async fn state_history_and_compaction_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let (rev_after_create, final_rev) = {
        let store = open(dir.path());
        let a = store.create("/k/a", b("1")).await.unwrap();
        store.create("/k/b", b("1")).await.unwrap();
        store.update("/k/a", b("2"), a.mod_revision).await.unwrap();
        store
            .delete("/k/b", DeletePrecondition::default())
            .await
            .unwrap();
        store.compact(a.mod_revision).await.unwrap();
        (a.mod_revision, store.current_revision())
    };
    // The writer thread lets go of the database when the store is dropped.
    let store = open(dir.path());
    assert_eq!(store.current_revision(), final_rev);
    assert_eq!(store.get("/k/a").unwrap().unwrap().value, b("2"));
    assert!(store.get("/k/b").unwrap().is_none());
    assert_eq!(store.compacted_revision(), rev_after_create);
    // Watches resume from before the restart.
    let mut watch = store.watch("/k/", rev_after_create).unwrap();
    let events = watch.next().await.unwrap();
    assert_eq!(events.len(), 3);
    // New writes continue the revision sequence.
    let c = store.create("/k/c", b("1")).await.unwrap();
    assert_eq!(c.mod_revision, final_rev + 1);
}

async fn concurrent_writers_get_distinct_revisions(backend: &Backend) {
    let store = backend.open().await;
    let mut tasks = Vec::new();
    for t in 0..8 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut revs = Vec::new();
            for i in 0..50 {
                revs.push(
                    store
                        .create(&format!("/c/{t}/{i}"), b("v"))
                        .await
                        .unwrap()
                        .mod_revision,
                );
            }
            revs
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 400);
    assert_eq!(
        store
            .list("/c/", &ListOptions::default())
            .unwrap()
            .items
            .len(),
        400
    );
}

/// A value the size of a stored pod (the cache compresses values this big).
fn big(tag: &str) -> Bytes {
    let containers: Vec<String> = (0..40)
        .map(|i| format!(r#"{{"name":"c{i}","image":"registry.example/{tag}:{i}"}}"#))
        .collect();
    Bytes::from(format!(
        r#"{{"kind":"Pod","metadata":{{"name":"{tag}"}},"spec":{{"containers":[{}]}}}}"#,
        containers.join(",")
    ))
}

async fn large_values_read_back_exactly(backend: &Backend) {
    write_large_values(&*backend.open().await).await;
}

/// Writes, updates and deletes large values, checking every read path;
/// returns the first write's revision.
async fn write_large_values(store: &dyn Store) -> i64 {
    {
        let a = store.create("/p/a", big("a1")).await.unwrap();
        store.create("/p/b", big("b1")).await.unwrap();
        let a2 = store
            .update("/p/a", big("a2"), a.mod_revision)
            .await
            .unwrap();
        assert_eq!(store.get("/p/a").unwrap().unwrap().value, big("a2"));
        let gone = store
            .delete("/p/b", DeletePrecondition::default())
            .await
            .unwrap();
        assert_eq!(gone.value, big("b1"));
        // The state as it was before the update and the deletion.
        let old = store
            .list(
                "/p/",
                &ListOptions {
                    revision: Some(a.mod_revision + 1),
                    ..Default::default()
                },
            )
            .unwrap();
        let values: Vec<Bytes> = old.items.into_iter().map(|kv| kv.value).collect();
        assert_eq!(values, vec![big("a1"), big("b1")]);
        assert_eq!(a2.value, big("a2"));
        a.mod_revision
    }
}

#[tokio::test]
async fn large_values_read_back_exactly_after_a_restart_of_the_embedded_store() {
    let dir = tempfile::tempdir().unwrap();
    let (created, final_rev) = {
        let store = open(dir.path());
        let created = write_large_values(&*store).await;
        (created, store.current_revision())
    };
    // After a restart the history (rebuilt from disk) reads the same.
    let store = open(dir.path());
    assert_eq!(store.current_revision(), final_rev);
    let events = at_least(store.watch("/p/", created).unwrap(), 3).await;
    assert_eq!(events[0].kv.value, big("b1"));
    assert_eq!(events[1].kv.value, big("a2"));
    assert_eq!(events[1].prev.as_ref().unwrap().value, big("a1"));
    assert_eq!(events[2].kind, EventKind::Delete);
    assert_eq!(events[2].kv.value, big("b1"));
    assert_eq!(events[2].prev.as_ref().unwrap().value, big("b1"));
    let listed = store.list("/p/", &ListOptions::default()).unwrap();
    assert_eq!(listed.items.len(), 1);
    assert_eq!(listed.items[0].value, big("a2"));
}

/// The cache compresses a large family of values (one resource type)
/// against a dictionary made of its own values: every one of them, those
/// packed before the dictionary existed and those after, reads back
/// exactly, before and after a restart.
#[tokio::test]
async fn a_large_family_of_values_reads_back_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let key = |i: usize| format!("/work.karmada.io/works/ns/w{i:04}");
    let from = {
        let store = open(dir.path());
        let from = store.current_revision();
        for i in 0..150 {
            store.create(&key(i), big(&format!("w{i}"))).await.unwrap();
        }
        for i in (0..150).step_by(3) {
            let kv = store.get(&key(i)).unwrap().unwrap();
            store
                .update(&key(i), big(&format!("w{i}-v2")), kv.mod_revision)
                .await
                .unwrap();
        }
        from
    };
    let expected = |i: usize| {
        if i.is_multiple_of(3) {
            big(&format!("w{i}-v2"))
        } else {
            big(&format!("w{i}"))
        }
    };
    // Twice: the second reopen reads what the first one's cache rebuilt.
    for _ in 0..2 {
        let store = open(dir.path());
        let listed = store
            .list("/work.karmada.io/works/", &ListOptions::default())
            .unwrap();
        assert_eq!(listed.items.len(), 150);
        for (i, kv) in listed.items.iter().enumerate() {
            assert_eq!(kv.value, expected(i), "{}", kv.key);
        }
        let events = at_least(store.watch("/work.karmada.io/works/", from).unwrap(), 200).await;
        for (i, e) in events[..150].iter().enumerate() {
            assert_eq!(e.kv.value, big(&format!("w{i}")));
        }
        for (n, e) in events[150..].iter().enumerate() {
            let i = n * 3;
            assert_eq!(e.kv.value, big(&format!("w{i}-v2")));
            assert_eq!(e.prev.as_ref().unwrap().value, big(&format!("w{i}")));
        }
        drop(store);
    }
}

async fn a_watch_far_behind_gets_every_event_in_order(backend: &Backend) {
    let store = backend.open().await;
    let start = store.current_revision();
    let mut watch = store.watch("/far/", start).unwrap();
    // A burst the watch reads only once it is over, interleaved with
    // writes under another prefix.
    for i in 0..1_200 {
        store.create(&format!("/far/{i:04}"), b("v")).await.unwrap();
        if i % 3 == 0 {
            store
                .create(&format!("/near/{i:04}"), b("v"))
                .await
                .unwrap();
        }
    }
    let mut keys = Vec::new();
    let mut revisions = Vec::new();
    while keys.len() < 1_200 {
        let batch = tokio::time::timeout(Duration::from_secs(5), watch.next())
            .await
            .expect("events within 5 s")
            .unwrap();
        for e in batch {
            keys.push(e.kv.key.to_string());
            revisions.push(e.kv.mod_revision);
        }
    }
    let expected: Vec<String> = (0..1_200).map(|i| format!("/far/{i:04}")).collect();
    assert_eq!(keys, expected);
    assert!(revisions.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(watch.revision(), *revisions.last().unwrap());
}

/// The window holds its newest events both compressed and plain; a watch
/// that starts in the older part, one that starts among the newest, and
/// gets of keys changed long ago and just now all read exact values.
async fn watches_from_anywhere_in_the_window_see_each_value_and_its_previous(backend: &Backend) {
    let store = backend.open().await;
    let start = store.current_revision();
    const KEYS: usize = 50;
    const ROUNDS: usize = 60;
    for k in 0..KEYS {
        store
            .create(&format!("/fw/{k}"), big(&format!("{k}-0")))
            .await
            .unwrap();
    }
    let mut revision = vec![0; KEYS];
    for round in 1..ROUNDS {
        for (k, rev) in revision.iter_mut().enumerate() {
            let key = format!("/fw/{k}");
            let current = store.get(&key).unwrap().unwrap();
            assert_eq!(current.value, big(&format!("{k}-{}", round - 1)), "{key}");
            *rev = store
                .update(&key, big(&format!("{k}-{round}")), current.mod_revision)
                .await
                .unwrap()
                .mod_revision;
        }
    }
    store
        .delete("/fw/0", DeletePrecondition::default())
        .await
        .unwrap();
    assert!(store.get("/fw/0").unwrap().is_none());
    assert_eq!(
        store.get("/fw/1").unwrap().unwrap().value,
        big(&format!("1-{}", ROUNDS - 1))
    );
    let end = store.current_revision();
    let total = (end - start) as usize;
    assert_eq!(total, KEYS * ROUNDS + 1);

    // From the start, from the middle and from near the end.
    for skip in [0, total / 2, total - 20] {
        let events = at_least(
            store.watch("/fw/", start + skip as i64).unwrap(),
            total - skip,
        )
        .await;
        assert_eq!(events.len(), total - skip);
        for (i, e) in events.iter().enumerate() {
            let n = skip + i;
            if n == total - 1 {
                assert_eq!((e.kind, &*e.kv.key), (EventKind::Delete, "/fw/0"));
                continue;
            }
            let (k, round) = (n % KEYS, n / KEYS);
            assert_eq!(&*e.kv.key, format!("/fw/{k}"), "event {n}");
            assert_eq!(e.kv.value, big(&format!("{k}-{round}")), "event {n}");
            match round {
                0 => assert!(e.prev.is_none(), "event {n}"),
                _ => assert_eq!(
                    e.prev.as_ref().map(|p| p.value.clone()),
                    Some(big(&format!("{k}-{}", round - 1))),
                    "event {n}"
                ),
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_etcd_store_keeps_its_state_across_a_restart_and_expires_older_watches() {
    let etcd = flotilla_store::testing::single();
    let (created, final_rev) = {
        let store = open_etcd(&etcd).await;
        let a = store.create("/k/a", b("1")).await.unwrap();
        store.create("/k/b", b("1")).await.unwrap();
        store.update("/k/a", b("2"), a.mod_revision).await.unwrap();
        store
            .delete("/k/b", DeletePrecondition::default())
            .await
            .unwrap();
        (a.mod_revision, store.current_revision())
    };
    let store = open_etcd(&etcd).await;
    assert_eq!(store.current_revision(), final_rev);
    let a = store.get("/k/a").unwrap().unwrap();
    assert_eq!((a.value, a.create_revision), (b("2"), created));
    assert!(store.get("/k/b").unwrap().is_none());
    // A restarted replica holds no history, as kube-apiserver's watch cache
    // after a restart: older watches get 410 Expired and relist.
    assert!(matches!(
        store.watch("/k/", created),
        Err(StoreError::Compacted { .. })
    ));
    let c = store.create("/k/c", b("1")).await.unwrap();
    assert_eq!(c.mod_revision, final_rev + 1);
}

/// Two control-plane replicas on one etcd: each sees what the other
/// writes, and compare-and-swap holds across them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_on_one_etcd_see_each_others_writes_and_conflict() {
    let etcd = flotilla_store::testing::single();
    let (one, two) = (open_etcd(&etcd).await, open_etcd(&etcd).await);
    let mut watch = two.watch("/r/", two.current_revision()).unwrap();
    let a = one.create("/r/a", b("1")).await.unwrap();
    let events = tokio::time::timeout(Duration::from_secs(5), watch.next())
        .await
        .expect("the other replica's write within 5 s")
        .unwrap();
    assert_eq!(events[0].kv.key.as_ref(), "/r/a");
    assert_eq!(
        two.get("/r/a").unwrap().unwrap().mod_revision,
        a.mod_revision
    );
    two.update("/r/a", b("2"), a.mod_revision).await.unwrap();
    assert!(matches!(
        one.update("/r/a", b("3"), a.mod_revision).await,
        Err(StoreError::Conflict { .. })
    ));
    assert!(matches!(
        one.create("/r/a", b("again")).await,
        Err(StoreError::AlreadyExists(_))
    ));
}

/// With three etcd members, killing one leaves the store serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_etcd_store_keeps_serving_when_one_of_three_members_dies() {
    let mut members = flotilla_store::testing::cluster(3);
    let store = EtcdStore::open(EtcdOptions {
        endpoints: members.iter().map(|m| m.client_url.clone()).collect(),
        compaction_interval: None,
        ..Default::default()
    })
    .await
    .unwrap();
    store.create("/h/before", b("1")).await.unwrap();
    members[0].kill();
    // The client moves to a live member; a request on the way may fail.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut written = 0;
    let mut i = 0;
    while written < 20 {
        i += 1;
        match store.create(&format!("/h/after{i}"), b("1")).await {
            Ok(_) => written += 1,
            Err(e) => assert!(
                std::time::Instant::now() < deadline,
                "still failing after one member died: {e}"
            ),
        }
    }
    assert_eq!(
        store
            .list("/h/", &ListOptions::default())
            .unwrap()
            .items
            .len(),
        21
    );
}

/// The embedded store keeps only a window of events in memory; a watch or
/// list from before it reads the log, back to the last compaction, and
/// across a restart.
#[tokio::test]
async fn the_embedded_store_serves_watches_and_lists_from_before_its_window() {
    let dir = tempfile::tempdir().unwrap();
    let options = SqliteOptions {
        compaction_interval: None,
        history_capacity: 16,
        ..Default::default()
    };
    let store = SqliteStore::open(dir.path(), options.clone()).unwrap();
    let start = store.current_revision();
    // More events under the prefix than one read of the log returns, with
    // other keys in between.
    for i in 0..1_100 {
        store.create(&format!("/w/{i:04}"), b("1")).await.unwrap();
        if i % 4 == 0 {
            store.create(&format!("/x/{i:04}"), b("1")).await.unwrap();
        }
    }
    let middle = store.current_revision();
    let first = store.get("/w/0000").unwrap().unwrap();
    store
        .update("/w/0000", b("2"), first.mod_revision)
        .await
        .unwrap();
    store
        .delete("/w/0001", DeletePrecondition::default())
        .await
        .unwrap();
    let end = store.current_revision();

    // Every event under the prefix up to `end`: one per write.
    let read_all = |store: Arc<SqliteStore>| async move {
        at_least(store.watch("/w/", start).unwrap(), 1_102).await
    };
    for events in [read_all(store.clone()).await, {
        drop(store);
        let reopened = SqliteStore::open(dir.path(), options.clone()).unwrap();
        read_all(reopened).await
    }] {
        assert_eq!(events.len(), 1_102);
        assert!(events.iter().all(|e| e.kv.key.starts_with("/w/")));
        assert!(events.windows(2).all(|w| w[0].revision() < w[1].revision()));
        let update = &events[1_100];
        assert_eq!((update.kind, &*update.kv.key), (EventKind::Put, "/w/0000"));
        assert_eq!(update.prev.as_ref().unwrap().value, b("1"));
        let delete = &events[1_101];
        assert_eq!(
            (delete.kind, &*delete.kv.key),
            (EventKind::Delete, "/w/0001")
        );
        assert_eq!(delete.kv.value, b("1"));
    }

    let store = SqliteStore::open(dir.path(), options).unwrap();
    let then = store
        .list(
            "/w/",
            &ListOptions {
                revision: Some(middle),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!((then.items.len(), then.revision), (1_100, middle));
    assert_eq!(then.items[0].value, b("1"));
    let now = store.list("/w/", &ListOptions::default()).unwrap();
    assert_eq!((now.items.len(), now.revision), (1_099, end));
    assert_eq!(now.items[0].value, b("2"));
    assert!(store.get("/w/0001").unwrap().is_none());

    store.compact(middle).await.unwrap();
    assert!(matches!(
        store.watch("/w/", start),
        Err(StoreError::Compacted { .. })
    ));
    let mut watch = store.watch("/w/", middle).unwrap();
    let batch = watch.next().await.unwrap();
    assert_eq!(batch.len(), 2);
}

/// Writers never fail while readers list and get the same keys: the
/// embedded store reads through its own connections beside the writer.
async fn writes_succeed_while_readers_list_and_get(backend: &Backend) {
    let store = backend.open().await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut readers = Vec::new();
    for r in 0..6 {
        let store = store.clone();
        let stop = stop.clone();
        readers.push(tokio::spawn(async move {
            let mut reads = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if r % 2 == 0 {
                    store.list("/rw/", &ListOptions::default()).unwrap();
                } else {
                    store.get(&format!("/rw/{r}/0")).unwrap();
                }
                reads += 1;
                tokio::task::yield_now().await;
            }
            reads
        }));
    }
    let mut writers = Vec::new();
    for w in 0..16 {
        let store = store.clone();
        writers.push(tokio::spawn(async move {
            for i in 0..150 {
                let key = format!("/rw/{w}/{i}");
                let created = store.create(&key, b("v")).await.unwrap();
                store
                    .update(&key, b("w"), created.mod_revision)
                    .await
                    .unwrap();
            }
        }));
    }
    for w in writers {
        w.await.unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for r in readers {
        assert!(r.await.unwrap() > 0);
    }
    let listed = store.list("/rw/", &ListOptions::default()).unwrap();
    assert_eq!(listed.items.len(), 16 * 150);
    assert!(listed.items.iter().all(|kv| kv.value == b("w")));
}

/// Committed writes reach the database file beside the writer (the WAL is
/// checkpointed by a thread of its own), long before the writer's own
/// backstop of 64 MiB of WAL would copy them: 256 writes, too few to make
/// a checkpoint due at once, are copied within seconds all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_writes_are_checkpointed_into_the_database_file() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let db = dir.path().join("flotilla.db");
    let before = std::fs::metadata(&db).unwrap().len();
    // Values that do not compress: the log keeps them packed.
    let value = |i: u64| -> Bytes {
        let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..8 * 1024)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect::<Vec<u8>>()
            .into()
    };
    for i in 0..256 {
        store.create(&format!("/k/{i:04}"), value(i)).await.unwrap();
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let size = std::fs::metadata(&db).unwrap().len();
        if size >= before + 2 * 1024 * 1024 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the database file holds {size} bytes after 2 MiB were committed ({before} before)"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(store.get("/k/0255").unwrap().unwrap().value, value(255));
}

/// A Work-like JSON value of about 1.8 KiB: alike across keys, as the
/// objects of one kind are, with a uid and a name of its own.
fn work(i: usize, state: &str) -> Bytes {
    let uid = format!(
        "{:08x}-{:04x}-4ae0-a5f6-{:012x}",
        i * 7919,
        i % 65536,
        i * 104_729
    );
    let manifest = format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"t{i:06}","namespace":"bench","labels":{{"propagationpolicy.karmada.io/name":"bench"}}}},"data":{{"index":"{i}","payload":"{}"}}}}"#,
        "x".repeat(256)
    );
    Bytes::from(format!(
        r#"{{"apiVersion":"work.karmada.io/v1alpha1","kind":"Work","metadata":{{"name":"t{i:06}-54b9c8b48d","namespace":"karmada-es-member-{}","uid":"{uid}","resourceVersion":"{}","creationTimestamp":"2026-11-28T12:{:02}:{:02}Z","labels":{{"resourcebinding.karmada.io/permanent-id":"{uid}","work.karmada.io/permanent-id":"{uid}"}},"annotations":{{"resourcebinding.karmada.io/name":"t{i:06}-configmap","resourcebinding.karmada.io/namespace":"bench"}},"finalizers":["karmada.io/execution-controller"],"managedFields":[{{"manager":"flotilla-controlplane","operation":"Update","apiVersion":"work.karmada.io/v1alpha1","time":"2026-11-28T12:00:00Z","fieldsType":"FieldsV1","fieldsV1":{{"f:spec":{{"f:workload":{{}}}}}}}}]}},"spec":{{"workload":{{"manifests":[{manifest}]}}}},"status":{{"state":"{state}"}}}}"#,
        i % 10,
        i * 3 + 7,
        i % 60,
        (i * 7) % 60,
    ))
}

/// Creates `work(i, "created")` at `key(i)` for each `i` of `range` in a
/// store opened on `dir`, then closes it.
async fn create_works(
    dir: &std::path::Path,
    key: &dyn Fn(usize) -> String,
    range: std::ops::Range<usize>,
) {
    let store = open(dir);
    for i in range {
        store.create(&key(i), work(i, "created")).await.unwrap();
    }
}

/// The bytes the log keeps for `key`'s newest row, and the dictionaries
/// it holds, read from the database file beside the store.
fn kept(dir: &std::path::Path, key: &str) -> (usize, i64) {
    let conn = rusqlite::Connection::open(dir.join("flotilla.db")).unwrap();
    let bytes: i64 = conn
        .query_row(
            "SELECT length(value) FROM log WHERE key = ?1 ORDER BY revision DESC LIMIT 1",
            [key],
            |r| r.get(0),
        )
        .unwrap();
    let dictionaries: i64 = conn
        .query_row("SELECT COUNT(*) FROM dictionaries", [], |r| r.get(0))
        .unwrap();
    (bytes as usize, dictionaries)
}

/// The log keeps values packed against dictionaries of their family's own
/// values, and keeps the dictionaries: after a restart the family packs
/// against the one it had (no new one is made before the next threshold),
/// and everything reads back exactly, from the log and from the window.
#[tokio::test]
async fn the_log_keeps_values_packed_and_their_dictionaries_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let key = |i: usize| format!("/work.karmada.io/works/karmada-es-member-1/w{i:04}");
    create_works(dir.path(), &key, 0..100).await;
    let raw = work(99, "created").len();
    let (bytes, dictionaries) = kept(dir.path(), &key(99));
    assert_eq!(
        dictionaries, 1,
        "one dictionary, made at the family's 64th value"
    );
    assert!(
        bytes * 4 < raw,
        "the log keeps {bytes} bytes of a {raw}-byte value"
    );
    {
        let store = open(dir.path());
        for i in 100..200 {
            store.create(&key(i), work(i, "created")).await.unwrap();
        }
        for i in (0..200).step_by(2) {
            let current = store.get(&key(i)).unwrap().unwrap();
            store
                .update_from(&current, work(i, "applied"))
                .await
                .unwrap();
        }
    }
    let (bytes, dictionaries) = kept(dir.path(), &key(150));
    assert_eq!(
        dictionaries, 1,
        "the restarted store packed against the kept dictionary"
    );
    assert!(
        bytes * 4 < raw,
        "after the restart the log keeps {bytes} bytes"
    );
    let expected = |i: usize| {
        work(
            i,
            if i.is_multiple_of(2) {
                "applied"
            } else {
                "created"
            },
        )
    };
    let store = open_with_window(dir.path(), 10);
    let listed = store
        .list("/work.karmada.io/works/", &ListOptions::default())
        .unwrap();
    assert_eq!(listed.items.len(), 200);
    for (i, kv) in listed.items.iter().enumerate() {
        assert_eq!(kv.value, expected(i), "{}", kv.key);
        assert_eq!(store.get(&kv.key).unwrap().unwrap().value, expected(i));
    }
    let events = at_least(store.watch("/work.karmada.io/works/", 0).unwrap(), 300).await;
    for e in &events[200..] {
        let i: usize = e.kv.key[e.kv.key.len() - 4..].parse().unwrap();
        assert_eq!(e.kv.value, work(i, "applied"));
        assert_eq!(e.prev.as_ref().unwrap().value, work(i, "created"));
    }
    drop(store);
    // A window that replays the last 100 events (all updates) on open
    // packs them against the kept dictionary too: replaying them makes
    // no dictionary of its own that later writes would be packed with.
    let store = open_with_window(dir.path(), 100);
    for i in (1..200).step_by(2) {
        let current = store.get(&key(i)).unwrap().unwrap();
        store
            .update_from(&current, work(i, "applied"))
            .await
            .unwrap();
    }
    drop(store);
    let (_, dictionaries) = kept(dir.path(), &key(1));
    assert_eq!(
        dictionaries, 1,
        "the replayed history made a dictionary of its own"
    );
}

/// A store of format 1 (plain values, no dictionaries) opens: its rows
/// read as they were, new ones are packed, and it is stamped format 2.
#[tokio::test]
async fn a_store_of_format_1_opens_and_keeps_its_plain_rows() {
    let dir = tempfile::tempdir().unwrap();
    let key = |i: usize| format!("/work.karmada.io/works/ns/w{i:04}");
    {
        let conn = rusqlite::Connection::open(dir.path().join("flotilla.db")).unwrap();
        conn.execute_batch(
            "CREATE TABLE log (revision INTEGER PRIMARY KEY, key TEXT NOT NULL,
                 deleted INTEGER NOT NULL, create_revision INTEGER NOT NULL,
                 prev_revision INTEGER, value BLOB NOT NULL);
             CREATE INDEX log_key_revision ON log (key, revision);
             CREATE TABLE meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
             PRAGMA user_version = 1;",
        )
        .unwrap();
        for i in 0..80 {
            conn.execute(
                "INSERT INTO log VALUES (?1, ?2, 0, ?1, NULL, ?3)",
                rusqlite::params![i as i64 + 1, key(i), &work(i, "created")[..]],
            )
            .unwrap();
        }
    }
    {
        let store = open(dir.path());
        assert_eq!(store.current_revision(), 80);
        assert_eq!(
            store.get(&key(3)).unwrap().unwrap().value,
            work(3, "created")
        );
        for i in 0..80 {
            let current = store.get(&key(i)).unwrap().unwrap();
            store
                .update_from(&current, work(i, "applied"))
                .await
                .unwrap();
        }
    }
    let conn = rusqlite::Connection::open(dir.path().join("flotilla.db")).unwrap();
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, 2);
    let packed: i64 = conn
        .query_row("SELECT COUNT(*) FROM log WHERE packing != 0", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(packed, 80, "the updates are packed, the old rows not");
    let store = open(dir.path());
    let events = at_least(store.watch("/work.karmada.io/works/", 0).unwrap(), 160).await;
    for (i, e) in events[..80].iter().enumerate() {
        assert_eq!(e.kv.value, work(i, "created"));
    }
    for (i, e) in events[80..].iter().enumerate() {
        assert_eq!(e.kv.value, work(i, "applied"));
        assert_eq!(e.prev.as_ref().unwrap().value, work(i, "created"));
    }
}

/// A row that names a dictionary the file lacks (a damaged file) is
/// refused with the cause, not read as something else.
#[tokio::test]
async fn a_value_packed_against_a_missing_dictionary_is_refused_with_its_cause() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = open(dir.path());
        for i in 0..70 {
            store
                .create(
                    &format!("/work.karmada.io/works/ns/w{i:04}"),
                    work(i, "created"),
                )
                .await
                .unwrap();
        }
    }
    {
        let conn = rusqlite::Connection::open(dir.path().join("flotilla.db")).unwrap();
        let changed = conn.execute("DELETE FROM dictionaries", []).unwrap();
        assert_eq!(changed, 1);
    }
    let err = SqliteStore::open(dir.path(), SqliteOptions::default())
        .err()
        .expect("a damaged store is refused");
    let message = err.to_string();
    assert!(
        message.contains("damaged") && message.contains("dictionary"),
        "{message}"
    );
}

/// A row whose bytes do not unpack (a damaged file) fails the reads and
/// the writes of its own key with the cause; every other key is read and
/// written as before.
#[tokio::test]
async fn a_damaged_value_fails_its_own_key_and_no_other() {
    let dir = tempfile::tempdir().unwrap();
    let key = |i: usize| format!("/work.karmada.io/works/ns/w{i:04}");
    create_works(dir.path(), &key, 0..100).await;
    {
        let conn = rusqlite::Connection::open(dir.path().join("flotilla.db")).unwrap();
        let changed = conn
            .execute(
                "UPDATE log SET value = x'ffffffff00112233' WHERE key = ?1",
                [key(3)],
            )
            .unwrap();
        assert_eq!(changed, 1);
    }
    // The damaged row is older than the window replays on open.
    let store = open_with_window(dir.path(), 10);
    let read = store.get(&key(3)).unwrap_err().to_string();
    assert!(read.contains("damaged"), "{read}");
    let write = store
        .update(&key(3), work(3, "applied"), 4)
        .await
        .unwrap_err()
        .to_string();
    assert!(write.contains("damaged"), "{write}");
    let current = store.get(&key(4)).unwrap().unwrap();
    assert_eq!(current.value, work(4, "created"));
    store
        .update_from(&current, work(4, "applied"))
        .await
        .unwrap();
    store.create(&key(100), work(100, "created")).await.unwrap();
    assert_eq!(
        store.get(&key(4)).unwrap().unwrap().value,
        work(4, "applied")
    );
}
