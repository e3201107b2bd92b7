//! One suite, run against both backends: the embedded queue (a real SQLite
//! database) and the Redis queue (the test Redis, `countersign-test-support`).
//! Each test is a function of the queue; `queue_suite!` instantiates it for
//! each backend.

mod support;

use std::{
    collections::HashSet,
    sync::{Arc, Mutex},
    time::Duration,
};

use countersign_queue::{DynQueue, Queue};
use support::{LONG, enqueue, fetch};

/// Short, yet longer than a stall of a loaded test machine between two calls.
const SHORT: Duration = Duration::from_millis(250);
/// Long enough for a SHORT lease to have run out.
const PAST_SHORT: Duration = Duration::from_millis(400);

pub async fn a_queued_proposal_is_leased_to_one_worker_until_acked(queue: DynQueue) {
    let id = enqueue(&*queue, "a").await;
    assert_eq!(queue.depth().await.unwrap(), 1);
    let leases = fetch(&*queue, "w1", 10, LONG).await;
    assert_eq!(leases.len(), 1);
    assert_eq!(leases[0].proposal_id, id);
    assert_eq!(leases[0].tenant, "a");
    assert_eq!(leases[0].attempts, 1);
    assert!(
        fetch(&*queue, "w2", 10, LONG).await.is_empty(),
        "a leased entry is not handed out twice"
    );
    queue.ack(&leases[0]).await.unwrap();
    assert_eq!(queue.depth().await.unwrap(), 0);
    assert!(fetch(&*queue, "w2", 10, LONG).await.is_empty());
}

pub async fn an_expired_lease_is_reclaimed_and_the_stale_holder_cannot_ack(queue: DynQueue) {
    enqueue(&*queue, "a").await;
    let first = fetch(&*queue, "dead-worker", 1, Duration::from_millis(1)).await;
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(queue.reclaim_expired().await.unwrap(), 1);
    let second = fetch(&*queue, "w2", 1, LONG).await;
    assert_eq!(second.len(), 1);
    assert_eq!(second[0].attempts, 2);
    queue.ack(&first[0]).await.unwrap();
    assert_eq!(
        queue.depth().await.unwrap(),
        1,
        "the stale ack must not remove the entry"
    );
    assert!(!queue.extend(&first[0], LONG).await.unwrap());
    assert!(queue.extend(&second[0], LONG).await.unwrap());
    queue.ack(&second[0]).await.unwrap();
    assert_eq!(queue.depth().await.unwrap(), 0);
}

pub async fn a_worker_that_fetches_its_own_expired_entry_again_voids_its_old_lease(
    queue: DynQueue,
) {
    enqueue(&*queue, "a").await;
    let old = fetch(&*queue, "w", 1, SHORT).await;
    tokio::time::sleep(PAST_SHORT).await;
    let new = fetch(&*queue, "w", 1, LONG).await;
    assert_eq!(new.len(), 1);
    assert_eq!(new[0].attempts, 2);
    queue.ack(&old[0]).await.unwrap();
    assert_eq!(
        queue.depth().await.unwrap(),
        1,
        "the old lease acked nothing"
    );
    queue.ack(&new[0]).await.unwrap();
    assert_eq!(queue.depth().await.unwrap(), 0);
}

pub async fn an_extended_lease_outlives_its_first_expiry(queue: DynQueue) {
    enqueue(&*queue, "a").await;
    let lease = fetch(&*queue, "w1", 1, SHORT).await;
    assert!(queue.extend(&lease[0], LONG).await.unwrap());
    tokio::time::sleep(PAST_SHORT).await;
    assert_eq!(queue.reclaim_expired().await.unwrap(), 0);
    assert!(fetch(&*queue, "w2", 1, LONG).await.is_empty());
    queue.ack(&lease[0]).await.unwrap();
    assert_eq!(queue.depth().await.unwrap(), 0);
}

