//! What the reviewer tests share: the real Redis (from COUNTERSIGN_TEST_REDIS_URL,
//! which `tests/services/redis.sh` starts and prints), key prefixes of their
//! own, and a proposal spec.
// Each test binary uses only some of these helpers.
#![allow(dead_code)]

use countersign_domain::{BlastRadius, OperationClass, ProposalSpec};
use countersign_queue::{RedisQueue, RedisQueueOptions};

pub const REDIS_URL_VAR: &str = "COUNTERSIGN_TEST_REDIS_URL";

/// The test Redis; a missing variable fails the test (it is never skipped).
pub fn redis_url() -> String {
    std::env::var(REDIS_URL_VAR).unwrap_or_else(|_| {
        panic!(
            "{REDIS_URL_VAR} is not set: these tests need a real redis-server. \
             Start one with `eval \"$(tests/services/redis.sh)\"` (tests/run does this)."
        )
    })
}

/// A key prefix of this test's own.
pub fn fresh_prefix() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("countersign-test:reviewer-{}-{nanos}", std::process::id())
}

pub async fn redis_queue_at(prefix: &str) -> RedisQueue {
    let url = redis_url();
    let options = RedisQueueOptions {
        prefix: prefix.to_owned(),
        ..RedisQueueOptions::default()
    };
    RedisQueue::connect(&url, options)
        .await
        .unwrap_or_else(|error| panic!("Redis at {url} ({REDIS_URL_VAR}) does not answer: {error}"))
}

pub async fn redis_queue() -> RedisQueue {
    redis_queue_at(&fresh_prefix()).await
}

/// A single-device restart of `target`.
pub fn spec(target: &str) -> ProposalSpec {
    ProposalSpec {
        action: "restart".into(),
        class: OperationClass::Write,
        target: target.into(),
        parameters: Default::default(),
        reason: "r".into(),
        blast_radius: BlastRadius::SingleDevice,
        operator: String::new(),
        context_summary: String::new(),
        incident_id: String::new(),
        labels: Default::default(),
        rollback_plan: String::new(),
        force_approve_no_sop: false,
        idempotency_key: String::new(),
    }
}
