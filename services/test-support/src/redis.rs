//! The test Redis (`COUNTERSIGN_TEST_REDIS_URL`) and a key prefix per test,
//! so that tests sharing it never see each other's keys.

use countersign_queue::{RedisQueue, RedisQueueOptions};

pub const URL_VAR: &str = "COUNTERSIGN_TEST_REDIS_URL";

/// The test Redis's URL; a missing variable fails the test.
pub fn url() -> String {
    crate::env_var(URL_VAR)
}

/// A key prefix no other test uses.
pub fn prefix() -> String {
    crate::random_name("countersign-test:")
}

/// The queue's default options under a [`prefix`] of their own.
pub fn options() -> RedisQueueOptions {
    RedisQueueOptions {
        prefix: prefix(),
        ..RedisQueueOptions::default()
    }
}

/// The Redis queue with `options`, connected to the test Redis.
pub async fn queue_with(options: RedisQueueOptions) -> RedisQueue {
    let url = url();
    RedisQueue::connect(&url, options)
        .await
        .unwrap_or_else(|error| panic!("Redis at {url} ({URL_VAR}) does not answer: {error}"))
}

/// The Redis queue under `prefix` (processes of one deployment share it).
pub async fn queue_at(prefix: &str) -> RedisQueue {
    queue_with(RedisQueueOptions {
        prefix: prefix.to_owned(),
        ..RedisQueueOptions::default()
    })
    .await
}

/// The Redis queue under a [`prefix`] of its own.
pub async fn queue() -> RedisQueue {
    queue_with(options()).await
}
