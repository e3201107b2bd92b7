//! PostgreSQL only: event cursors (log positions, and each tenant's own
//! cursors) are handed out in commit order, so a reader following the log or
//! one tenant's part of it never skips an event that commits late.

use std::time::Duration;

use countersign_domain::{BlastRadius, EventKind, OperationClass, ProposalSpec};
use countersign_store::{DynStore, NewProposal, ReviewKey, StoreError};
use countersign_test_support::postgres::TestDatabase;
use sqlx::Connection;

fn new_proposal(tenant: &str) -> NewProposal {
    NewProposal {
        id: NewProposal::new_id(),
        tenant: tenant.into(),
        spec: ProposalSpec {
            action: "host_restart_service".into(),
            class: OperationClass::Write,
            target: "node-01".into(),
            parameters: Default::default(),
            reason: "r".into(),
            blast_radius: BlastRadius::SingleDevice,
            operator: "o".into(),
            context_summary: String::new(),
            incident_id: String::new(),
            labels: Default::default(),
            rollback_plan: String::new(),
            force_approve_no_sop: false,
            idempotency_key: String::new(),
        },
        submitted_by: "tester".into(),
        submitted_by_person: None,
        trace_parent: None,
        submitted_key: None,
    }
}

/// A transaction of the service role in tenant `a`'s scope, left open.
async fn in_tenant_a(conn: &mut sqlx::PgConnection) -> sqlx::Transaction<'_, sqlx::Postgres> {
    let mut tx = conn.begin().await.unwrap();
    sqlx::query("SELECT set_config('app.tenant_id', 'a', true)")
        .execute(&mut *tx)
        .await
        .unwrap();
    tx
}

/// Tenants `a` and `b`, and one proposal of `a`.
async fn tenants_a_and_b_with_a_proposal_of_a(
    db: &TestDatabase,
) -> (DynStore, countersign_domain::Proposal) {
    let store = db.store().await;
    store.create_tenant("a").await.unwrap();
    store.create_tenant("b").await.unwrap();
    let earlier = store
        .insert_proposal(new_proposal("a"))
        .await
        .unwrap()
        .proposal()
        .clone();
    (store, earlier)
}

/// Whether another connection could take the event log's lock now.
async fn event_log_is_free(other: &mut sqlx::PgConnection) -> bool {
    let mut tx = other.begin().await.unwrap();
    let free: bool = sqlx::query_scalar("SELECT pg_try_advisory_xact_lock(7310291346331861)")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    free
}

/// What the transaction's own setting says of the lock (0028).
async fn held_by_its_setting(tx: &mut sqlx::PgConnection) -> bool {
    let held: Option<String> =
        sqlx::query_scalar("SELECT current_setting('countersign.event_log_held', true)")
            .fetch_one(tx)
            .await
            .unwrap();
    held.as_deref() == Some("on")
}

#[tokio::test]
async fn the_event_logs_lock_and_the_setting_that_says_it_is_held_come_and_go_together() {
    let db = TestDatabase::migrated().await;
    let (_store, earlier) = tenants_a_and_b_with_a_proposal_of_a(&db).await;
    let mut other = db.app_connection().await;
    let mut conn = db.app_connection().await;
    let mut tx = in_tenant_a(&mut conn).await;
    let append = "INSERT INTO events (tenant, proposal_id, kind, state, created_at)
                  VALUES ('a', $1, 'SUPPRESSED', 'pending', 1) RETURNING tenant_cursor";
    assert!(!held_by_its_setting(&mut tx).await);

    // A savepoint takes both with its first event, and its rollback gives
    // both back: no later event of the transaction trusts a lock it lost.
    sqlx::query("SAVEPOINT first")
        .execute(&mut *tx)
        .await
        .unwrap();
    let rolled_back: i64 = sqlx::query_scalar(append)
        .bind(&earlier.id)
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    assert!(held_by_its_setting(&mut tx).await);
    assert!(!event_log_is_free(&mut other).await);
    sqlx::query("ROLLBACK TO SAVEPOINT first")
        .execute(&mut *tx)
        .await
        .unwrap();
    assert!(!held_by_its_setting(&mut tx).await);
    assert!(event_log_is_free(&mut other).await);

    // The next event takes the lock again, and the tenant's cursor it
    // takes is the one the rolled-back event had.
    let appended: i64 = sqlx::query_scalar(append)
        .bind(&earlier.id)
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    assert_eq!(appended, rolled_back);
    assert!(held_by_its_setting(&mut tx).await);
    assert!(!event_log_is_free(&mut other).await);
    // A second event reads the setting; the lock stays held to the commit.
    let next: i64 = sqlx::query_scalar(append)
        .bind(&earlier.id)
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    assert_eq!(next, appended + 1);
    tx.commit().await.unwrap();
    assert!(event_log_is_free(&mut other).await);
    assert!(
        !held_by_its_setting(&mut conn).await,
        "the setting ends with its transaction"
    );
}

