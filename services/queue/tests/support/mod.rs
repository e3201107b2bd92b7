//! What the queue tests share: a real Redis (from COUNTERSIGN_TEST_REDIS_URL,
//! which `tests/services/redis.sh` starts and prints), a real SQLite database,
//! and fresh proposal ids.
// Each test binary uses only some of these helpers.
#![allow(dead_code)]

use std::{sync::Arc, time::Duration};

use countersign_queue::{DynQueue, Lease, Queue, RedisQueue, RedisQueueOptions};
use countersign_store::{EmbeddedQueue, SqliteStore, Store};
use rand::RngCore;

pub const REDIS_URL_VAR: &str = "COUNTERSIGN_TEST_REDIS_URL";

/// The test Redis; a missing variable fails the test (it is never skipped).
pub fn redis_url() -> String {
    std::env::var(REDIS_URL_VAR).unwrap_or_else(|_| {
        panic!(
            "{REDIS_URL_VAR} is not set: the Redis queue tests need a real redis-server. \
             Start one with `eval \"$(tests/services/redis.sh)\"` (tests/run does this)."
        )
    })
}

fn random_hex() -> String {
    let mut bytes = [0u8; 8];
    rand::rng().fill_bytes(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Options with a key prefix of its own, so tests never see each other's keys.
pub fn isolated_options() -> RedisQueueOptions {
    RedisQueueOptions {
        prefix: format!("countersign-test:{}", random_hex()),
        ..RedisQueueOptions::default()
    }
}

pub async fn redis_queue_with(options: RedisQueueOptions) -> RedisQueue {
    let url = redis_url();
    RedisQueue::connect(&url, options)
        .await
        .unwrap_or_else(|error| panic!("Redis at {url} ({REDIS_URL_VAR}) does not answer: {error}"))
}

pub async fn redis_queue() -> RedisQueue {
    redis_queue_with(isolated_options()).await
}

/// A raw connection to the test Redis, to look at what the queue wrote.
pub async fn redis_connection() -> redis::aio::MultiplexedConnection {
    redis::Client::open(redis_url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Keeps what a backend needs alive for the length of a test.
pub enum Guard {
    None,
    Dir(tempfile::TempDir),
}

pub async fn redis() -> (DynQueue, Guard) {
    (Arc::new(redis_queue().await), Guard::None)
}

pub async fn embedded() -> (DynQueue, Guard) {
    let (store, dir) = sqlite_store().await;
    (
        Arc::new(EmbeddedQueue::new(store.writer())),
        Guard::Dir(dir),
    )
}

pub async fn sqlite_store() -> (SqliteStore, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("q.db").display());
    let store = SqliteStore::connect(&url).await.unwrap();
    store.migrate().await.unwrap();
    (store, dir)
}

/// A fresh proposal id.
pub fn proposal_id() -> String {
    format!("p-{}", random_hex())
}

/// Enqueues a new proposal of `tenant`; returns its id.
pub async fn enqueue(queue: &dyn Queue, tenant: &str) -> String {
    let id = proposal_id();
    queue.enqueue(tenant, &id).await.unwrap();
    id
}

pub const LONG: Duration = Duration::from_secs(60);

pub async fn fetch(queue: &dyn Queue, worker: &str, max: usize, lease: Duration) -> Vec<Lease> {
    queue.fetch(worker, max, lease).await.unwrap()
}
