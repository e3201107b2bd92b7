//! The express lane, on both queue backends (the embedded queue and a real
//! Redis from COUNTERSIGN_TEST_REDIS_URL): while every shared worker is stuck
//! on one tenant's batch, another tenant's proposal is decided by an express
//! worker, which leaves the busy tenant's waiting entries alone.

use std::{
    sync::{Arc, Condvar, Mutex},
    time::Duration,
};

use countersign_domain::{
    Proposal, ProposalState,
    gates::{self, ReviewFacts, Verdict},
};
use countersign_queue::{DynQueue, Queue, RedisQueue};
use countersign_reviewer::{ReviewerConfig, Reviewers};
use countersign_store::{DynStore, EmbeddedQueue, NewProposal};
use countersign_test_support::{fixtures::spec_on, redis};
use tokio_util::sync::CancellationToken;

/// Closed until opened: the evaluator waits on it for the busy tenant.
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    opened: Condvar,
}

impl Gate {
    fn wait(&self) {
        let mut open = self.open.lock().unwrap();
        while !*open {
            open = self.opened.wait(open).unwrap();
        }
    }

    fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.opened.notify_all();
    }
}

/// Opens the gate when dropped, so that a failing test does not leave
/// evaluators blocked on runtime threads (its runtime would never shut down).
struct OpenOnDrop(Arc<Gate>);

impl Drop for OpenOnDrop {
    fn drop(&mut self) {
        self.0.open();
    }
}

/// A SQLite store with tenants `busy` and `quiet`, and its embedded queue.
async fn store() -> (DynStore, EmbeddedQueue, tempfile::TempDir) {
    let (sqlite, dir) = countersign_test_support::sqlite::store().await;
    let embedded = EmbeddedQueue::new(sqlite.writer());
    let store: DynStore = Arc::new(sqlite);
    for tenant in ["busy", "quiet"] {
        store.create_tenant(tenant).await.unwrap();
    }
    (store, embedded, dir)
}

/// Stores a proposal; on the Redis queue also publishes it, as the api does
/// (the embedded store queues it in the submit transaction).
async fn submit(store: &DynStore, redis: Option<&RedisQueue>, tenant: &str, n: usize) -> String {
    let outcome = store
        .insert_proposal(NewProposal {
            id: NewProposal::new_id(),
            tenant: tenant.into(),
            spec: spec_on(&format!("{tenant}-{n:02}")),
            submitted_by: "tester".into(),
            submitted_by_person: None,
            trace_parent: None,
            submitted_key: None,
        })
        .await
        .unwrap();
    let id = outcome.proposal().id.clone();
    if let Some(redis) = redis {
        redis.enqueue(tenant, &id).await.unwrap();
    }
    id
}

fn config(name: &str, workers: usize, express_workers: usize, gate: &Arc<Gate>) -> ReviewerConfig {
    let mut config = ReviewerConfig::with_workers(workers);
    config.name = name.into();
    config.express_workers = express_workers;
    config.batch = 2;
    config.idle_poll = Duration::from_millis(20);
    let gate = gate.clone();
    config.evaluator = Arc::new(move |facts: &ReviewFacts| -> Verdict {
        if facts.spec.target.starts_with("busy") {
            gate.wait();
        }
        gates::evaluate(facts)
    });
    config
}

async fn proposal(store: &DynStore, tenant: &str, id: &str) -> Proposal {
    store.get_proposal(tenant, id).await.unwrap().unwrap()
}

/// Polls until `done` holds for the proposal (at most 20 s).
async fn until(store: &DynStore, tenant: &str, id: &str, done: impl Fn(&Proposal) -> bool) {
    tokio::time::timeout(Duration::from_secs(20), async {
        while !done(&proposal(store, tenant, id).await) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{tenant}/{id} did not get there"));
}

async fn a_quiet_tenant_is_decided_while_the_shared_workers_are_stuck_on_a_busy_one(
    store: DynStore,
    queue: DynQueue,
    redis: Option<&RedisQueue>,
) {
    let gate = Arc::new(Gate::default());
    let _opened_at_the_end = OpenOnDrop(gate.clone());
    let mut busy = Vec::new();
    for n in 0..4 {
        busy.push(submit(&store, redis, "busy", n).await);
    }
    // The only shared worker leases a batch of two of busy's and is stuck on it.
    let shared = Reviewers::start(
        store.clone(),
        queue.clone(),
        config("shared", 1, 0, &gate),
        &CancellationToken::new(),
    );
    until(&store, "busy", &busy[0], |p| {
        p.state == ProposalState::Reviewing
    })
    .await;

    let express = Reviewers::start(
        store.clone(),
        queue.clone(),
        config("lane", 0, 1, &gate),
        &CancellationToken::new(),
    );
    let quiet = submit(&store, redis, "quiet", 0).await;
    until(&store, "quiet", &quiet, |p| p.state.is_terminal()).await;
    let decision = proposal(&store, "quiet", &quiet).await.decision.unwrap();
    assert_eq!(decision.reviewer, "lane/express/0");
    for id in &busy[2..] {
        assert!(
            proposal(&store, "busy", id).await.state == ProposalState::Pending,
            "the express worker left the tenant under review alone"
        );
    }

    gate.open();
    for id in &busy {
        until(&store, "busy", id, |p| p.state.is_terminal()).await;
    }
    shared.shutdown().await;
    express.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn embedded_a_quiet_tenant_is_decided_while_the_shared_workers_are_stuck_on_a_busy_one() {
    let (store, embedded, _dir) = store().await;
    a_quiet_tenant_is_decided_while_the_shared_workers_are_stuck_on_a_busy_one(
        store,
        Arc::new(embedded),
        None,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_a_quiet_tenant_is_decided_while_the_shared_workers_are_stuck_on_a_busy_one() {
    let (store, _embedded, _dir) = store().await;
    let redis = redis::queue().await;
    a_quiet_tenant_is_decided_while_the_shared_workers_are_stuck_on_a_busy_one(
        store,
        Arc::new(redis.clone()),
        Some(&redis),
    )
    .await;
}
