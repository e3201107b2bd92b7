//! Retry-loop suppression and the operator breaker.

use std::time::Duration;

use countersign::client::BearerAuth;
use countersign_domain::Role;
use countersign_proto::v1::{
    self, EventKind, ProposalSpec, ProposalState, PutSopRequest, PutTargetRequest, SubmitResponse,
    WatchRequest, sop_service_client::SopServiceClient, target_service_client::TargetServiceClient,
};
use tonic::Code;

use crate::helpers::{Options, TestApp, assert_code, test_reviewers, valid_spec};

const WAIT: Duration = Duration::from_secs(15);

/// Reviewing, with a fast flush of counted retries and breaker resets.
pub(crate) async fn app_with(configure: impl FnOnce(&mut countersign_api::ApiConfig)) -> TestApp {
    let app = TestApp::start(
        Options {
            reviewers: Some(test_reviewers(2)),
            dir: None,
        },
        |c| {
            c.suppression.flush_every = Duration::from_millis(50);
            configure(c);
        },
    )
    .await;
    app.seed_reference("acme").await;
    app
}

/// A spec that fails the target gate (the target is unknown).
pub(crate) fn doomed() -> ProposalSpec {
    let mut spec = valid_spec();
    spec.target = "node-99".into();
    spec
}

/// Waits on a stream of terminal events for `id`'s, which must be a
/// rejection. The fan-out hands each event to the suppression cache before
/// any watcher, so once it is seen the cache has it.
pub(crate) async fn until_rejected(stream: &mut tonic::Streaming<v1::Notification>, id: &str) {
    loop {
        let n = tokio::time::timeout(WAIT, stream.message())
            .await
            .expect("the decision on the stream")
            .unwrap()
            .expect("the stream stays open");
        if n.proposal.as_ref().is_some_and(|p| p.id == id) {
            assert_eq!(n.event, EventKind::Rejected as i32, "{:?}", n.proposal);
            return;
        }
    }
}

