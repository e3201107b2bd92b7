//! Every way a review can go wrong ends in a rejection or a time-out, never
//! an approval (DESIGN.md invariant 1).

use std::{sync::Arc, time::Duration};

use countersign_domain::{
    Role,
    gates::{self, ReviewFacts, Verdict},
};
use countersign_proto::v1::{DecisionOutcome, ProposalState};
use countersign_reviewer::Evaluator;

use crate::helpers::{Options, TestApp, test_reviewers, valid_spec};

const WAIT: Duration = Duration::from_secs(20);

async fn app_with(
    evaluator: Evaluator,
    tweak: impl FnOnce(&mut countersign_reviewer::ReviewerConfig),
) -> TestApp {
    let mut config = test_reviewers(1);
    config.evaluator = evaluator;
    tweak(&mut config);
    let app = TestApp::start(
        Options {
            reviewers: Some(config),
            dir: None,
        },
        |_| {},
    )
    .await;
    app.seed_reference("acme").await;
    app
}

/// Submits a proposal that every real gate would approve, and waits for it.
async fn decide(app: &TestApp) -> countersign_proto::v1::Proposal {
    let key = app.key("acme", Role::Coordinator).await;
    let id = app.submit_id(&key, valid_spec()).await;
    app.await_decision(&key, &id, WAIT).await.unwrap()
}

/// The same proposal submitted by a call that waits: reviewed inside the
/// transaction that stores it (`AtSubmission`, with the same evaluator), or
/// queued for the worker where that review does not conclude.
async fn decide_waiting(app: &TestApp) -> countersign_proto::v1::Proposal {
    let key = app.key("acme", Role::Coordinator).await;
    let answer = app
        .client(&key)
        .await
        .submit(countersign_proto::v1::SubmitRequest {
            spec: Some(valid_spec()),
            wait_for_decision: Some(WAIT.try_into().unwrap()),
        })
        .await
        .unwrap()
        .into_inner();
    answer.proposal.unwrap()
}

/// The real gates, less `gate`'s result.
fn dropping(gate: &'static str) -> Evaluator {
    Arc::new(move |facts: &ReviewFacts| {
        let mut verdict = gates::evaluate(facts);
        verdict.gates.retain(|g| g.gate != gate);
        verdict
    })
}

/// The real gates, and a passed gate nobody knows.
fn with_an_unknown_gate() -> Evaluator {
    Arc::new(|facts: &ReviewFacts| {
        let mut verdict = gates::evaluate(facts);
        verdict.gates.push(countersign_domain::GateResult {
            gate: "looks_fine_to_me".into(),
            passed: true,
            detail: String::new(),
        });
        verdict
    })
}

fn assert_review_failed(p: &countersign_proto::v1::Proposal) {
    assert_eq!(p.state, ProposalState::Rejected as i32, "{p:?}");
    let d = p.decision.as_ref().unwrap();
    assert_eq!(d.outcome, DecisionOutcome::Reject as i32);
    assert_eq!(d.missing_gates, ["review"], "{d:?}");
    assert!(d.reason.starts_with("review failed"), "{}", d.reason);
}

#[tokio::test]
async fn the_real_gates_approve_the_control_proposal() {
    // The control for every test below: same data, honest reviewer, approved.
    let app = app_with(Arc::new(gates::evaluate), |_| {}).await;
    assert_eq!(decide(&app).await.state, ProposalState::Approved as i32);
}

#[tokio::test]
async fn the_real_gates_approve_the_control_proposal_at_submission() {
    let app = app_with(Arc::new(gates::evaluate), |_| {}).await;
    let p = decide_waiting(&app).await;
    assert_eq!(p.state, ProposalState::Approved as i32);
    assert_eq!(p.decision.unwrap().reviewer, "test/submit");
}

#[tokio::test]
async fn a_review_at_submission_that_panics_queues_it_then_it_is_rejected_as_review_failed() {
    let evaluator: Evaluator = Arc::new(|_: &ReviewFacts| -> Verdict { panic!("reviewer bug") });
    let app = app_with(evaluator, |_| {}).await;
    assert_review_failed(&decide_waiting(&app).await);
}

#[tokio::test]
async fn a_result_at_submission_missing_a_gate_or_with_an_unknown_one_is_a_rejection() {
    let p = decide_waiting(&app_with(dropping(gates::ROLLBACK), |_| {}).await).await;
    assert_eq!(p.state, ProposalState::Rejected as i32, "{p:?}");
    let d = p.decision.unwrap();
    assert_eq!(
        (d.missing_gates, d.reviewer),
        (vec!["rollback".to_owned()], "test/submit".to_owned())
    );
    let p = decide_waiting(&app_with(with_an_unknown_gate(), |_| {}).await).await;
    assert_eq!(p.state, ProposalState::Rejected as i32, "{p:?}");
    assert_eq!(p.decision.unwrap().missing_gates, ["review"]);
}

#[tokio::test]
async fn a_panicking_review_is_retried_then_rejected_as_review_failed() {
    let evaluator: Evaluator = Arc::new(|_: &ReviewFacts| -> Verdict { panic!("reviewer bug") });
    let app = app_with(evaluator, |_| {}).await;
    assert_review_failed(&decide(&app).await);
}

