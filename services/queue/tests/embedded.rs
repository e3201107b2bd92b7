//! The embedded queue against a real SQLite database (through the real store,
//! which writes queue entries with their proposals).

use std::{sync::Arc, time::Duration};

use countersign_domain::{BlastRadius, OperationClass, ProposalSpec};
use countersign_queue::{EmbeddedQueue, Queue};
use countersign_store::{DynStore, NewProposal, SqliteStore, Store};

async fn setup() -> (DynStore, EmbeddedQueue, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("q.db").display());
    let store = SqliteStore::connect(&url).await.unwrap();
    store.migrate().await.unwrap();
    let queue = EmbeddedQueue::new(store.writer_pool());
    (Arc::new(store), queue, dir)
}

async fn submit(store: &DynStore, tenant: &str) -> String {
    if store.get_tenant(tenant).await.unwrap().is_none() {
        store.create_tenant(tenant).await.unwrap();
    }
    let spec = ProposalSpec {
        action: "restart".into(),
        class: OperationClass::Write,
        target: "node-01".into(),
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
    };
    store
        .insert_proposal(NewProposal {
            tenant: tenant.into(),
            spec,
            submitted_by: "t".into(),
        })
        .await
        .unwrap()
        .proposal()
        .id
        .clone()
}

#[tokio::test]
async fn a_submitted_proposal_is_already_queued() {
    let (store, queue, _dir) = setup().await;
    let id = submit(&store, "a").await;
    assert_eq!(queue.depth().await.unwrap(), 1);
    let leases = queue
        .fetch("w1", 10, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(leases.len(), 1);
    assert_eq!(leases[0].proposal_id, id);
    assert_eq!(leases[0].attempts, 1);
    // Leased entries are not handed out twice.
    assert!(
        queue
            .fetch("w2", 10, Duration::from_secs(30))
            .await
            .unwrap()
            .is_empty()
    );
    queue.ack(&leases[0]).await.unwrap();
    assert_eq!(queue.depth().await.unwrap(), 0);
}

#[tokio::test]
async fn an_expired_lease_is_reclaimed_and_the_stale_holder_cannot_ack() {
    let (store, queue, _dir) = setup().await;
    submit(&store, "a").await;
    let first = queue
        .fetch("dead-worker", 1, Duration::from_millis(1))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(queue.reclaim_expired().await.unwrap(), 1);
    let second = queue.fetch("w2", 1, Duration::from_secs(30)).await.unwrap();
    assert_eq!(second.len(), 1);
    assert_eq!(second[0].attempts, 2);
    queue.ack(&first[0]).await.unwrap();
    assert_eq!(
        queue.depth().await.unwrap(),
        1,
        "the stale ack must not remove the entry"
    );
    assert!(
        !queue
            .extend(&first[0], Duration::from_secs(5))
            .await
            .unwrap()
    );
    assert!(
        queue
            .extend(&second[0], Duration::from_secs(5))
            .await
            .unwrap()
    );
    queue.ack(&second[0]).await.unwrap();
    assert_eq!(queue.depth().await.unwrap(), 0);
}

#[tokio::test]
async fn a_released_entry_waits_out_its_delay() {
    let (store, queue, _dir) = setup().await;
    submit(&store, "a").await;
    let lease = queue.fetch("w", 1, Duration::from_secs(30)).await.unwrap();
    queue
        .release(&lease[0], Duration::from_secs(60))
        .await
        .unwrap();
    assert!(
        queue
            .fetch("w", 1, Duration::from_secs(30))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(queue.depth().await.unwrap(), 1);
}

#[tokio::test]
async fn a_dead_lettered_entry_is_never_handed_out_again() {
    let (store, queue, _dir) = setup().await;
    submit(&store, "a").await;
    let lease = queue.fetch("w", 1, Duration::from_millis(1)).await.unwrap();
    queue.dead_letter(&lease[0], "review failed").await.unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    queue.reclaim_expired().await.unwrap();
    assert!(
        queue
            .fetch("w", 1, Duration::from_secs(1))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(queue.depth().await.unwrap(), 0);
}

#[tokio::test]
async fn tenants_take_turns_so_a_flood_cannot_starve_a_trickle() {
    let (store, queue, _dir) = setup().await;
    for _ in 0..20 {
        submit(&store, "noisy").await;
    }
    let quiet = submit(&store, "quiet").await;
    let leases = queue.fetch("w", 2, Duration::from_secs(30)).await.unwrap();
    assert!(leases.iter().any(|l| l.proposal_id == quiet), "{leases:?}");
}

#[tokio::test]
async fn enqueue_is_idempotent_per_proposal() {
    let (store, queue, _dir) = setup().await;
    let id = submit(&store, "a").await;
    queue.enqueue("a", &id).await.unwrap();
    assert_eq!(queue.depth().await.unwrap(), 1);
}