/// Submits `spec`, waits for its rejection and for the suppression cache to
/// have it. The fan-out hands each event to the cache before any watcher, so
/// a watcher's REJECTED means the cache has it. (Retrying until a retry was
/// suppressed raced: on a loaded machine each retry the cache had not caught
/// up with was another review and another rejection, until the operator's
/// breaker opened.) The check resubmits without an idempotency key: with
/// the same key the answer is the earlier proposal, deduplicated.
pub(crate) async fn rejected(app: &TestApp, key: &str, spec: ProposalSpec) -> String {
    let oncall = app.key("acme", Role::Oncall).await;
    let mut stream = app
        .watch(
            &oncall,
            WatchRequest {
                terminal_only: true,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let id = app.submit_id(key, spec.clone()).await;
    until_rejected(&mut stream, &id).await;
    let mut again = spec;
    again.idempotency_key.clear();
    let again = app.submit(key, again).await.unwrap();
    assert!(
        again.suppressed,
        "the cache has the rejection its watcher saw"
    );
    id
}

async fn count(app: &TestApp, sql: &str) -> i64 {
    sqlx::query_scalar(sql)
        .fetch_one(&app.raw_db().await)
        .await
        .unwrap()
}

fn earlier(response: &SubmitResponse) -> &v1::Proposal {
    response.proposal.as_ref().unwrap()
}

#[tokio::test]
async fn an_identical_resubmission_is_answered_at_once_with_the_earlier_rejection() {
    let app = app_with(|_| {}).await;
    let key = app.key("acme", Role::Coordinator).await;
    let first = rejected(&app, &key, doomed()).await;
    let rows = count(&app, "SELECT COUNT(*) FROM proposals").await;
    let r = app.submit(&key, doomed()).await.unwrap();
    assert!(r.suppressed && !r.deduplicated);
    let p = earlier(&r);
    assert_eq!(
        (p.id.as_str(), p.state),
        (first.as_str(), ProposalState::Rejected as i32)
    );
    let d = p.decision.as_ref().unwrap();
    assert!(d.reason.contains("node-99"), "{d:?}");
    assert!(
        d.missing_gates.contains(&"target_state".to_owned()),
        "{d:?}"
    );
    assert_eq!(
        count(&app, "SELECT COUNT(*) FROM proposals").await,
        rows,
        "no new row"
    );
    assert_eq!(
        count(&app, "SELECT COUNT(*) FROM queue_entries").await,
        0,
        "no queue entry"
    );
}

#[tokio::test]
async fn rewording_the_reason_does_not_get_around_it_but_another_call_is_reviewed() {
    let app = app_with(|_| {}).await;
    let key = app.key("acme", Role::Coordinator).await;
    let first = rejected(&app, &key, doomed()).await;
    let mut reworded = doomed();
    reworded.reason = "URGENT: customer outage, please approve".into();
    reworded.idempotency_key = "fresh-key".into();
    let r = app.submit(&key, reworded).await.unwrap();
    assert!(r.suppressed);
    assert_eq!(earlier(&r).id, first);

    let mut other_target = doomed();
    other_target.target = "node-98".into();
    let mut other_parameters = doomed();
    other_parameters.parameters = Some(countersign_proto::convert::json_to_struct(
        serde_json::json!({"service": "redis"}).as_object().unwrap(),
    ));
    for spec in [other_target, other_parameters] {
        let r = app.submit(&key, spec).await.unwrap();
        assert!(!r.suppressed, "a different call is reviewed");
        assert_ne!(earlier(&r).id, first);
    }
}

/// Puts SOP `id` for `action` (single device, `env=production`) with the
/// given rollback path.
async fn put_sop(app: &TestApp, id: &str, action: &str, rollback_path: &str) {
    let admin = app.key("acme", Role::Admin).await;
    SopServiceClient::with_interceptor(app.channel().await, BearerAuth::new(&admin).unwrap())
        .put_sop(PutSopRequest {
            sop: Some(v1::Sop {
                id: id.into(),
                action: action.into(),
                title: "Clear a cache".into(),
                rollback_path: rollback_path.into(),
                max_blast_radius: v1::BlastRadius::SingleDevice as i32,
                selector: [("env".to_owned(), "production".to_owned())].into(),
                ..Default::default()
            }),
        })
        .await
        .unwrap();
}

#[tokio::test]
async fn a_rejection_for_a_missing_rollback_does_not_answer_the_call_with_a_rollback_plan() {
    let app = app_with(|_| {}).await;
    put_sop(&app, "SOP-010", "clear_cache", "").await;
    let key = app.key("acme", Role::Coordinator).await;
    let mut without = valid_spec();
    without.action = "clear_cache".into();
    without.target = "node-02".into();
    without.rollback_plan = String::new();
    let first = rejected(&app, &key, without.clone()).await;
    let d = app.get(&key, &first).await.unwrap().decision.unwrap();
    assert_eq!(d.missing_gates, ["rollback"]);

    let mut with_plan = without;
    with_plan.rollback_plan = "warm the cache again".into();
    let r = app.submit(&key, with_plan).await.unwrap();
    assert!(!r.suppressed, "the call the rejection answered was another");
    assert_ne!(earlier(&r).id, first);
    let p = app
        .await_decision(&key, &earlier(&r).id, WAIT)
        .await
        .unwrap();
    assert_eq!(p.state, ProposalState::Approved as i32, "{:?}", p.decision);
}

#[tokio::test]
async fn a_rejection_without_an_sop_does_not_answer_the_call_that_forces_one() {
    let app = app_with(|_| {}).await;
    let mut policy = app.store.get_tenant("acme").await.unwrap().unwrap().policy;
    policy.allow_force_approve_no_sop = true;
    app.store.set_tenant_policy("acme", policy).await.unwrap();
    let key = app.key("acme", Role::Coordinator).await;
    let mut unforced = valid_spec();
    unforced.action = "flush_dns".into();
    unforced.target = "node-03".into();
    let first = rejected(&app, &key, unforced.clone()).await;
    let d = app.get(&key, &first).await.unwrap().decision.unwrap();
    assert_eq!(d.missing_gates, ["sop", "blast_radius"]);

    let mut forced = unforced;
    forced.force_approve_no_sop = true;
    let r = app.submit(&key, forced).await.unwrap();
    assert!(!r.suppressed);
    let p = app
        .await_decision(&key, &earlier(&r).id, WAIT)
        .await
        .unwrap();
    assert_eq!(p.state, ProposalState::Approved as i32, "{:?}", p.decision);
}

#[tokio::test]
async fn a_suppressed_answer_is_the_earlier_proposal_with_the_retrys_parameters() {
    let app = app_with(|_| {}).await;
    let key = app.key("acme", Role::Coordinator).await;
    let mut spec = doomed();
    spec.context_summary = "c".repeat(16 * 1024);
    let first = rejected(&app, &key, spec.clone()).await;
    spec.reason = "the same call, reworded".into();
    let r = app.submit(&key, spec.clone()).await.unwrap();
    assert!(r.suppressed);
    let p = earlier(&r);
    assert_eq!(p.id, first);
    let answered = p.spec.clone().unwrap();
    assert_eq!(answered.parameters, spec.parameters);
    assert_eq!(answered.reason, doomed().reason, "the earlier proposal's");
    assert!(
        answered.context_summary.is_empty(),
        "not kept: GetProposal has it"
    );
    let whole = app.get(&key, &first).await.unwrap().spec.unwrap();
    assert_eq!(whole.context_summary.len(), 16 * 1024);
}

#[tokio::test]
async fn an_entry_expires_after_its_ttl() {
    let ttl = Duration::from_millis(600);
    let app = app_with(|c| c.suppression.ttl = ttl).await;
    let key = app.key("acme", Role::Coordinator).await;
    rejected(&app, &key, doomed()).await;
    tokio::time::sleep(ttl + Duration::from_millis(100)).await;
    let r = app.submit(&key, doomed()).await.unwrap();
    assert!(!r.suppressed, "expired: reviewed again");
    assert_eq!(earlier(&r).state, ProposalState::Pending as i32);
}

#[tokio::test]
async fn a_change_to_the_sops_or_the_target_makes_the_call_reviewable_at_once() {
    let app = app_with(|_| {}).await;
    let key = app.key("acme", Role::Coordinator).await;
    let admin = app.key("acme", Role::Admin).await;
    let auth = || BearerAuth::new(&admin).unwrap();

    // The target: unknown, then put ONLINE.
    rejected(&app, &key, doomed()).await;
    TargetServiceClient::with_interceptor(app.channel().await, auth())
        .put_target(PutTargetRequest {
            target: Some(v1::Target {
                id: "node-99".into(),
                status: v1::TargetStatus::Online as i32,
                labels: [("env".to_owned(), "production".to_owned())].into(),
                updated_at: None,
            }),
        })
        .await
        .unwrap();
    let r = app.submit(&key, doomed()).await.unwrap();
    assert!(!r.suppressed);
    let p = app
        .await_decision(&key, &earlier(&r).id, WAIT)
        .await
        .unwrap();
    assert_eq!(p.state, ProposalState::Approved as i32, "{:?}", p.decision);

    // The SOPs of an action: none, then one.
    let mut uncovered = valid_spec();
    uncovered.action = "clear_cache".into();
    uncovered.target = "node-02".into();
    rejected(&app, &key, uncovered.clone()).await;
    SopServiceClient::with_interceptor(app.channel().await, auth())
        .put_sop(PutSopRequest {
            sop: Some(v1::Sop {
                id: "SOP-010".into(),
                action: "clear_cache".into(),
                title: "Clear a cache".into(),
                rollback_path: "warm it again".into(),
                max_blast_radius: v1::BlastRadius::SingleDevice as i32,
                ..Default::default()
            }),
        })
        .await
        .unwrap();
    let r = app.submit(&key, uncovered).await.unwrap();
    assert!(!r.suppressed);
    let p = app
        .await_decision(&key, &earlier(&r).id, WAIT)
        .await
        .unwrap();
    assert_eq!(p.state, ProposalState::Approved as i32, "{:?}", p.decision);
}

#[tokio::test]
async fn an_approval_is_never_cached() {
    let app = app_with(|_| {}).await;
    let mut policy = app.store.get_tenant("acme").await.unwrap().unwrap().policy;
    policy.parallel_window_ms = 0;
    app.store.set_tenant_policy("acme", policy).await.unwrap();
    let key = app.key("acme", Role::Coordinator).await;
    for _ in 0..3 {
        let r = app.submit(&key, valid_spec()).await.unwrap();
        assert!(!r.suppressed);
        let p = app
            .await_decision(&key, &earlier(&r).id, WAIT)
            .await
            .unwrap();
        assert_eq!(p.state, ProposalState::Approved as i32, "{:?}", p.decision);
    }
}

#[tokio::test]
async fn agents_get_the_terse_message_on_a_suppressed_answer() {
    let app = app_with(|_| {}).await;
    let agent = app.agent_key("acme", Role::Coordinator).await;
    rejected(&app, &agent, doomed()).await;
    let r = app.submit(&agent, doomed()).await.unwrap();
    assert!(r.suppressed);
    let d = earlier(&r).decision.clone().unwrap();
    assert!(
        d.reason.is_empty() && d.gates.is_empty() && d.missing_gates.is_empty(),
        "{d:?}"
    );
    assert!(d.agent_message.contains("Do not retry"), "{d:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_identical_retries_cost_no_write_each() {
    let app = app_with(|c| c.suppression.flush_every = Duration::from_millis(200)).await;
    let key = app.key("acme", Role::Coordinator).await;
    let first = rejected(&app, &key, doomed()).await;
    // Let the retry counted by `rejected` reach the database first.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let rows = count(&app, "SELECT COUNT(*) FROM proposals").await;
    let events = count(&app, "SELECT COUNT(*) FROM events").await;
    let before = app.get(&key, &first).await.unwrap().suppressed_retries;

    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let mut client = app.client(&key).await;
        tasks.spawn(async move {
            let mut suppressed = 0;
            for _ in 0..125 {
                let r = client
                    .submit(v1::SubmitRequest {
                        spec: Some(doomed()),
                        ..Default::default()
                    })
                    .await
                    .unwrap()
                    .into_inner();
                suppressed += u64::from(r.suppressed);
            }
            suppressed
        });
    }
    let mut suppressed = 0;
    while let Some(n) = tasks.join_next().await {
        suppressed += n.unwrap();
    }
    assert_eq!(suppressed, 1_000);
    tokio::time::sleep(Duration::from_millis(600)).await; // one more flush
    assert_eq!(count(&app, "SELECT COUNT(*) FROM proposals").await, rows);
    let new_events = count(&app, "SELECT COUNT(*) FROM events").await - events;
    assert!(
        (1..=20).contains(&new_events),
        "one SUPPRESSED event per flush, not per retry: {new_events}"
    );
    let kinds: Vec<String> =
        sqlx::query_scalar("SELECT DISTINCT kind FROM events WHERE cursor > ?")
            .bind(events)
            .fetch_all(&app.raw_db().await)
            .await
            .unwrap();
    assert_eq!(kinds, ["SUPPRESSED"]);
    let after = app.get(&key, &first).await.unwrap().suppressed_retries;
    assert_eq!(after - before, 1_000, "every retry counted");
}

#[tokio::test]
async fn the_breaker_opens_at_the_threshold_tells_oncall_and_an_admin_resets_it() {
    let app = app_with(|_| {}).await;
    let key = app.key("acme", Role::Coordinator).await;
    let oncall = app.key("acme", Role::Oncall).await;
    let mut stream = app
        .watch(
            &oncall,
            WatchRequest {
                after_cursor: Some(0),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let mut ids = Vec::new();
    for n in 0..3 {
        let mut spec = doomed();
        spec.target = format!("node-9{n}"); // three different calls
        ids.push(app.submit_id(&key, spec.clone()).await);
        app.await_decision(&key, &ids[n], WAIT).await.unwrap();
    }
    // The third rejection trips it: on-call sees that on the stream.
    let trip = loop {
        let n = tokio::time::timeout(WAIT, stream.message())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        if n.event == EventKind::BreakerTripped as i32 {
            break n;
        }
    };
    assert_eq!(trip.proposal.unwrap().id, ids[2]);

    let mut fresh = valid_spec();
    fresh.target = "node-02".into();
    let refused = loop {
        match app.submit(&key, fresh.clone()).await {
            Err(status) => break status,
            Ok(_) => tokio::time::sleep(Duration::from_millis(20)).await, // not seen yet
        }
    };
    assert_eq!(refused.code(), Code::FailedPrecondition);
    assert!(
        refused.message().contains("a human must look"),
        "{refused:?}"
    );
    let mut other_operator = fresh.clone();
    other_operator.operator = "user_7".into();
    app.submit(&key, other_operator)
        .await
        .expect("only that operator");

    app.store.reset_breaker("acme", "user_42").await.unwrap();
    let mut accepted = false;
    for _ in 0..100 {
        if app.submit(&key, fresh.clone()).await.is_ok() {
            accepted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(accepted, "a reset closes the breaker");
    assert_code(
        countersign_proto::OrStatus::or_status(app.store.reset_breaker("ghost", "user_42").await),
        Code::NotFound,
    );
}

#[tokio::test]
async fn a_rejection_only_for_a_parallel_operation_is_not_cached() {
    let app = app_with(|_| {}).await;
    let key = app.key("acme", Role::Coordinator).await;
    let first = app.submit_id(&key, valid_spec()).await;
    let p = app.await_decision(&key, &first, WAIT).await.unwrap();
    assert_eq!(p.state, ProposalState::Approved as i32);
    let second = app.submit_id(&key, valid_spec()).await;
    let d = app
        .await_decision(&key, &second, WAIT)
        .await
        .unwrap()
        .decision
        .unwrap();
    assert_eq!(d.missing_gates, ["no_parallel_operation"]);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let r = app.submit(&key, valid_spec()).await.unwrap();
    assert!(!r.suppressed, "told to wait, so reviewed again");
}
