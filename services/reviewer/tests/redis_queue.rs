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
    BlastRadius, OperationClass, ProposalSpec, ProposalState,
    gates::{self, ReviewFacts, Verdict},
};
use countersign_queue::{Queue, RedisQueue, RedisQueueOptions};
use countersign_reviewer::{ReviewerConfig, Reviewers};
use countersign_store::{DynStore, NewProposal, SqliteStore, Store};

const REDIS_URL_VAR: &str = "COUNTERSIGN_TEST_REDIS_URL";

async fn redis_queue() -> RedisQueue {
    let url = std::env::var(REDIS_URL_VAR).unwrap_or_else(|_| {
        panic!(
            "{REDIS_URL_VAR} is not set: these tests need a real redis-server. \
             Start one with `eval \"$(tests/services/redis.sh)\"` (tests/run does this)."
        )
    });
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let options = RedisQueueOptions {
        prefix: format!("countersign-test:reviewer-{}-{nanos}", std::process::id()),
        ..RedisQueueOptions::default()
    };
    RedisQueue::connect(&url, options)
        .await
        .unwrap_or_else(|error| panic!("Redis at {url} ({REDIS_URL_VAR}) does not answer: {error}"))
}

fn spec(target: &str) -> ProposalSpec {
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

/// Stores a proposal and publishes it to the Redis queue, as the api will.
async fn submit(store: &DynStore, queue: &RedisQueue, target: &str) -> String {
    let outcome = store
        .insert_proposal(NewProposal {
            tenant: "acme".into(),
            spec: spec(target),
            submitted_by: "tester".into(),
            trace_parent: None,
        })
        .await
        .unwrap();
    let id = outcome.proposal().id.clone();
    queue.enqueue("acme", &id).await.unwrap();
    id
}

#[tokio::test]
async fn workers_decide_every_redis_entry_once_and_dead_letter_a_poison_one() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("r.db").display());
    let sqlite = SqliteStore::connect(&url).await.unwrap();
    sqlite.migrate().await.unwrap();
    let store: DynStore = Arc::new(sqlite);
    store.create_tenant("acme").await.unwrap();
    let queue = redis_queue().await;

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
    let reviewers = Reviewers::start(store.clone(), Arc::new(queue.clone()), config);

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

#[tokio::test]
async fn an_idle_worker_wakes_when_this_process_enqueues_not_at_its_next_poll() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("w.db").display());
    let sqlite = SqliteStore::connect(&url).await.unwrap();
    sqlite.migrate().await.unwrap();
    let store: DynStore = Arc::new(sqlite);
    store.create_tenant("acme").await.unwrap();
    let queue = redis_queue().await;
    let mut config = ReviewerConfig::with_workers(1);
    // Far longer than the test may take: only the enqueue can wake it.
    config.idle_poll = Duration::from_secs(3_600);
    let reviewers = Reviewers::start(store.clone(), Arc::new(queue.clone()), config);
    tokio::time::sleep(Duration::from_millis(300)).await;

    // The submission's own event wakes the worker before the entry is in
    // Redis (as when the publisher has not published yet); it finds nothing
    // and waits again. The enqueue must wake it.
    let id = store
        .insert_proposal(NewProposal {
            tenant: "acme".into(),
            spec: spec("node-01"),
            submitted_by: "tester".into(),
            trace_parent: None,
        })
        .await
        .unwrap()
        .proposal()
        .id
        .clone();
    tokio::time::sleep(Duration::from_millis(300)).await;
    queue.enqueue("acme", &id).await.unwrap();
    let decided = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let p = store.get_proposal("acme", &id).await.unwrap().unwrap();
            if p.state.is_terminal() {
                return p;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("decided without waiting for the hour-long idle poll");
    reviewers.shutdown().await;
    assert!(decided.decision.is_some());
}
