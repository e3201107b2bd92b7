//! What only the Redis queue does, or does its own way: fair rounds over
//! tenant streams, leases in the pending entries list, dead-letter streams,
//! consumer heartbeats and clean-up. Against the test Redis
//! (`countersign-test-support`).

mod support;

use std::{collections::HashMap, time::Duration};

use countersign_domain::{ErrorKind, ServiceError};
use countersign_queue::{Queue, RedisQueue, RedisQueueOptions};
use countersign_test_support::redis::{
    options as isolated_options, queue as redis_queue, queue_with,
};
use redis::AsyncCommands;
use support::{LONG, enqueue, fetch};
use tokio_util::sync::CancellationToken;

/// The PEL record of an entry: (consumer, times delivered).
async fn pending(queue: &RedisQueue, tenant: &str, id: &str) -> Option<(String, u32)> {
    let stream = format!("{}:q:{tenant}", queue.options().prefix);
    let rows: Vec<(String, String, u64, u32)> = redis::cmd("XPENDING")
        .arg(stream)
        .arg(&queue.options().group)
        .arg(id)
        .arg(id)
        .arg(1)
        .query_async(&mut redis_connection().await)
        .await
        .unwrap();
    rows.into_iter().next().map(|(_, c, _, n)| (c, n))
}

/// Tenant A enqueues 1,000, then tenant B 10. With two tenants a fetch of 16
/// takes at most ⌈16/2⌉ = 8 from each, so B's 10 are all in the first two
/// fetches (32 leases): B waits behind at most 22 of A's entries, whatever
/// A's backlog.
#[tokio::test]
async fn a_flooding_tenant_cannot_starve_one_that_enqueues_after_it() {
    let queue = redis_queue().await;
    for _ in 0..1_000 {
        enqueue(&queue, "flood").await;
    }
    for _ in 0..10 {
        enqueue(&queue, "trickle").await;
    }
    let mut per_fetch = Vec::new();
    for _ in 0..2 {
        let leases = fetch(&queue, "w", 16, LONG).await;
        assert_eq!(leases.len(), 16, "fetches stay full");
        per_fetch.push(leases.iter().filter(|l| l.tenant == "trickle").count());
        queue.ack_many(&leases).await.unwrap();
    }
    assert_eq!(per_fetch.iter().sum::<usize>(), 10, "{per_fetch:?}");
    assert!(per_fetch.iter().all(|&n| n <= 8), "{per_fetch:?}");
    let rest = fetch(&queue, "w", 16, LONG).await;
    assert!(rest.iter().all(|l| l.tenant == "flood"), "work-conserving");
    assert_eq!(rest.len(), 16);
}

/// The publisher's batch: one script call enqueues every pair, in order within
/// each tenant, skips a proposal queued already, and counts the batch.
#[tokio::test]
async fn enqueue_all_queues_a_batch_across_tenants_once_each_in_one_call() {
    let queue = redis_queue().await;
    let earlier = enqueue(&queue, "a").await;
    let keys = [
        ("a", "a-1"),
        ("b", "b-1"),
        ("a", "a-2"),
        ("a", earlier.as_str()),
        ("b", "b-2"),
        ("b", "b-1"),
    ];
    let (done, result) = queue.enqueue_all(&keys).await;
    result.unwrap();
    assert_eq!(done, keys.len());
    let mut depths: Vec<(String, u64)> = queue
        .depth_by_tenant()
        .await
        .unwrap()
        .into_iter()
        .map(|d| (d.tenant, d.depth))
        .collect();
    depths.sort();
    assert_eq!(depths, [("a".to_owned(), 3), ("b".to_owned(), 2)]);
    let leased: Vec<(String, String)> = fetch(&queue, "w", 10, LONG)
        .await
        .into_iter()
        .map(|l| (l.tenant, l.proposal_id))
        .collect();
    for (tenant, order) in [
        ("a", vec![earlier.as_str(), "a-1", "a-2"]),
        ("b", vec!["b-1", "b-2"]),
    ] {
        let got: Vec<&str> = leased
            .iter()
            .filter(|(t, _)| t == tenant)
            .map(|(_, id)| id.as_str())
            .collect();
        assert_eq!(got, order, "{tenant}: {leased:?}");
    }
    assert_eq!(queue.enqueue_all(&[]).await.0, 0);
}

