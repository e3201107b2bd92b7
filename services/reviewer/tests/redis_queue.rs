//! Reviewer workers on the Redis queue (a real Redis from
//! COUNTERSIGN_TEST_REDIS_URL, see `tests/services/redis.sh`) and the embedded
//! store: every proposal is decided once and acked, and a poison proposal is
//! dead-lettered as REJECTED "review failed" after its deliveries while the
//! others flow.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use countersign_domain::{
    ProposalState,
    gates::{self, ReviewFacts, Verdict},
};
use countersign_peers::RedisPeers;
use countersign_queue::{Queue, RedisQueue, announce_enqueued, relay_enqueued};
use countersign_reviewer::{ReviewerConfig, Reviewers};
use countersign_store::DynStore;
use countersign_test_support::{
    fixtures::{new_proposal, spec_on},
    redis,
};
use tokio_util::sync::CancellationToken;

/// Stores a proposal and publishes it to the Redis queue, as the api will.
async fn submit(store: &DynStore, queue: &RedisQueue, target: &str) -> String {
    let outcome = store
        .insert_proposal(new_proposal("acme", spec_on(target)))
        .await
        .unwrap();
    let id = outcome.proposal().id.clone();
    queue.enqueue("acme", &id).await.unwrap();
    id
}

#[tokio::test]
async fn workers_decide_every_redis_entry_once_and_dead_letter_a_poison_one() {
    let (sqlite, _dir) = countersign_test_support::sqlite::store().await;
    let store: DynStore = Arc::new(sqlite);
    store.create_tenant("acme").await.unwrap();
    let queue = redis::queue().await;

    let poison = submit(&store, &queue, "poison-node").await;
    let mut healthy = Vec::new();
    for i in 0..20 {
        healthy.push(submit(&store, &queue, &format!("node-{i:02}")).await);
    }

    let mut config = ReviewerConfig::with_workers(2);
    config.batch = 4;
    config.retry_delay = Duration::from_millis(20);
    config.idle_poll = Duration::from_millis(20);
    config.janitor_every = Duration::from_millis(100);
    config.evaluator = Arc::new(|facts: &ReviewFacts| -> Verdict {
        assert_ne!(facts.spec.target, "poison-node", "reviewer bug");
        gates::evaluate(facts)
    });
    let max_attempts = config.max_attempts;
    let reviewers = Reviewers::start(
        store.clone(),
        Arc::new(queue.clone()),
        config,
        &CancellationToken::new(),
    );

    let started = Instant::now();
    while queue.depth().await.unwrap() > 0 {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "entries left: {}",
            queue.depth().await.unwrap()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    reviewers.shutdown().await;

    for id in &healthy {
        let p = store.get_proposal("acme", id).await.unwrap().unwrap();
        assert!(p.state.is_terminal(), "{id}: {:?}", p.state);
    }
    let p = store.get_proposal("acme", &poison).await.unwrap().unwrap();
    assert_eq!(p.state, ProposalState::Rejected);
    let reason = &p.decision.unwrap().reason;
    assert!(reason.starts_with("review failed"), "{reason}");

    let dead = queue.dead_letters("acme", 10).await.unwrap();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0].proposal_id, poison);
    assert_eq!(dead[0].attempts, max_attempts + 1);
    assert!(
        dead[0].reason.contains("attempts did not complete"),
        "{dead:?}"
    );
}

/// A store with tenant `acme`, and workers that look for work no signal
/// announced only after an hour: longer than any test may take.
async fn acme_and_deaf_workers(
    queue: countersign_queue::DynQueue,
) -> (DynStore, Reviewers, tempfile::TempDir) {
    let (sqlite, dir) = countersign_test_support::sqlite::store().await;
    let store: DynStore = Arc::new(sqlite);
    store.create_tenant("acme").await.unwrap();
    let mut config = ReviewerConfig::with_workers(1);
    config.idle_poll = Duration::from_secs(3_600);
    let reviewers = Reviewers::start(store.clone(), queue, config, &CancellationToken::new());
    tokio::time::sleep(Duration::from_millis(300)).await;
    (store, reviewers, dir)
}

/// Stores a proposal of `acme` without enqueueing it; returns its id.
async fn stored(store: &DynStore) -> String {
    store
        .insert_proposal(new_proposal("acme", spec_on("node-01")))
        .await
        .unwrap()
        .proposal()
        .id
        .clone()
}

/// Waits (up to 30 s, far below the idle poll) for the proposal's decision.
async fn decided_before_the_idle_poll(store: &DynStore, id: &str) {
    let decided = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let p = store.get_proposal("acme", id).await.unwrap().unwrap();
            if p.state.is_terminal() {
                return p;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("decided without waiting for the hour-long idle poll");
    assert!(decided.decision.is_some());
}

#[tokio::test]
async fn an_idle_worker_wakes_when_this_process_enqueues_not_at_its_next_poll() {
    let queue = redis::queue().await;
    let (store, reviewers, _dir) = acme_and_deaf_workers(Arc::new(queue.clone())).await;
    // The submission's own event wakes the worker before the entry is in
    // Redis (as when the publisher has not published yet); it finds nothing
    // and waits again. The enqueue must wake it.
    let id = stored(&store).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    queue.enqueue("acme", &id).await.unwrap();
    decided_before_the_idle_poll(&store, &id).await;
    reviewers.shutdown().await;
}

/// An API replica and a worker process, each with its own queue client and
/// peers subscription on one Redis: the API's enqueue, announced, wakes the
/// other process's idle worker.
#[tokio::test]
async fn an_idle_worker_wakes_when_another_process_enqueues_not_at_its_next_poll() {
    let prefix = redis::prefix();
    let (api_queue, worker_queue) = (
        redis::queue_at(&prefix).await,
        redis::queue_at(&prefix).await,
    );
    let timeout = Duration::from_secs(5);
    let api_peers = RedisPeers::new(&redis::url(), &prefix, timeout).unwrap();
    let worker_peers = RedisPeers::new(&redis::url(), &prefix, timeout).unwrap();
    assert!(api_peers.subscribed(timeout).await && worker_peers.subscribed(timeout).await);
    let worker_queue = Arc::new(worker_queue);
    let relay = relay_enqueued(worker_queue.clone(), worker_peers.clone());
    let (store, reviewers, _dir) = acme_and_deaf_workers(worker_queue).await;

    let id = stored(&store).await;
    // The worker has had every local reason to look, and found nothing.
    tokio::time::sleep(Duration::from_millis(300)).await;
    // What the API replica's publisher does: enqueue, then announce.
    let (done, enqueued) = api_queue.enqueue_all(&[("acme", id.as_str())]).await;
    assert_eq!(done, 1);
    enqueued.unwrap();
    announce_enqueued(api_peers.as_ref()).await;
    decided_before_the_idle_poll(&store, &id).await;
    reviewers.shutdown().await;
    relay.abort();
}