#[tokio::test]
async fn a_transaction_holding_an_uncommitted_event_delays_the_next_cursor_until_it_commits() {
    let db = TestDatabase::migrated().await;
    let (store, earlier) = tenants_a_and_b_with_a_proposal_of_a(&db).await;
    // Tenant a's transaction appends an event and stays open.
    let mut conn = db.app_connection().await;
    let mut slow = in_tenant_a(&mut conn).await;
    let (slow_position, slow_cursor): (i64, i64) = sqlx::query_as(
        "INSERT INTO events (tenant, proposal_id, kind, state, created_at)
         VALUES ('a', $1, 'SUPPRESSED', 'pending', 1) RETURNING cursor, tenant_cursor",
    )
    .bind(&earlier.id)
    .fetch_one(&mut *slow)
    .await
    .unwrap();

    // Tenant b's submission waits for it instead of taking a later cursor and
    // committing first.
    let fast = {
        let store = store.clone();
        tokio::spawn(async move { store.insert_proposal(new_proposal("b")).await.unwrap() })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !fast.is_finished(),
        "the second writer waits for the first to commit"
    );
    assert_eq!(store.events_after(0, None, 100).await.unwrap().len(), 1);

    slow.commit().await.unwrap();
    let fast = tokio::time::timeout(Duration::from_secs(10), fast)
        .await
        .expect("the second writer proceeds once the first commits")
        .unwrap();
    let events = store.events_after(0, None, 100).await.unwrap();
    let positions: Vec<(String, u64, u64)> = events
        .iter()
        .map(|e| (e.proposal.id.clone(), e.position, e.cursor))
        .collect();
    assert_eq!(positions.len(), 3);
    assert_eq!(
        positions[1],
        (earlier.id.clone(), slow_position as u64, 2),
        "a's second event, its tenant cursor drawn under the lock"
    );
    assert_eq!(slow_cursor, 2);
    assert_eq!(
        (positions[2].0.as_str(), positions[2].2),
        (fast.proposal().id.as_str(), 1),
        "b's first event: a's count none of it"
    );
    assert!(positions[0].1 < positions[1].1 && positions[1].1 < positions[2].1);
}

async fn write(store: DynStore, tenant: String, n: usize) {
    for _ in 0..n {
        let p = store
            .insert_proposal(new_proposal(&tenant))
            .await
            .unwrap()
            .proposal()
            .clone();
        store
            .begin_reviews(&[countersign_store::ReviewKey {
                tenant: String::from(&tenant),
                id: String::from(&p.id),
            }])
            .await
            .unwrap();
        store
            .cancel_proposal(&tenant, &p.id, "done", None)
            .await
            .unwrap();
    }
}

/// Appends events with raw SQL (only the table's trigger orders them), each
/// transaction pausing a few random milliseconds between taking its cursor
/// and committing: without commit-ordered cursors a follower skips some.
async fn append_slowly(url: String, tenant: String, proposal: String, n: usize) {
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    for _ in 0..n {
        let mut tx = conn.begin().await.unwrap();
        sqlx::query("SELECT set_config('app.tenant_id', $1, true)")
            .bind(&tenant)
            .execute(&mut *tx)
            .await
            .unwrap();
        sqlx::query(
            "INSERT INTO events (tenant, proposal_id, kind, state, created_at)
             VALUES ($1, $2, 'SUPPRESSED', 'pending', 1)",
        )
        .bind(&tenant)
        .bind(&proposal)
        .execute(&mut *tx)
        .await
        .unwrap();
        sqlx::query("SELECT pg_sleep(random() * 0.004)")
            .execute(&mut *tx)
            .await
            .unwrap();
        tx.commit().await.unwrap();
    }
}