#[tokio::test]
async fn fetches_of_one_rotate_through_the_tenants_with_work() {
    let queue = redis_queue().await;
    for tenant in ["a", "b", "c"] {
        for _ in 0..4 {
            enqueue(&queue, tenant).await;
        }
    }
    let mut turns = Vec::new();
    for _ in 0..9 {
        let lease = fetch(&queue, "w", 1, LONG).await;
        turns.push(lease[0].tenant.clone());
    }
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for window in turns.chunks(3) {
        let distinct: std::collections::HashSet<_> = window.iter().collect();
        assert_eq!(
            distinct.len(),
            3,
            "each round visits every tenant: {turns:?}"
        );
        for t in window {
            *counts.entry(t.as_str()).or_default() += 1;
        }
    }
    assert!(counts.values().all(|&n| n == 3), "{turns:?}");
}

#[tokio::test]
async fn a_lease_that_is_not_extended_goes_to_another_consumer_after_it_runs_out() {
    let queue = redis_queue().await;
    enqueue(&queue, "a").await;
    let first = fetch(&queue, "dead-worker", 1, Duration::from_millis(300)).await;
    assert_eq!(
        pending(&queue, "a", &first[0].entry_id).await,
        Some(("dead-worker".into(), 1))
    );
    assert!(
        fetch(&queue, "w2", 1, LONG).await.is_empty(),
        "not before it runs out"
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    // No reclaim in between: a fetch claims entries whose lease ran out.
    let second = fetch(&queue, "w2", 1, LONG).await;
    assert_eq!(second.len(), 1);
    assert_eq!(second[0].entry_id, first[0].entry_id);
    assert_eq!(second[0].attempts, 2);
    assert_eq!(
        pending(&queue, "a", &second[0].entry_id).await,
        Some(("w2".into(), 2))
    );
}

#[tokio::test]
async fn extend_keeps_the_entry_with_its_consumer_and_delivery_count() {
    let queue = redis_queue().await;
    enqueue(&queue, "a").await;
    let lease = fetch(&queue, "w1", 1, Duration::from_millis(300)).await;
    for _ in 0..3 {
        // Together the extensions outlive the first lease.
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert!(
            queue
                .extend(&lease[0], Duration::from_millis(300))
                .await
                .unwrap()
        );
        assert!(fetch(&queue, "w2", 1, LONG).await.is_empty());
    }
    assert_eq!(queue.reclaim_expired().await.unwrap(), 0);
    assert_eq!(
        pending(&queue, "a", &lease[0].entry_id).await,
        Some(("w1".into(), 1)),
        "extend does not count a delivery"
    );
}

#[tokio::test]
async fn a_stale_holder_cannot_ack_extend_release_or_dead_letter_the_new_holders_entry() {
    let queue = redis_queue().await;
    enqueue(&queue, "a").await;
    let stale = fetch(&queue, "w1", 1, Duration::from_millis(1)).await;
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(queue.reclaim_expired().await.unwrap(), 1);
    assert_eq!(
        pending(&queue, "a", &stale[0].entry_id).await.unwrap().1,
        1,
        "a reclaim parks the entry without counting a delivery"
    );
    let current = fetch(&queue, "w2", 1, LONG).await;
    queue.ack(&stale[0]).await.unwrap();
    queue.release(&stale[0], Duration::ZERO).await.unwrap();
    queue.dead_letter(&stale[0], "stale").await.unwrap();
    assert!(!queue.extend(&stale[0], LONG).await.unwrap());
    assert_eq!(queue.depth().await.unwrap(), 1);
    assert!(queue.dead_letters("a", 10).await.unwrap().is_empty());
    assert_eq!(
        pending(&queue, "a", &current[0].entry_id).await,
        Some(("w2".into(), 2))
    );
    queue.ack(&current[0]).await.unwrap();
    assert_eq!(queue.depth().await.unwrap(), 0);
}

/// The reviewer's poison path: each failed review releases the entry, the
/// delivery count grows, and past the limit the entry is dead-lettered.
#[tokio::test]
async fn an_entry_is_dead_lettered_after_its_deliveries_with_the_reason_kept() {
    let queue = redis_queue().await;
    let id = enqueue(&queue, "a").await;
    let other = enqueue(&queue, "b").await;
    let max_attempts = 3;
    let mut attempts = Vec::new();
    let mut others = Vec::new();
    loop {
        let leases = fetch(&queue, "w", 1, LONG).await;
        let (lease, other_leases): (Vec<_>, Vec<_>) =
            leases.into_iter().partition(|l| l.proposal_id == id);
        others.extend(other_leases);
        let Some(lease) = lease.into_iter().next() else {
            continue;
        };
        attempts.push(lease.attempts);
        if lease.attempts > max_attempts {
            queue
                .dead_letter(&lease, "3 review attempts did not complete")
                .await
                .unwrap();
            break;
        }
        queue.release(&lease, Duration::ZERO).await.unwrap();
    }
    assert_eq!(attempts, [1, 2, 3, 4]);
    let dead = queue.dead_letters("a", 10).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].proposal_id, id);
    assert_eq!(dead[0].reason, "3 review attempts did not complete");
    assert_eq!(dead[0].attempts, 4);
    assert_eq!(dead[0].consumer, "w");
    assert_eq!(others.len(), 1, "the other tenant's entry flowed meanwhile");
    assert_eq!(others[0].proposal_id, other);
    assert_eq!(queue.depth().await.unwrap(), 1);
    queue.ack(&others[0]).await.unwrap();
    assert_eq!(queue.depth().await.unwrap(), 0);
}

