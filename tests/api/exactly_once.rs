//! Accepted means never lost; exactly one decision per proposal; terminal
//! states never change (DESIGN.md invariants 3 and 4).

use std::time::Duration;

use countersign_domain::Event;
use countersign_domain::{
    Role,
    review::{self, ReviewStamp},
};
use countersign_proto::v1::ProposalState;
use countersign_reviewer::Reviewers;
use countersign_store::{BeginReview, DynStore, NewProposal, RecordOutcome};

use crate::helpers::{Options, TestApp, test_reviewers, valid_spec};

const WAIT: Duration = Duration::from_secs(60);

/// The terminal events of one proposal (there must be exactly one).
fn terminal<'a>(events: impl IntoIterator<Item = &'a Event>) -> usize {
    events.into_iter().filter(|e| e.kind.is_terminal()).count()
}

async fn decisions(app: &TestApp) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM decisions")
        .fetch_one(&app.raw_db().await)
        .await
        .unwrap()
}

async fn wait_until_all_terminal(store: &DynStore, tenant: &str, ids: &[String]) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let mut open = 0;
        for id in ids {
            if !store
                .get_proposal(tenant, id)
                .await
                .unwrap()
                .unwrap()
                .state
                .is_terminal()
            {
                open += 1;
            }
        }
        if open == 0 {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{open} proposals still open"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_worker_that_dies_mid_review_loses_its_lease_and_the_proposal_is_decided_once() {
    let app = TestApp::spawn().await; // no reviewers yet
    app.seed_reference("acme").await;
    let key = app.key("acme", Role::Coordinator).await;
    let id = app.submit_id(&key, valid_spec()).await;

    // A worker leases it, starts the review, and dies without a word.
    let leases = app
        .queue()
        .fetch("doomed", 1, Duration::from_millis(200))
        .await
        .unwrap();
    assert_eq!(leases.len(), 1);
    let begun = app.begin_review("acme", &id).await;
    assert!(matches!(begun, BeginReview::Reviewing { .. }));

    let reviewers = Reviewers::start(
        app.store.clone(),
        app.queue(),
        test_reviewers(2),
        &app.shutdown,
    );
    let p = app
        .await_decision(&key, &id, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(p.state, ProposalState::Approved as i32);
    let events = app.proposal_events("acme", &id).await;
    let kinds: Vec<_> = events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds, ["SUBMITTED", "REVIEW_STARTED", "APPROVED"]);
    assert_eq!(decisions(&app).await, 1);
    // The dead worker's late ack changes nothing.
    app.queue().ack(&leases[0]).await.unwrap();
    reviewers.shutdown().await;
}

#[tokio::test]
async fn two_worker_pools_racing_over_one_queue_decide_each_proposal_once() {
    let app = TestApp::spawn_reviewing(4).await;
    let rival = Reviewers::start(
        app.store.clone(),
        app.queue(),
        test_reviewers(4),
        &app.shutdown,
    );
    app.seed_reference("acme").await;
    let key = app.key("acme", Role::Coordinator).await;
    let mut ids = Vec::new();
    for n in 0..150 {
        let mut spec = valid_spec();
        spec.target = format!("node-0{}", 1 + n % 3);
        // Parallel-gate rejections galore: one operator each, so no breaker opens.
        spec.operator = format!("op-{n}");
        ids.push(app.submit_id(&key, spec).await);
    }
    wait_until_all_terminal(&app.store, "acme", &ids).await;
    let log = app.tenant_events("acme").await;
    for id in &ids {
        let events: Vec<&Event> = log.iter().filter(|e| &e.proposal.id == id).collect();
        assert_eq!(terminal(events.iter().copied()), 1, "{id}: {events:?}");
        assert_eq!(
            events
                .iter()
                .filter(|e| e.kind.as_str() == "REVIEW_STARTED")
                .count(),
            1
        );
    }
    assert_eq!(decisions(&app).await, 150);
    rival.shutdown().await;
}