pub async fn acking_one_entry_leaves_every_other_entry_queued(queue: DynQueue) {
    for tenant in ["a", "a", "a", "b"] {
        enqueue(&*queue, tenant).await;
    }
    let leases = fetch(&*queue, "w", 2, LONG).await;
    assert_eq!(leases.len(), 2);
    queue.ack(&leases[0]).await.unwrap();
    assert_eq!(queue.depth().await.unwrap(), 3);
    assert!(queue.extend(&leases[1], LONG).await.unwrap(), "still held");
    let rest = fetch(&*queue, "w", 10, LONG).await;
    assert_eq!(rest.len(), 2, "{rest:?}");
    assert!(rest.iter().all(|l| l.proposal_id != leases[0].proposal_id));
    queue
        .ack_many(&[leases[1].clone(), rest[0].clone()])
        .await
        .unwrap();
    assert_eq!(queue.depth().await.unwrap(), 1);
}

pub async fn a_released_entry_waits_out_its_delay(queue: DynQueue) {
    enqueue(&*queue, "a").await;
    let lease = fetch(&*queue, "w", 1, LONG).await;
    queue
        .release(&lease[0], Duration::from_secs(60))
        .await
        .unwrap();
    assert!(fetch(&*queue, "w", 1, LONG).await.is_empty());
    assert_eq!(queue.depth().await.unwrap(), 1);
}

pub async fn a_released_entry_comes_back_after_its_delay_with_its_attempts_counted(
    queue: DynQueue,
) {
    enqueue(&*queue, "a").await;
    let lease = fetch(&*queue, "w", 1, LONG).await;
    queue.release(&lease[0], SHORT).await.unwrap();
    assert!(fetch(&*queue, "w", 1, LONG).await.is_empty());
    tokio::time::sleep(PAST_SHORT).await;
    let again = fetch(&*queue, "w2", 1, LONG).await;
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].proposal_id, lease[0].proposal_id);
    assert_eq!(again[0].attempts, 2);
    queue.ack(&lease[0]).await.unwrap();
    assert_eq!(
        queue.depth().await.unwrap(),
        1,
        "the released lease is void"
    );
    queue.release(&again[0], Duration::ZERO).await.unwrap();
    let third = fetch(&*queue, "w3", 1, LONG).await;
    assert_eq!(
        third[0].attempts, 3,
        "released without delay: ready at once"
    );
}

pub async fn a_dead_lettered_entry_is_never_handed_out_again(queue: DynQueue) {
    let id = enqueue(&*queue, "a").await;
    let lease = fetch(&*queue, "w", 1, Duration::from_millis(1)).await;
    queue.dead_letter(&lease[0], "review failed").await.unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    queue.reclaim_expired().await.unwrap();
    assert!(
        fetch(&*queue, "w", 1, Duration::from_secs(1))
            .await
            .is_empty()
    );
    assert_eq!(queue.depth().await.unwrap(), 0);
    queue.enqueue("a", &id).await.unwrap();
    assert_eq!(queue.depth().await.unwrap(), 0, "nor enqueued again");
}

pub async fn tenants_take_turns_so_a_flood_cannot_starve_a_trickle(queue: DynQueue) {
    for _ in 0..20 {
        enqueue(&*queue, "noisy").await;
    }
    let quiet = enqueue(&*queue, "quiet").await;
    let leases = fetch(&*queue, "w", 2, LONG).await;
    assert!(leases.iter().any(|l| l.proposal_id == quiet), "{leases:?}");
}