#[tokio::test]
async fn acked_and_dead_lettered_entries_leave_the_stream_and_the_pending_list() {
    let queue = redis_queue().await;
    enqueue(&queue, "a").await;
    enqueue(&queue, "a").await;
    let leases = fetch(&queue, "w", 2, LONG).await;
    queue.ack(&leases[0]).await.unwrap();
    queue.dead_letter(&leases[1], "poison").await.unwrap();
    let mut conn = redis_connection().await;
    let prefix = &queue.options().prefix;
    let len: u64 = redis::cmd("XLEN")
        .arg(format!("{prefix}:q:a"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(len, 0);
    assert_eq!(pending(&queue, "a", &leases[0].entry_id).await, None);
    assert_eq!(pending(&queue, "a", &leases[1].entry_id).await, None);
    let tenants: Vec<String> = conn
        .zrange(format!("{prefix}:tenants"), 0, -1)
        .await
        .unwrap();
    assert!(
        tenants.is_empty(),
        "a tenant without entries leaves the registry"
    );
}

#[tokio::test]
async fn consumers_are_forgotten_only_once_they_own_no_pending_entry() {
    let queue = queue_with(RedisQueueOptions {
        consumer_ttl: Duration::from_millis(100),
        ..isolated_options()
    })
    .await;
    enqueue(&queue, "a").await;
    let held = fetch(&queue, "busy", 1, LONG).await;
    assert!(fetch(&queue, "idle", 1, LONG).await.is_empty());
    let names = |consumers: Vec<countersign_queue::Consumer>| -> Vec<String> {
        consumers.into_iter().map(|c| c.name).collect()
    };
    assert_eq!(names(queue.consumers().await.unwrap()), ["busy", "idle"]);
    tokio::time::sleep(Duration::from_millis(150)).await;
    queue.reclaim_expired().await.unwrap();
    assert_eq!(names(queue.consumers().await.unwrap()), ["busy"]);
    let group_consumers = |queue: RedisQueue| async move {
        let info: Vec<HashMap<String, redis::Value>> = redis::cmd("XINFO")
            .arg("CONSUMERS")
            .arg(format!("{}:q:a", queue.options().prefix))
            .arg(&queue.options().group)
            .query_async(&mut redis_connection().await)
            .await
            .unwrap();
        info.len()
    };
    assert_eq!(
        group_consumers(queue.clone()).await,
        1,
        "busy still owns its entry"
    );
    queue.ack(&held[0]).await.unwrap();
    queue.reclaim_expired().await.unwrap();
    assert!(queue.consumers().await.unwrap().is_empty());
    assert_eq!(group_consumers(queue.clone()).await, 0);
}

#[tokio::test]
async fn a_pending_entry_whose_lease_record_was_lost_is_reclaimed_after_it_idles() {
    let queue = queue_with(RedisQueueOptions {
        orphan_after: Duration::from_millis(50),
        ..isolated_options()
    })
    .await;
    enqueue(&queue, "a").await;
    let lease = fetch(&queue, "w1", 1, LONG).await;
    let mut conn = redis_connection().await;
    let _: () = conn
        .del(format!("{}:leased:a", queue.options().prefix))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(queue.reclaim_expired().await.unwrap(), 1);
    let again = fetch(&queue, "w2", 1, LONG).await;
    assert_eq!(again[0].entry_id, lease[0].entry_id);
    assert_eq!(again[0].attempts, 2);
}

#[tokio::test]
async fn a_redis_that_does_not_answer_is_unavailable() {
    let error = RedisQueue::connect(
        "redis://127.0.0.1:1",
        RedisQueueOptions {
            response_timeout: Duration::from_millis(200),
            ..isolated_options()
        },
    )
    .await
    .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Unavailable);
}

/// `serve` waits for Redis in the background; cancelling the wait ends it,
/// though Redis never answered (here: a port nothing listens on).
#[tokio::test]
async fn the_wait_for_an_unreachable_redis_ends_when_its_token_is_cancelled() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let stop = CancellationToken::new();
    let waiting = tokio::spawn({
        let stop = stop.clone();
        async move {
            RedisQueue::connect_retrying(&format!("redis://{closed}"), isolated_options(), &stop)
                .await
        }
    });
    stop.cancel();
    let queue = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("the wait ends once cancelled")
        .unwrap();
    assert!(queue.is_none());
}