/// Where one follower is: the whole log (`None`, by position) or one tenant's
/// part of it (by that tenant's cursor), and the events it has read.
struct Follower {
    tenant: Option<&'static str>,
    last: u64,
    seen: Vec<u64>,
}

impl Follower {
    fn new(tenant: Option<&'static str>) -> Follower {
        Follower {
            tenant,
            last: 0,
            seen: Vec::new(),
        }
    }

    /// Reads every event after the last one it read; true if there were any.
    async fn read(&mut self, store: &DynStore) -> bool {
        let page = store.events_after(self.last, self.tenant, 7).await.unwrap();
        for event in &page {
            let at = match self.tenant {
                None => event.position,
                Some(tenant) => {
                    assert_eq!(event.tenant(), tenant);
                    event.cursor
                }
            };
            assert!(at > self.last);
            self.last = at;
            self.seen.push(at);
        }
        !page.is_empty()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reader_following_the_log_never_skips_an_event_under_concurrent_writers() {
    let db = TestDatabase::migrated().await;
    // More connections than the writers, so they really commit concurrently.
    let store: DynStore = std::sync::Arc::new(
        countersign_store::PostgresStore::connect_with(&db.app_url, 8)
            .await
            .unwrap(),
    );
    const WRITERS: usize = 4;
    const APPENDERS: usize = 4;
    const EACH: usize = 15;
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let tenant = format!("t{w}");
        store.create_tenant(&tenant).await.unwrap();
        writers.push(tokio::spawn(write(store.clone(), tenant, EACH)));
    }
    // Two appenders per tenant: a tenant's own cursors are drawn by
    // concurrent transactions too.
    const RAW: [&str; 2] = ["raw0", "raw1"];
    for tenant in RAW {
        store.create_tenant(tenant).await.unwrap();
    }
    for a in 0..APPENDERS {
        let tenant = RAW[a % RAW.len()].to_owned();
        let p = store.insert_proposal(new_proposal(&tenant)).await.unwrap();
        let id = p.proposal().id.clone();
        writers.push(tokio::spawn(append_slowly(
            db.app_url.clone(),
            tenant,
            id,
            EACH,
        )));
    }
    // The watchers: every event after the last one each saw, over and over;
    // one follows the whole log, one each of the appenders' tenants.
    let mut followers: Vec<Follower> = [None, Some(RAW[0]), Some(RAW[1])]
        .into_iter()
        .map(Follower::new)
        .collect();
    let expected = WRITERS * EACH * 3 + APPENDERS * (1 + EACH);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        assert!(tokio::time::Instant::now() < deadline, "writers stalled");
        let finished = writers.iter().all(|w| w.is_finished());
        let mut read = false;
        for follower in &mut followers {
            read |= follower.read(&store).await;
        }
        if finished && !read {
            break;
        }
        tokio::task::yield_now().await;
    }
    for writer in writers {
        writer.await.unwrap();
    }
    let everything = store.events_after(0, None, 10_000).await.unwrap();
    let positions: Vec<u64> = everything.iter().map(|e| e.position).collect();
    assert_eq!(positions.len(), expected);
    assert_eq!(
        followers[0].seen, positions,
        "the follower read every event, in order"
    );
    let horizon = store.event_horizon(None).await.unwrap();
    assert_eq!(horizon.latest, *positions.last().unwrap());
    // Each tenant's cursors, taken in the log's (commit) order, are 1, 2, 3…
    let tenants: std::collections::BTreeSet<&str> = everything.iter().map(|e| e.tenant()).collect();
    for tenant in tenants {
        let cursors: Vec<u64> = everything
            .iter()
            .filter(|e| e.tenant() == tenant)
            .map(|e| e.cursor)
            .collect();
        let n = cursors.len() as u64;
        assert_eq!(cursors, (1..=n).collect::<Vec<_>>(), "{tenant}");
        let horizon = store.event_horizon(Some(tenant)).await.unwrap();
        assert_eq!(horizon.latest, n, "{tenant}");
    }
    for follower in &followers[1..] {
        let n = (APPENDERS / RAW.len() * (1 + EACH)) as u64;
        assert_eq!(
            follower.seen,
            (1..=n).collect::<Vec<_>>(),
            "{:?}: the tenant's follower read every event of it, in order",
            follower.tenant
        );
    }
}