pub async fn an_idle_tenants_fetch_takes_the_oldest_entry_of_each_tenant_nobody_is_reviewing(
    queue: DynQueue,
) {
    let ids = |leases: &[countersign_queue::Lease]| -> Vec<String> {
        leases.iter().map(|l| l.proposal_id.clone()).collect()
    };
    let first = enqueue(&*queue, "busy").await;
    let second = enqueue(&*queue, "busy").await;
    let held = fetch(&*queue, "shared", 1, LONG).await;
    assert_eq!(ids(&held), [first], "the oldest entry of the only tenant");
    let quiet = enqueue(&*queue, "quiet").await;
    let quiet_later = enqueue(&*queue, "quiet").await;

    let express = queue.fetch_idle_tenants("express", 10, LONG).await.unwrap();
    assert_eq!(
        ids(&express),
        [quiet],
        "a tenant under review is skipped, however much it has waiting; \
         an idle one gives its oldest entry only"
    );
    assert!(
        queue
            .fetch_idle_tenants("express", 10, LONG)
            .await
            .unwrap()
            .is_empty(),
        "both tenants are under review now"
    );
    let shared = fetch(&*queue, "shared", 10, LONG).await;
    let mut rest = ids(&shared);
    rest.sort();
    let mut expected = vec![second.clone(), quiet_later];
    expected.sort();
    assert_eq!(rest, expected, "the rest is the shared workers'");
    for lease in shared {
        queue.release(&lease, Duration::ZERO).await.unwrap();
    }

    queue.ack(&held[0]).await.unwrap();
    let short = queue
        .fetch_idle_tenants("express", 10, SHORT)
        .await
        .unwrap();
    assert_eq!(
        ids(&short),
        std::slice::from_ref(&second),
        "busy is idle once acked"
    );
    tokio::time::sleep(PAST_SHORT).await;
    let again = queue.fetch_idle_tenants("express", 10, LONG).await.unwrap();
    assert_eq!(
        ids(&again),
        [second],
        "a lease that ran out is nobody's review"
    );
    assert_eq!(again[0].attempts, 3, "shared, express, express");
}

pub async fn enqueue_is_idempotent_per_proposal(queue: DynQueue) {
    let id = enqueue(&*queue, "a").await;
    queue.enqueue("a", &id).await.unwrap();
    assert_eq!(queue.depth().await.unwrap(), 1);
    let lease = fetch(&*queue, "w", 10, LONG).await;
    assert_eq!(lease.len(), 1);
    queue.enqueue("a", &id).await.unwrap();
    assert_eq!(queue.depth().await.unwrap(), 1, "nor while leased");
}

pub async fn depth_counts_ready_leased_and_released_entries_until_they_go(queue: DynQueue) {
    for tenant in ["a", "a", "b", "c"] {
        enqueue(&*queue, tenant).await;
    }
    assert_eq!(queue.depth().await.unwrap(), 4);
    let leases = fetch(&*queue, "w", 3, LONG).await;
    assert_eq!(leases.len(), 3);
    queue.release(&leases[0], LONG).await.unwrap();
    assert_eq!(queue.depth().await.unwrap(), 4);
    queue.ack(&leases[1]).await.unwrap();
    queue.dead_letter(&leases[2], "poison").await.unwrap();
    assert_eq!(queue.depth().await.unwrap(), 2);
}