#[tokio::test]
async fn the_wait_for_redis_ends_with_the_queue_once_redis_answers() {
    let queue = RedisQueue::connect_retrying(
        &countersign_test_support::redis::url(),
        isolated_options(),
        &CancellationToken::new(),
    )
    .await
    .expect("connected");
    assert_eq!(queue.depth().await.unwrap(), 0);
}

#[tokio::test]
async fn no_worker_may_fetch_as_the_consumer_that_holds_parked_entries() {
    let queue = redis_queue().await;
    enqueue(&queue, "a").await;
    let error = queue.fetch("(parked)", 1, LONG).await.unwrap_err();
    assert!(error.to_string().contains("reserved"), "{error}");
    assert_eq!(fetch(&queue, "w", 1, LONG).await.len(), 1);
}

#[tokio::test]
async fn missing_names_the_proposals_without_an_entry_and_counts_dead_letters_as_present() {
    let queue = redis_queue().await;
    let queued = enqueue(&queue, "a").await;
    let acked = enqueue(&queue, "a").await;
    let dead = enqueue(&queue, "b").await;
    let leases = fetch(&queue, "w", 16, LONG).await;
    for lease in &leases {
        if lease.proposal_id == acked {
            queue.ack(lease).await.unwrap();
        } else if lease.proposal_id == dead {
            queue.dead_letter(lease, "poison").await.unwrap();
        }
    }
    let pairs = [
        ("a", queued.as_str()),
        ("a", acked.as_str()),
        ("b", dead.as_str()),
        ("b", "never-enqueued"),
        ("c", queued.as_str()),
    ];
    let missing = queue.missing(&pairs).await.unwrap();
    assert_eq!(
        missing,
        vec![
            ("a", acked.as_str()),
            ("b", "never-enqueued"),
            ("c", queued.as_str())
        ]
    );
    assert!(queue.missing(&[]).await.unwrap().is_empty());
}

/// A raw connection to the test Redis, to look at what the queue wrote.
async fn redis_connection() -> redis::aio::MultiplexedConnection {
    redis::Client::open(countersign_test_support::redis::url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}
