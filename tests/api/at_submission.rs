//! A `Submit` that waits is reviewed inside the transaction that stores it
//! (`Proposals::submit_reviewed`, `countersign_reviewer::AtSubmission`), on
//! both backends: decided in one commit, with no queue entry and no
//! REVIEWING state; what the gates do not decide alone is queued for the
//! workers. Replicas of the API on one PostgreSQL: `replicas.rs`.

use std::time::Duration;

use countersign_domain::{EventKind, Role};
use countersign_proto::v1::{self, DecisionOutcome, ProposalState, SubmitRequest, SubmitResponse};
use countersign_test_support::{app::test_config, fixtures::wire_spec_on};
use tonic::Code;

use crate::escalation_support::{Backend, Env, Scene, TENANT, on_both_backends, route};
use crate::helpers::{TestApp, test_reviewers};

const WAIT: Duration = Duration::from_secs(20);

/// Submits `spec` as `key`, waiting up to [`WAIT`] for its decision.
async fn submit_waiting(
    app: &TestApp,
    key: &str,
    spec: v1::ProposalSpec,
) -> Result<SubmitResponse, tonic::Status> {
    app.client(key)
        .await
        .submit(SubmitRequest {
            spec: Some(spec),
            wait_for_decision: Some(WAIT.try_into().unwrap()),
        })
        .await
        .map(|r| r.into_inner())
}

async fn decided(app: &TestApp, key: &str, spec: v1::ProposalSpec) -> v1::Proposal {
    let answer = submit_waiting(app, key, spec).await.unwrap();
    answer.proposal.expect("a proposal")
}

fn kinds(events: &[countersign_store::Event]) -> Vec<EventKind> {
    events.iter().map(|e| e.kind).collect()
}

fn reviewer(p: &v1::Proposal) -> String {
    p.decision.as_ref().expect("a decision").reviewer.clone()
}

on_both_backends!(
    a_waiting_submit_is_decided_in_the_transaction_that_stores_it,
    an_identical_retry_the_moment_a_rejection_is_answered_is_suppressed,
    overlapping_waiting_submits_in_one_commit_approve_exactly_one,
    what_a_route_sends_to_people_is_queued_for_the_workers,
    rejections_at_submission_trip_the_operators_breaker,
);

/// The application on `backend`, reviewed by one worker (whose name is
/// `test`), and a coordinator's key.
async fn started(backend: Backend) -> (Env, String) {
    let env = backend.start().await;
    env.app.seed_reference(TENANT).await;
    let key = env.app.key(TENANT, Role::Coordinator).await;
    (env, key)
}

async fn a_waiting_submit_is_decided_in_the_transaction_that_stores_it(backend: Backend) {
    let (env, key) = started(backend).await;
    let app = &env.app;
    let approved = decided(app, &key, wire_spec_on("node-01")).await;
    assert_eq!(
        approved.state,
        ProposalState::Approved as i32,
        "{approved:?}"
    );
    assert_eq!(reviewer(&approved), "test/submit");
    let decision = approved.decision.clone().unwrap();
    assert!(
        decision.receipt.is_some(),
        "an approval carries its receipt"
    );
    // Two events: submitted (straight into review) and decided. No queue
    // entry was written, none was leased, no REVIEWING state.
    let events = app.proposal_events(TENANT, &approved.id).await;
    assert_eq!(kinds(&events), [EventKind::Submitted, EventKind::Approved]);
    assert_eq!(env.queued().await, 0, "nothing queued for the workers");
    // What the answer says is what is stored.
    let stored = app.get(&key, &approved.id).await.unwrap();
    assert_eq!(stored.state, approved.state);
    let stored = stored.decision.unwrap();
    assert_eq!(
        (
            stored.outcome,
            &stored.reason,
            &stored.gates,
            stored.decided_at
        ),
        (
            decision.outcome,
            &decision.reason,
            &decision.gates,
            decision.decided_at
        )
    );

    let rejected = decided(app, &key, wire_spec_on("node-unknown")).await;
    assert_eq!(rejected.state, ProposalState::Rejected as i32);
    assert_eq!(reviewer(&rejected), "test/submit");
    let d = rejected.decision.unwrap();
    assert_eq!(d.outcome, DecisionOutcome::Reject as i32);
    assert!(
        d.missing_gates.contains(&"target_state".to_owned()),
        "{d:?}"
    );

    // A submit that does not wait is the workers' to review.
    let id = app.submit_id(&key, wire_spec_on("node-02")).await;
    let queued = app.await_decision(&key, &id, WAIT).await.unwrap();
    assert_eq!(queued.state, ProposalState::Approved as i32);
    assert_eq!(reviewer(&queued), "test/0");
    let events = app.proposal_events(TENANT, &id).await;
    assert_eq!(
        kinds(&events),
        [
            EventKind::Submitted,
            EventKind::ReviewStarted,
            EventKind::Approved
        ]
    );
}

/// The rejection is cached before it is answered: an identical retry the
/// moment the answer arrives is suppressed, not reviewed again.
async fn an_identical_retry_the_moment_a_rejection_is_answered_is_suppressed(backend: Backend) {
    let (env, key) = started(backend).await;
    let app = &env.app;
    let first = decided(app, &key, wire_spec_on("node-unknown")).await;
    assert_eq!(first.state, ProposalState::Rejected as i32);
    let again = submit_waiting(app, &key, wire_spec_on("node-unknown"))
        .await
        .unwrap();
    assert!(again.suppressed, "{again:?}");
    assert_eq!(again.proposal.unwrap().id, first.id);
}