/// 4 workers × 500 entries, batches of 16, leases that never run out: every
/// entry is delivered exactly once, to one worker at a time.
pub async fn concurrent_workers_never_hold_the_same_entry(queue: DynQueue) {
    let mut all = HashSet::new();
    for i in 0..2_000 {
        all.insert(enqueue(&*queue, ["a", "b", "c"][i % 3]).await);
    }
    let delivered = Arc::new(Mutex::new(Vec::new()));
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let queue = queue.clone();
            let delivered = delivered.clone();
            tokio::spawn(async move {
                let worker = format!("w{w}");
                let mut idle = 0;
                while idle < 3 {
                    let leases = fetch(&*queue, &worker, 16, LONG).await;
                    if leases.is_empty() {
                        idle += 1;
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                    idle = 0;
                    delivered
                        .lock()
                        .unwrap()
                        .extend(leases.iter().map(|l| (l.proposal_id.clone(), l.attempts)));
                    queue.ack_many(&leases).await.unwrap();
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.unwrap();
    }
    let delivered = std::mem::take(&mut *delivered.lock().unwrap());
    assert_eq!(delivered.len(), 2_000, "every entry delivered once");
    let ids: HashSet<_> = delivered.iter().map(|(id, _)| id.clone()).collect();
    assert_eq!(ids, all, "no entry twice, none missing");
    assert!(delivered.iter().all(|(_, attempts)| *attempts == 1));
    assert_eq!(queue.depth().await.unwrap(), 0);
}

pub async fn depth_by_tenant_counts_each_tenants_entries_and_the_age_of_its_oldest(
    queue: DynQueue,
) {
    enqueue(&*queue, "a").await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    enqueue(&*queue, "a").await;
    enqueue(&*queue, "b").await;
    let mut depths = queue.depth_by_tenant().await.unwrap();
    depths.sort_by(|x, y| x.tenant.cmp(&y.tenant));
    let counts: Vec<_> = depths
        .iter()
        .map(|d| (d.tenant.as_str(), d.depth))
        .collect();
    assert_eq!(counts, [("a", 2), ("b", 1)]);
    assert!(
        depths[0].oldest_age >= Duration::from_millis(50),
        "tenant a's oldest entry waited at least 50 ms: {depths:?}"
    );
    assert!(depths[0].oldest_age > depths[1].oldest_age, "{depths:?}");

    // Leased entries still count; acked ones go, and a tenant with none is absent.
    let leases = fetch(&*queue, "w", 10, LONG).await;
    assert_eq!(leases.len(), 3);
    let b: Vec<_> = leases.iter().filter(|l| l.tenant == "b").cloned().collect();
    queue.ack_many(&b).await.unwrap();
    let depths = queue.depth_by_tenant().await.unwrap();
    assert_eq!(depths.len(), 1, "{depths:?}");
    assert_eq!((depths[0].tenant.as_str(), depths[0].depth), ("a", 2));
}

/// The queue on each backend, and what keeps it alive for a test.
mod backends {
    use std::sync::Arc;

    use countersign_queue::DynQueue;
    use countersign_store::EmbeddedQueue;

    pub async fn redis() -> (DynQueue, Option<tempfile::TempDir>) {
        (
            Arc::new(countersign_test_support::redis::queue().await),
            None,
        )
    }

    pub async fn embedded() -> (DynQueue, Option<tempfile::TempDir>) {
        let (store, dir) = countersign_test_support::sqlite::store().await;
        (Arc::new(EmbeddedQueue::new(store.writer())), Some(dir))
    }
}

macro_rules! queue_suite {
    ($backend:ident; $($test:ident),+ $(,)?) => {
        mod $backend {
            $(
                #[tokio::test]
                async fn $test() {
                    let (queue, _guard) = crate::backends::$backend().await;
                    super::$test(queue).await;
                }
            )+
        }
    };
}

macro_rules! both_backends {
    ($($test:ident),+ $(,)?) => {
        queue_suite!(embedded; $($test),+);
        queue_suite!(redis; $($test),+);
    };
}

both_backends!(
    a_queued_proposal_is_leased_to_one_worker_until_acked,
    an_expired_lease_is_reclaimed_and_the_stale_holder_cannot_ack,
    a_worker_that_fetches_its_own_expired_entry_again_voids_its_old_lease,
    an_extended_lease_outlives_its_first_expiry,
    acking_one_entry_leaves_every_other_entry_queued,
    a_released_entry_waits_out_its_delay,
    a_released_entry_comes_back_after_its_delay_with_its_attempts_counted,
    a_dead_lettered_entry_is_never_handed_out_again,
    tenants_take_turns_so_a_flood_cannot_starve_a_trickle,
    an_idle_tenants_fetch_takes_the_oldest_entry_of_each_tenant_nobody_is_reviewing,
    enqueue_is_idempotent_per_proposal,
    depth_counts_ready_leased_and_released_entries_until_they_go,
    concurrent_workers_never_hold_the_same_entry,
    depth_by_tenant_counts_each_tenants_entries_and_the_age_of_its_oldest,
);

/// The embedded queue is written by the store itself, in the submit transaction.
#[tokio::test]
async fn a_proposal_submitted_to_the_embedded_store_is_already_queued() {
    use countersign_store::EmbeddedQueue;
    use countersign_store::{NewProposal, Proposals, Tenants};

    let (store, _dir) = countersign_test_support::sqlite::store().await;
    let queue = EmbeddedQueue::new(store.writer());
    store.create_tenant("a").await.unwrap();
    let spec = countersign_test_support::fixtures::spec();
    let outcome = store
        .insert_proposal(NewProposal {
            id: NewProposal::new_id(),
            tenant: "a".into(),
            spec,
            submitted_by: "t".into(),
            submitted_by_person: None,
            trace_parent: None,
            submitted_key: None,
        })
        .await
        .unwrap();
    assert_eq!(queue.depth().await.unwrap(), 1);
    let leases = fetch(&queue, "w", 10, LONG).await;
    assert_eq!(leases[0].proposal_id, outcome.proposal().id);
}