#[tokio::test]
async fn a_result_missing_a_gate_is_a_rejection() {
    let app = app_with(dropping(gates::NO_PARALLEL_OPERATION), |_| {}).await;
    let p = decide(&app).await;
    assert_eq!(p.state, ProposalState::Rejected as i32);
    assert_eq!(p.decision.unwrap().missing_gates, ["no_parallel_operation"]);
}

#[tokio::test]
async fn a_result_with_an_unknown_extra_gate_is_a_rejection() {
    let app = app_with(with_an_unknown_gate(), |_| {}).await;
    let p = decide(&app).await;
    assert_eq!(p.state, ProposalState::Rejected as i32);
    assert_eq!(p.decision.unwrap().missing_gates, ["review"]);
}

#[tokio::test]
async fn malformed_stored_data_fails_the_review_closed() {
    // Through the worker, and at submission (whose facts cannot be read:
    // it is queued for the worker).
    for waiting in [false, true] {
        let app = app_with(Arc::new(gates::evaluate), |_| {}).await;
        let db = app.raw_db().await;
        sqlx::query("UPDATE sops SET selector_json = '{not json' WHERE id = 'SOP-007'")
            .execute(&db)
            .await
            .unwrap();
        let decided = if waiting {
            decide_waiting(&app).await
        } else {
            decide(&app).await
        };
        assert_review_failed(&decided);
    }
}

#[tokio::test]
async fn an_unknown_stored_target_status_fails_the_review_closed() {
    let app = app_with(Arc::new(gates::evaluate), |_| {}).await;
    let db = app.raw_db().await;
    sqlx::query("PRAGMA ignore_check_constraints = ON")
        .execute(&db)
        .await
        .unwrap();
    let mut conn = db.acquire().await.unwrap();
    sqlx::query("PRAGMA ignore_check_constraints = ON")
        .execute(&mut *conn)
        .await
        .unwrap();
    sqlx::query("UPDATE targets SET status = 'probably_fine' WHERE id = 'node-01'")
        .execute(&mut *conn)
        .await
        .unwrap();
    assert_review_failed(&decide(&app).await);
}

#[tokio::test]
async fn a_review_past_its_deadline_ends_timed_out() {
    let app = app_with(Arc::new(gates::evaluate), |c| {
        c.review_deadline = Duration::ZERO
    })
    .await;
    let p = decide(&app).await;
    assert_eq!(p.state, ProposalState::TimedOut as i32, "{p:?}");
    let d = p.decision.unwrap();
    assert_eq!(d.outcome, DecisionOutcome::TimedOut as i32);
    assert_eq!(d.missing_gates, ["review"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sop_retired_during_the_review_is_not_approved() {
    let retired = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let app_store: Arc<std::sync::OnceLock<countersign_store::DynStore>> = Arc::default();
    let (flag, slot) = (retired.clone(), app_store.clone());
    let handle = tokio::runtime::Handle::current();
    let evaluator: Evaluator = Arc::new(move |facts: &ReviewFacts| {
        let verdict = gates::evaluate(facts);
        if !flag.swap(true, std::sync::atomic::Ordering::SeqCst) {
            // An admin retires the SOP after the facts were gathered.
            let store = slot.get().unwrap().clone();
            tokio::task::block_in_place(|| {
                handle
                    .block_on(store.retire_sop("acme", "SOP-007"))
                    .unwrap();
            });
        }
        verdict
    });
    let app = app_with(evaluator, |_| {}).await;
    app_store.set(app.store.clone()).ok().unwrap();
    let p = decide(&app).await;
    assert!(retired.load(std::sync::atomic::Ordering::SeqCst));
    assert_eq!(p.state, ProposalState::Rejected as i32, "{p:?}");
    let d = p.decision.unwrap();
    assert!(d.missing_gates.contains(&"sop".to_owned()), "{d:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_that_goes_offline_during_the_review_is_not_approved() {
    let flipped = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let slot: Arc<std::sync::OnceLock<countersign_store::DynStore>> = Arc::default();
    let (flag, store_slot) = (flipped.clone(), slot.clone());
    let handle = tokio::runtime::Handle::current();
    let evaluator: Evaluator = Arc::new(move |facts: &ReviewFacts| {
        let verdict = gates::evaluate(facts);
        if !flag.swap(true, std::sync::atomic::Ordering::SeqCst) {
            let store = store_slot.get().unwrap().clone();
            let labels = facts.target.clone().unwrap().labels;
            tokio::task::block_in_place(|| {
                handle
                    .block_on(store.put_target(
                        "acme",
                        "node-01",
                        countersign_domain::TargetStatus::Offline,
                        labels,
                    ))
                    .unwrap();
            });
        }
        verdict
    });
    let app = app_with(evaluator, |_| {}).await;
    slot.set(app.store.clone()).ok().unwrap();
    let p = decide(&app).await;
    assert_eq!(p.state, ProposalState::Rejected as i32, "{p:?}");
    assert_eq!(p.decision.unwrap().missing_gates, ["target_state"]);
}