/// A state change's event is written when its transaction commits, so the
/// event log's lock is held through the commit alone: another writer is not
/// held up by a transaction that is still working, and the late event takes
/// a cursor after those that committed first.
#[tokio::test]
async fn a_state_change_in_an_open_transaction_holds_up_no_other_writer() {
    let db = TestDatabase::migrated().await;
    let (store, earlier) = tenants_a_and_b_with_a_proposal_of_a(&db).await;
    // Tenant a's transaction changes a proposal's state and stays open.
    let mut conn = db.app_connection().await;
    let mut slow = in_tenant_a(&mut conn).await;
    let changed = sqlx::query(
        "UPDATE proposals SET state = 'cancelled', updated_at = 2 WHERE tenant = 'a' AND id = $1",
    )
    .bind(&earlier.id)
    .execute(&mut *slow)
    .await
    .unwrap();
    assert_eq!(changed.rows_affected(), 1);

    // Tenant b's submission commits meanwhile.
    let fast = tokio::time::timeout(
        Duration::from_secs(5),
        store.insert_proposal(new_proposal("b")),
    )
    .await
    .expect("a submission is not held up by another transaction's open state change")
    .unwrap();
    assert_eq!(store.events_after(0, None, 100).await.unwrap().len(), 2);

    slow.commit().await.unwrap();
    let events = store.events_after(0, None, 100).await.unwrap();
    let order: Vec<(&str, EventKind, u64)> = events
        .iter()
        .map(|e| (e.proposal.id.as_str(), e.kind, e.cursor))
        .collect();
    assert_eq!(
        order,
        [
            (earlier.id.as_str(), EventKind::Submitted, 1),
            (fast.proposal().id.as_str(), EventKind::Submitted, 1),
            (earlier.id.as_str(), EventKind::Cancelled, 2),
        ]
    );
    assert!(events.windows(2).all(|w| w[0].position < w[1].position));
}

/// What a racing operation may answer: done, or refused because another got
/// there first. A database error (a deadlock above all) is neither.
fn settled<T>(result: countersign_store::Result<T>) {
    match result {
        Ok(_)
        | Err(StoreError::FailedPrecondition(_))
        | Err(StoreError::NotFound(_))
        | Err(StoreError::AlreadyExists(_)) => {}
        Err(other) => panic!("a racing operation failed: {other}"),
    }
}