/// Many waiting submissions on one target at once (they share commits):
/// exactly one is approved, every other is told to wait for an earlier
/// one, as one writer taking them one at a time would decide.
async fn overlapping_waiting_submits_in_one_commit_approve_exactly_one(backend: Backend) {
    let (env, key) = started(backend).await;
    let app = &env.app;
    // Fifteen rejections of one operator would open its breaker mid-burst.
    let tenant = app.store.get_tenant(TENANT).await.unwrap().unwrap();
    let policy = countersign_store::TenantPolicy {
        breaker_threshold: 0,
        ..tenant.policy
    };
    app.store.set_tenant_policy(TENANT, policy).await.unwrap();
    for target in ["node-01", "node-02", "node-03"] {
        let calls = (0..16).map(|_| {
            let (app, key) = (app, &key);
            async move { decided(app, key, wire_spec_on(target)).await }
        });
        let answers = futures::future::join_all(calls).await;
        let approved: Vec<&v1::Proposal> = answers
            .iter()
            .filter(|p| p.state == ProposalState::Approved as i32)
            .collect();
        assert_eq!(approved.len(), 1, "{target}: {answers:#?}");
        for p in answers.iter().filter(|p| p.id != approved[0].id) {
            assert_eq!(p.state, ProposalState::Rejected as i32, "{p:?}");
            let d = p.decision.as_ref().unwrap();
            assert_eq!(d.missing_gates, ["no_parallel_operation"], "{d:?}");
            let gate = d
                .gates
                .iter()
                .find(|g| g.gate == "no_parallel_operation")
                .unwrap();
            assert!(gate.detail.contains("wait for"), "{gate:?}");
        }
    }
}

/// A route that sends the proposal to people: the submission is queued,
/// the workers escalate it, and the waiting call answers with it ESCALATED.
async fn what_a_route_sends_to_people_is_queued_for_the_workers(backend: Backend) {
    let scene = Scene::new(backend, route("people", 1)).await;
    scene.target("node-a").await;
    let answer = submit_waiting(scene.app(), &scene.sam, wire_spec_on("node-a"))
        .await
        .unwrap();
    let escalated = answer.proposal.unwrap();
    assert_eq!(
        escalated.state,
        ProposalState::Escalated as i32,
        "{escalated:?}"
    );
    let events = scene.app().proposal_events(TENANT, &escalated.id).await;
    assert_eq!(
        kinds(&events),
        [
            EventKind::Submitted,
            EventKind::ReviewStarted,
            EventKind::Escalated
        ]
    );
}

/// Rejections decided at submission count toward the operator's breaker,
/// which then refuses the next submission.
async fn rejections_at_submission_trip_the_operators_breaker(backend: Backend) {
    // The default threshold: three rejections in the window.
    let (env, key) = started(backend).await;
    let app = &env.app;
    for n in 0..3 {
        let rejected = decided(app, &key, wire_spec_on(&format!("node-9{n}"))).await;
        assert_eq!(rejected.state, ProposalState::Rejected as i32);
        assert_eq!(reviewer(&rejected), "test/submit");
    }
    let refused = loop {
        match submit_waiting(app, &key, wire_spec_on("node-02")).await {
            Err(status) => break status,
            // The fan-out has not shown the trip to the API yet.
            Ok(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    };
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
    let trips = app
        .tenant_events(TENANT)
        .await
        .into_iter()
        .filter(|e| e.kind == EventKind::BreakerTripped)
        .count();
    assert_eq!(trips, 1);
}

/// With no stream watching and no tick of the fan-out to come, rejections
/// answered at submission still reach the operator's breaker: the fan-out
/// reads the events of answered decisions a moment after them, not never.
#[tokio::test]
async fn rejections_answered_at_submission_reach_the_breaker_with_no_tick() {
    let dir = tempfile::tempdir().unwrap();
    let config = test_config(dir.path());
    let app = TestApp::from_config(config, dir, Some(test_reviewers(1)), |api| {
        api.watch.poll_every = Duration::from_secs(3600);
    })
    .await;
    app.seed_reference(TENANT).await;
    let key = app.key(TENANT, Role::Coordinator).await;
    for n in 0..3 {
        let rejected = decided(&app, &key, wire_spec_on(&format!("node-9{n}"))).await;
        assert_eq!(rejected.state, ProposalState::Rejected as i32);
        assert_eq!(reviewer(&rejected), "test/submit");
    }
    let deadline = tokio::time::Instant::now() + WAIT;
    let refused = loop {
        match submit_waiting(&app, &key, wire_spec_on("node-02")).await {
            Err(status) => break status,
            Ok(_) => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "the breaker never learnt of the rejections"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
}

/// With `review.at_submission = false`, a waiting submission is queued.
#[tokio::test]
async fn with_review_at_submission_off_the_workers_review_a_waiting_submit() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    config.review.at_submission = false;
    let app = TestApp::from_config(config, dir, Some(test_reviewers(1)), |_| {}).await;
    app.seed_reference(TENANT).await;
    let key = app.key(TENANT, Role::Coordinator).await;
    let approved = decided(&app, &key, wire_spec_on("node-01")).await;
    assert_eq!(approved.state, ProposalState::Approved as i32);
    assert_eq!(reviewer(&approved), "test/0");
}