#[tokio::test]
async fn a_cancel_that_wins_the_race_discards_the_late_result() {
    let app = TestApp::spawn().await;
    app.seed_reference("acme").await;
    let key = app.key("acme", Role::Coordinator).await;
    let id = app.submit_id(&key, valid_spec()).await;
    let BeginReview::Reviewing {
        proposal,
        started_at,
        ..
    } = app.begin_review("acme", &id).await
    else {
        panic!("should be reviewable")
    };
    let facts = app.review_facts(&proposal).await;
    let verdict = countersign_domain::gates::evaluate(&facts);
    assert!(verdict.approves());

    let cancelled = app.cancel(&key, &id).await.unwrap();
    assert_eq!(cancelled.state, ProposalState::Cancelled as i32);

    let stamp = ReviewStamp {
        reviewer: "w".into(),
        decided_at: started_at + 5,
        latency_ms: 5,
    };
    let late = review::decide(&verdict, &(&proposal.spec).into(), stamp);
    let outcome = app.store.record_decision("acme", &id, late).await.unwrap();
    assert!(matches!(
        outcome,
        RecordOutcome::Discarded(countersign_domain::ProposalState::Cancelled)
    ));
    let p = app.get(&key, &id).await.unwrap();
    assert_eq!(p.state, ProposalState::Cancelled as i32);
    assert!(p.decision.is_none());
    assert_eq!(decisions(&app).await, 0);
    let logged: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM discarded_results WHERE proposal_id = ?")
            .bind(&id)
            .fetch_one(&app.raw_db().await)
            .await
            .unwrap();
    assert_eq!(logged, 1, "the late result is logged");
}

#[tokio::test]
async fn cancels_racing_live_reviewers_leave_either_a_cancel_or_one_decision() {
    let app = TestApp::spawn_reviewing(2).await;
    app.seed_reference("acme").await;
    let key = app.key("acme", Role::Coordinator).await;
    let mut ids = Vec::new();
    for n in 0..40 {
        let mut spec = valid_spec();
        spec.operator = format!("op-{n}"); // rejections spread: no breaker opens
        let id = app.submit_id(&key, spec).await;
        let _ = app.cancel(&key, &id).await; // may lose the race: FAILED_PRECONDITION
        ids.push(id);
    }
    wait_until_all_terminal(&app.store, "acme", &ids).await;
    let log = app.tenant_events("acme").await;
    for id in &ids {
        let p = app.get(&key, id).await.unwrap();
        let events: Vec<&Event> = log.iter().filter(|e| &e.proposal.id == id).collect();
        assert_eq!(terminal(events.iter().copied()), 1, "{events:?}");
        if p.state == ProposalState::Cancelled as i32 {
            assert!(p.decision.is_none());
        } else {
            assert!(p.decision.is_some());
        }
    }
}

#[tokio::test]
async fn a_recorded_decision_is_never_replaced() {
    let app = TestApp::spawn_reviewing(1).await;
    app.seed_reference("acme").await;
    let key = app.key("acme", Role::Coordinator).await;
    let id = app.submit_id(&key, valid_spec()).await;
    let p = app
        .await_decision(&key, &id, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(p.state, ProposalState::Approved as i32);
    let stamp = ReviewStamp {
        reviewer: "impostor".into(),
        decided_at: 0,
        latency_ms: 0,
    };
    let second = review::failed("a second opinion", stamp);
    let outcome = app
        .store
        .record_decision("acme", &id, second)
        .await
        .unwrap();
    assert!(matches!(outcome, RecordOutcome::Discarded(_)));
    assert_eq!(
        app.get(&key, &id).await.unwrap().state,
        ProposalState::Approved as i32
    );
    // And the database itself refuses to change or remove a decision.
    let db = app.raw_db().await;
    for sql in [
        "UPDATE decisions SET outcome = 'reject'",
        "DELETE FROM decisions",
    ] {
        let err = sqlx::query(sql).execute(&db).await.unwrap_err();
        assert!(err.to_string().contains("append-only"), "{err}");
    }
}

#[tokio::test]
async fn a_restart_with_a_thousand_pending_proposals_decides_every_one_exactly_once() {
    let app = TestApp::spawn().await; // accepts, reviews nothing
    app.seed_reference("acme").await;
    let mut ids = Vec::new();
    for n in 0..1000 {
        let mut spec = countersign_proto::convert::spec_from_proto(valid_spec()).unwrap();
        spec.target = format!("node-{n:04}");
        let created = app
            .store
            .insert_proposal(NewProposal {
                id: NewProposal::new_id(),
                tenant: "acme".into(),
                spec,
                submitted_by: "bulk".into(),
                submitted_by_person: None,
                trace_parent: None,
                submitted_key: None,
            })
            .await
            .unwrap();
        ids.push(created.proposal().id.clone());
    }
    let dir = app.stop().await;

    let app = TestApp::start(
        Options {
            reviewers: Some(test_reviewers(2)),
            dir: Some(dir),
        },
        |_| {},
    )
    .await;
    wait_until_all_terminal(&app.store, "acme", &ids).await;
    assert_eq!(decisions(&app).await, 1000);
    let log = app.tenant_events("acme").await;
    for id in &ids {
        assert_eq!(terminal(log.iter().filter(|e| &e.proposal.id == id)), 1);
    }
    assert_eq!(app.queue().depth().await.unwrap(), 0);
}