/// Every writer takes the event log's lock last, after its row locks, so
/// writers racing over the same proposals of two tenants (batches of starts
/// and of decisions that span both, cancels, counted retries, breakers that
/// trip) wait for one another but never deadlock.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writers_racing_over_the_same_proposals_of_two_tenants_never_deadlock() {
    let db = TestDatabase::migrated().await;
    let store: DynStore = std::sync::Arc::new(
        countersign_store::PostgresStore::connect_with(&db.app_url, 12)
            .await
            .unwrap(),
    );
    for tenant in ["a", "b"] {
        store.create_tenant(tenant).await.unwrap();
    }
    for round in 0..12 {
        let mut keys = Vec::new();
        let mut specs = Vec::new();
        for i in 0..8 {
            let tenant = if i % 2 == 0 { "a" } else { "b" };
            let p = store
                .insert_proposal(new_proposal(tenant))
                .await
                .unwrap()
                .proposal()
                .clone();
            keys.push(ReviewKey {
                tenant: tenant.into(),
                id: p.id,
            });
            specs.push(p.spec);
        }
        // Two batches over the same proposals, in opposite orders.
        let mut reversed = keys.clone();
        reversed.reverse();
        let mut racers = tokio::task::JoinSet::new();
        for batch in [keys.clone(), reversed] {
            let store = store.clone();
            racers.spawn(async move { settled(store.begin_reviews(&batch).await) });
        }
        for key in keys.iter().skip(round % 3).step_by(3) {
            let (store, key) = (store.clone(), key.clone());
            racers.spawn(async move {
                settled(
                    store
                        .cancel_proposal(&key.tenant, &key.id, "race", None)
                        .await,
                )
            });
        }
        for half in [keys.iter().rev().collect::<Vec<_>>(), keys.iter().collect()] {
            let items: Vec<_> = half
                .into_iter()
                .map(|k| {
                    let spec = &specs[keys.iter().position(|x| x == k).unwrap()];
                    (
                        k.clone(),
                        countersign_test_support::fixtures::rejection(spec, "target_state"),
                    )
                })
                .collect();
            let store = store.clone();
            racers.spawn(async move { settled(store.record_decisions(items).await) });
        }
        let counted: Vec<(ReviewKey, u64)> = keys.iter().map(|k| (k.clone(), 1)).collect();
        let suppressed = store.clone();
        racers.spawn(async move { settled(suppressed.record_suppressed(counted).await) });
        while let Some(joined) = racers.join_next().await {
            joined.unwrap();
        }
    }
    // Every proposal ended in exactly one terminal state, with its event.
    let events = store.events_after(0, None, 10_000).await.unwrap();
    assert!(events.windows(2).all(|w| w[0].position < w[1].position));
    for tenant in ["a", "b"] {
        let cursors: Vec<u64> = events
            .iter()
            .filter(|e| e.tenant() == tenant)
            .map(|e| e.cursor)
            .collect();
        let n = cursors.len() as u64;
        assert_eq!(cursors, (1..=n).collect::<Vec<_>>(), "{tenant}");
    }
    let ends = events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Rejected | EventKind::Cancelled))
        .count();
    assert_eq!(ends, 12 * 8, "one end per proposal");
}

/// A decision draws its place in the audit sequencer's order under the event
/// log's lock, whoever inserts it: a second decision waits for an open one to
/// commit, so the sequencer, which reads past the last place it appended,
/// never passes one that commits late.
#[tokio::test]
async fn a_decision_waits_for_an_open_one_so_the_audit_sequencer_skips_none() {
    let db = TestDatabase::migrated().await;
    let (store, first) = tenants_a_and_b_with_a_proposal_of_a(&db).await;
    let second = store
        .insert_proposal(new_proposal("b"))
        .await
        .unwrap()
        .proposal()
        .clone();
    store
        .begin_reviews(&[countersign_store::ReviewKey {
            tenant: String::from("a"),
            id: String::from(&first.id),
        }])
        .await
        .unwrap();
    store
        .begin_reviews(&[countersign_store::ReviewKey {
            tenant: String::from("b"),
            id: String::from(&second.id),
        }])
        .await
        .unwrap();

    // Tenant a's decision is inserted and its transaction stays open.
    let mut conn = db.app_connection().await;
    let mut slow = in_tenant_a(&mut conn).await;
    sqlx::query(
        "INSERT INTO decisions (proposal_id, tenant, outcome, reason, agent_message, sop_id,
             sop_version, rollback_path, gates_json, missing_gates_json, reviewer, decided_at,
             summary, review_latency_ms)
         VALUES ($1, 'a', 'reject', 'r', 'm', NULL, NULL, NULL, '[]', '[\"sop\"]', 'w', 1, 's', 1)",
    )
    .bind(&first.id)
    .execute(&mut *slow)
    .await
    .unwrap();

    let fast = {
        let (store, id, spec) = (store.clone(), second.id.clone(), second.spec.clone());
        tokio::spawn(async move {
            store
                .record_decision(
                    "b",
                    &id,
                    countersign_test_support::fixtures::rejection(&spec, "sop"),
                )
                .await
                .unwrap()
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !fast.is_finished(),
        "the second decision waits for the first to commit"
    );
    slow.commit().await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), fast)
        .await
        .expect("the second decision proceeds once the first commits")
        .unwrap();

    assert_eq!(store.append_audit(100).await.unwrap(), 2);
    assert_eq!(store.audit_head("a").await.unwrap().0, 1);
    assert_eq!(store.audit_head("b").await.unwrap().0, 1);
}
