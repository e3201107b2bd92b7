//! The model reviewer end to end, on both backends, against the test
//! support's fake OpenAI-compatible provider (no network): what each answer
//! and each failure does to a decision, that the model only ever makes a
//! decision stricter, `on_unsure` both ways, a tenant's calls per minute,
//! what an agent credential sees, that a tenant without a profile is
//! untouched, and that a review cut off mid-call is reviewed again and
//! decided once.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use countersign::config::{Config, ModelEndpointSection};
use countersign_domain::{
    Role, TargetStatus,
    escalation::{RouteInput, RouteMatch, validate_route},
    model::{ModelProfileInput, OnUnsure, validate_profile},
};
use countersign_model::Models;
use countersign_proto::v1::{self, Proposal, ProposalState};
use countersign_queue::DynQueue;
use countersign_reviewer::{ReviewerConfig, Reviewers};
use countersign_test_support::{
    app::{TestApp, test_config, test_reviewers},
    fake_model::{Answer, FakeModel, refusing_base_url},
    postgres::TestDatabase,
    redis,
};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::helpers::valid_spec;

const WAIT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Copy)]
enum Backend {
    Sqlite,
    Postgres,
}

/// Each test runs once on SQLite with the embedded queue and once on
/// PostgreSQL with Redis: `NAME::sqlite` and `NAME::postgres`.
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test]
            async fn sqlite() {
                super::$name(super::Backend::Sqlite).await
            }

            #[tokio::test]
            async fn postgres() {
                super::$name(super::Backend::Postgres).await
            }
        }
    )*};
}

on_both_backends!(
    an_approving_answer_keeps_the_approval_and_the_decision_records_the_review,
    a_rejecting_answer_rejects_and_names_the_model,
    every_answer_that_is_not_a_verdict_rejects,
    a_slow_answer_429_500_and_a_refused_connection_reject_naming_the_failure,
    past_the_review_deadline_the_proposal_times_out,
    the_model_only_ever_makes_a_decision_stricter,
    on_unsure_escalate_needs_a_route_and_reject_rejects,
    over_its_calls_per_minute_a_tenant_is_rejected_without_a_request,
    reviewers_in_two_processes_share_one_calls_per_minute,
    the_prompt_prefix_is_the_tenants_whole_catalogue_whatever_the_action,
    the_model_review_is_chained_in_the_decisions_audit_record,
    an_endpoints_key_is_sent_to_it_alone_and_never_stored,
    an_agent_credential_sees_neither_the_model_gate_nor_the_review,
    a_tenant_without_a_profile_is_untouched,
    a_review_cut_off_mid_call_is_reviewed_again_and_decided_once,
    a_review_waiting_at_shutdown_gives_its_lease_back_and_is_decided_after_the_restart,
    a_model_slower_than_the_lease_is_asked_once,
    a_slow_model_holds_up_only_the_proposals_it_reviews,
    a_model_verdict_answers_retries_from_the_cache_and_a_model_failure_does_not,
);

/// What the fake answers a proposal whose reason is `say:<key>`.
fn scripted(key: &str) -> Option<Answer> {
    let completion = |text: &str| Some(Answer::Completion(text.to_owned()));
    match key {
        "approve" => completion(r#"{"verdict": "approve", "reason": "fits the SOP"}"#),
        "reject" => completion("Decision: reject\nthe SOP covers restarts, not this"),
        "unsure" => completion(r#"{"verdict": "unsure", "reason": "cannot tell"}"#),
        "slow" => Some(Answer::After(
            Duration::from_secs(5),
            Box::new(Answer::Completion(r#"{"verdict": "approve"}"#.into())),
        )),
        "very-slow" => Some(Answer::After(
            Duration::from_secs(20),
            Box::new(Answer::Completion(r#"{"verdict": "approve"}"#.into())),
        )),
        "status-429" => Some(Answer::Status(429)),
        "status-500" => Some(Answer::Status(500)),
        _ => MALFORMED
            .iter()
            .chain(NOT_COMPLETIONS)
            .find(|(k, _)| *k == key)
            .map(|(k, text)| {
                if NOT_COMPLETIONS.iter().any(|(n, _)| n == k) {
                    Answer::Body((*text).to_owned())
                } else {
                    Answer::Completion((*text).to_owned())
                }
            }),
    }
}

/// Replies that are not one of the two accepted shapes: each is `unsure`.
const MALFORMED: &[(&str, &str)] = &[
    ("empty", ""),
    ("prose", "Looks fine to me, I would approve."),
    (
        "fenced",
        "```json\n{\"verdict\": \"approve\", \"reason\": \"ok\"}\n```",
    ),
    ("caveats", r#"{"verdict": "approve with caveats"}"#),
    ("unknown-verdict", r#"{"verdict": "allow"}"#),
    ("extra-key", r#"{"verdict": "approve", "confidence": 0.9}"#),
    (
        "key-twice",
        r#"{"verdict": "approve", "verdict": "approve"}"#,
    ),
    (
        "reason-not-a-string",
        r#"{"verdict": "approve", "reason": 5}"#,
    ),
    (
        "two-objects",
        r#"{"verdict": "approve"}{"verdict": "approve"}"#,
    ),
    ("second-decision", "Decision: approve\nDecision: approve"),
    (
        "verdict-in-reason",
        "Decision: approve\n{\"verdict\": \"approve\"}",
    ),
    ("decision-with-words", "Decision: approve, mostly"),
    // A Cyrillic `а` in `approve`.
    ("look-alike", "Decision: \u{0430}pprove"),
    ("truncated", r#"{"verdict": "appro"#),
];

/// Answers that are not chat completions: `malformed`.
const NOT_COMPLETIONS: &[(&str, &str)] = &[
    ("not-json", "not json at all"),
    ("no-choices", r#"{"choices": []}"#),
];

/// The `say:` key in a request's proposal (its reason, quoted as untrusted).
fn key_of(request: &Value) -> Option<String> {
    let user = request["messages"][1]["content"].as_str()?;
    let start = user.find("\"say:")? + "\"say:".len();
    let end = start + user[start..].find('"')?;
    Some(user[start..end].to_owned())
}

/// The app on `backend` with the fake provider behind three endpoints:
/// `local` (1 s timeout), `patient` (30 s) and `refused` (nothing listens).
struct Rig {
    app: TestApp,
    fake: FakeModel,
    config: Config,
    _db: Option<TestDatabase>,
}

/// A tenant and its keys.
struct Keys {
    name: String,
    admin: String,
    coordinator: String,
}

fn endpoint(name: &str, base_url: String, timeout: Duration) -> ModelEndpointSection {
    ModelEndpointSection {
        name: name.into(),
        base_url,
        model: "fake-model".into(),
        api_key_env: None,
        api_key_file: None,
        timeout,
        max_concurrency: 8.try_into().unwrap(),
        json_mode: true,
    }
}

/// A `say:first-hangs` proposal's first request hangs (past every test);
/// later ones approve.
fn script(first_hangs: Arc<AtomicUsize>) -> impl Fn(&Value) -> Answer + Send + Sync + 'static {
    move |request| match key_of(request).as_deref() {
        Some("first-hangs") if first_hangs.fetch_add(1, Ordering::SeqCst) == 0 => {
            Answer::After(Duration::from_secs(600), Box::new(Answer::Status(500)))
        }
        Some(key) => scripted(key).unwrap_or_else(|| scripted("approve").unwrap()),
        None => Answer::Status(400),
    }
}

impl Rig {
    /// The configuration of an app on `backend` with the fake's endpoints.
    async fn config(
        backend: Backend,
        fake: &FakeModel,
        dir: &std::path::Path,
    ) -> (Config, Option<TestDatabase>) {
        let mut config = test_config(dir);
        config.model.endpoints = vec![
            endpoint("local", fake.base_url(), Duration::from_secs(1)),
            endpoint("patient", fake.base_url(), Duration::from_secs(30)),
            endpoint("refused", refusing_base_url().await, Duration::from_secs(1)),
        ];
        let db = match backend {
            Backend::Sqlite => None,
            Backend::Postgres => {
                let db = TestDatabase::migrated().await;
                config.database.url = Some(db.app_url.clone());
                config.database.pool = 4;
                config.redis.url = Some(redis::url());
                config.redis.prefix = redis::prefix();
                config.outbox.poll = Duration::from_millis(20);
                Some(db)
            }
        };
        (config, db)
    }

    async fn start(backend: Backend) -> Rig {
        Rig::start_with(backend, Some(test_reviewers(2))).await
    }

    /// `reviewers` none: the API alone (the role `api`).
    async fn start_with(backend: Backend, reviewers: Option<ReviewerConfig>) -> Rig {
        let fake = FakeModel::start(script(Arc::default())).await;
        let dir = tempfile::tempdir().unwrap();
        let (config, db) = Rig::config(backend, &fake, dir.path()).await;
        let app = TestApp::from_config(config.clone(), dir, reviewers, |_| {}).await;
        Rig {
            app,
            fake,
            config,
            _db: db,
        }
    }

    /// `name` seeded (SOP-007, ONLINE targets; no parallel window and no
    /// breaker, so its proposals are decided on their own), with keys.
    async fn tenant(&self, name: &str) -> Keys {
        self.app.seed_reference(name).await;
        let store = &self.app.store;
        let mut policy = store.get_tenant(name).await.unwrap().unwrap().policy;
        policy.parallel_window_ms = 0;
        policy.breaker_threshold = 0;
        store.set_tenant_policy(name, policy).await.unwrap();
        Keys {
            name: name.to_owned(),
            admin: self.app.key(name, Role::Admin).await,
            coordinator: self.app.key(name, Role::Coordinator).await,
        }
    }

    /// A profile sending every proposal of the tenant to `endpoint`.
    async fn profile(
        &self,
        tenant: &Keys,
        endpoint: &str,
        on_unsure: OnUnsure,
        calls_per_minute: u32,
    ) {
        let profile = validate_profile(
            ModelProfileInput {
                id: "everything".into(),
                matcher: RouteMatch::default(),
                endpoint: endpoint.into(),
                on_unsure: on_unsure.as_str().into(),
                calls_per_minute,
            },
            &["local", "patient", "refused"],
        )
        .unwrap();
        self.app
            .store
            .put_model_profile(&tenant.name, &profile)
            .await
            .expect("the profile is put");
    }

    /// A route sending every proposal of the tenant to people.
    async fn route(&self, tenant: &Keys) {
        let route = validate_route(RouteInput {
            id: "people".into(),
            matcher: RouteMatch::default(),
            approvals_required: 1,
            approver_roles: Vec::new(),
            expires_after_ms: None,
            escalate_on: Vec::new(),
        })
        .unwrap();
        self.app
            .store
            .put_route(&tenant.name, &route)
            .await
            .expect("the route is put");
    }

    /// Submits a proposal whose reason asks the fake for `say` (and whose
    /// rollback plan is its own, so that no earlier rejection answers it).
    async fn submit(&self, tenant: &Keys, say: &str) -> String {
        self.submit_as(tenant, &tenant.coordinator, say).await
    }

    /// [`Rig::submit`] with `key`, on an ONLINE target of its own (so that
    /// no two overlap, and no earlier rejection answers it).
    async fn submit_as(&self, tenant: &Keys, key: &str, say: &str) -> String {
        let target = self.target(tenant).await;
        self.submit_spec(
            key,
            say,
            v1::ProposalSpec {
                target,
                ..valid_spec()
            },
        )
        .await
    }

    async fn submit_spec(&self, key: &str, say: &str, mut spec: v1::ProposalSpec) -> String {
        spec.reason = format!("say:{say}");
        self.app.submit_id(key, spec).await
    }

    async fn decided(&self, key: &str, id: &str) -> Proposal {
        self.app
            .await_decision(key, id, WAIT)
            .await
            .unwrap_or_else(|status| panic!("no decision for {id}: {status}"))
    }

    /// A new ONLINE production target of the tenant's.
    async fn target(&self, tenant: &Keys) -> String {
        let target = format!("node-{}", rand::random::<u32>());
        let mut labels = countersign_test_support::fixtures::production();
        labels.insert("cluster".into(), "eu-1".into());
        self.app
            .store
            .put_target(&tenant.name, &target, TargetStatus::Online, labels)
            .await
            .unwrap();
        target
    }

    /// Polls until the proposal leaves PENDING and REVIEWING: decided, or
    /// escalated (which `AwaitDecision` waits past).
    async fn settled(&self, key: &str, id: &str) -> Proposal {
        tokio::time::timeout(WAIT, async {
            loop {
                let p = self.app.get(key, id).await.unwrap();
                if !matches!(state(&p), ProposalState::Pending | ProposalState::Reviewing) {
                    return p;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("{id} was never reviewed"))
    }

    /// Submits and waits for the decision.
    async fn decide(&self, tenant: &Keys, say: &str) -> Proposal {
        let id = self.submit(tenant, say).await;
        self.decided(&tenant.coordinator, &id).await
    }

    /// Waits until the fake has a request for `say`.
    async fn until_asked(&self, say: &str) {
        tokio::time::timeout(WAIT, async {
            while self.asked(say) == 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("the model is asked");
    }

    /// A `first-hangs` proposal asked again after the first request was cut
    /// off: approved, with one terminal event.
    async fn approved_once_after_two_requests(&self, tenant: &Keys, id: &str) {
        let p = self.decided(&tenant.coordinator, id).await;
        assert_eq!(state(&p), ProposalState::Approved, "{:?}", p.decision);
        assert_eq!(self.asked("first-hangs"), 2, "reviewed again");
        let events = self.app.proposal_events(&tenant.name, id).await;
        let terminal = events.iter().filter(|e| e.kind.is_terminal()).count();
        assert_eq!(terminal, 1, "{events:?}");
    }

    /// Requests the fake received for `say`.
    fn asked(&self, say: &str) -> usize {
        self.fake
            .received()
            .iter()
            .filter(|r| key_of(&r.body).as_deref() == Some(say))
            .count()
    }
}

fn state(p: &Proposal) -> ProposalState {
    ProposalState::try_from(p.state).unwrap()
}

/// The decision's `model` gate: (passed, detail).
fn model_gate(p: &Proposal) -> (bool, String) {
    let d = p.decision.as_ref().expect("a decision");
    let gate = d
        .gates
        .iter()
        .find(|g| g.gate == "model")
        .unwrap_or_else(|| panic!("no model gate: {d:?}"));
    (gate.passed, gate.detail.clone())
}

async fn an_approving_answer_keeps_the_approval_and_the_decision_records_the_review(
    backend: Backend,
) {
    let rig = Rig::start(backend).await;
    let acme = rig.tenant("acme").await;
    rig.profile(&acme, "local", OnUnsure::Reject, 0).await;
    let p = rig.decide(&acme, "approve").await;
    assert_eq!(state(&p), ProposalState::Approved, "{:?}", p.decision);
    let d = p.decision.as_ref().unwrap();
    let names: Vec<&str> = d.gates.iter().map(|g| g.gate.as_str()).collect();
    assert_eq!(
        names,
        [
            "sop",
            "target_state",
            "no_parallel_operation",
            "rollback",
            "blast_radius",
            "model"
        ]
    );
    assert_eq!(model_gate(&p), (true, "approve: fits the SOP".into()));
    let review = d.model.as_ref().expect("the model review is recorded");
    assert_eq!(
        (review.profile_id.as_str(), review.endpoint.as_str()),
        ("everything", "local")
    );
    assert_eq!(
        (review.model.as_str(), review.verdict.as_str()),
        ("fake-model", "approve")
    );
    assert_eq!(
        (
            review.prompt_tokens,
            review.completion_tokens,
            review.cached_prompt_tokens
        ),
        (100, 10, 64)
    );
    // One request, with the facts: the tenant's SOP in the stable prefix,
    // the coordinator's words quoted as untrusted data.
    let received = rig.fake.received();
    assert_eq!(received.len(), 1);
    let system = received[0].body["messages"][0]["content"].as_str().unwrap();
    let user = received[0].body["messages"][1]["content"].as_str().unwrap();
    assert!(system.contains("SOP-007"), "{system}");
    assert!(
        user.contains("\"untrusted\"") && user.contains("say:approve"),
        "{user}"
    );
    assert_eq!(received[0].body["model"], "fake-model");
}

async fn a_rejecting_answer_rejects_and_names_the_model(backend: Backend) {
    let rig = Rig::start(backend).await;
    let acme = rig.tenant("acme").await;
    rig.profile(&acme, "local", OnUnsure::Escalate, 0).await;
    let p = rig.decide(&acme, "reject").await;
    assert_eq!(state(&p), ProposalState::Rejected);
    let d = p.decision.as_ref().unwrap();
    assert_eq!(d.missing_gates, ["model"]);
    assert!(
        d.reason
            .contains("model: reject: the SOP covers restarts, not this"),
        "{}",
        d.reason
    );
    assert_eq!(d.model.as_ref().unwrap().verdict, "reject");
}

async fn every_answer_that_is_not_a_verdict_rejects(backend: Backend) {
    let rig = Rig::start(backend).await;
    let acme = rig.tenant("acme").await;
    rig.profile(&acme, "local", OnUnsure::Reject, 0).await;
    let mut ids = Vec::new();
    for (key, _) in MALFORMED.iter().chain(NOT_COMPLETIONS) {
        ids.push((*key, rig.submit(&acme, key).await));
    }
    for (key, id) in ids {
        let p = rig.decided(&acme.coordinator, &id).await;
        assert_eq!(
            state(&p),
            ProposalState::Rejected,
            "{key}: {:?}",
            p.decision
        );
        let (passed, detail) = model_gate(&p);
        assert!(!passed, "{key}");
        let expected = if NOT_COMPLETIONS.iter().any(|(k, _)| *k == key) {
            "malformed"
        } else {
            "unsure"
        };
        assert!(detail.starts_with(expected), "{key}: {detail}");
        assert_eq!(
            p.decision.unwrap().model.unwrap().verdict,
            expected,
            "{key}"
        );
        assert_eq!(rig.asked(key), 1, "{key}");
    }
}

async fn a_slow_answer_429_500_and_a_refused_connection_reject_naming_the_failure(
    backend: Backend,
) {
    let rig = Rig::start(backend).await;
    let acme = rig.tenant("acme").await;
    rig.profile(&acme, "local", OnUnsure::Reject, 0).await;
    let slow = rig.submit(&acme, "slow").await;
    let too_many = rig.submit(&acme, "status-429").await;
    let failing = rig.submit(&acme, "status-500").await;
    for (id, failure) in [
        (slow, "timeout"),
        (too_many, "provider_error"),
        (failing, "provider_error"),
    ] {
        let p = rig.decided(&acme.coordinator, &id).await;
        assert_eq!(state(&p), ProposalState::Rejected, "{failure}");
        assert_eq!(model_gate(&p), (false, failure.to_owned()));
        assert_eq!(p.decision.unwrap().model.unwrap().verdict, failure);
    }
    // Another tenant whose profile names the endpoint where nothing listens.
    let globex = rig.tenant("globex").await;
    rig.profile(&globex, "refused", OnUnsure::Reject, 0).await;
    let p = rig.decide(&globex, "approve").await;
    assert_eq!(state(&p), ProposalState::Rejected);
    assert_eq!(model_gate(&p), (false, "provider_error".to_owned()));
    assert_eq!(rig.asked("approve"), 0, "nothing reached the fake");
}

async fn past_the_review_deadline_the_proposal_times_out(backend: Backend) {
    let mut reviewers = test_reviewers(2);
    reviewers.review_deadline = Duration::from_secs(1);
    let rig = Rig::start_with(backend, Some(reviewers)).await;
    let acme = rig.tenant("acme").await;
    // The endpoint would wait 30 s; the fake answers in 5 s; the review's
    // deadline is 1 s.
    rig.profile(&acme, "patient", OnUnsure::Reject, 0).await;
    let p = rig.decide(&acme, "slow").await;
    assert_eq!(state(&p), ProposalState::TimedOut, "{:?}", p.decision);
    let d = p.decision.unwrap();
    assert_eq!(d.missing_gates, ["review"]);
    assert_eq!(rig.asked("slow"), 1);
}

/// Where a proposal stands, most permissive first.
fn rank(state: ProposalState) -> u8 {
    match state {
        ProposalState::Approved => 2,
        ProposalState::Escalated => 1,
        _ => 0,
    }
}

async fn the_model_only_ever_makes_a_decision_stricter(backend: Backend) {
    let rig = Rig::start(backend).await;
    // Three tenants, one per gate outcome: every gate passes (the gates
    // approve); a gate fails (an unknown target: rejected); every gate passes
    // and a route sends it to people (escalated). Each with the same profile.
    let approves = rig.tenant("approves").await;
    let escalates = rig.tenant("escalates").await;
    rig.route(&escalates).await;
    let answers = [
        "approve",
        "reject",
        "unsure",
        "prose",
        "not-json",
        "status-500",
    ];
    let mut cases = Vec::new();
    for (keys, gates) in [
        (&approves, "approve"),
        (&approves, "reject"),
        (&escalates, "escalate"),
    ] {
        rig.profile(keys, "local", OnUnsure::Reject, 0).await;
        for answer in answers {
            let id = if gates == "reject" {
                let target = format!("no-such-node-{answer}");
                let spec = v1::ProposalSpec {
                    target,
                    ..valid_spec()
                };
                rig.submit_spec(&keys.coordinator, answer, spec).await
            } else {
                rig.submit(keys, answer).await
            };
            cases.push((keys, gates, answer, id));
        }
    }
    for (keys, gates, answer, id) in cases {
        let p = rig.settled(&keys.coordinator, &id).await;
        let got = state(&p);
        let before = match gates {
            "approve" => ProposalState::Approved,
            "escalate" => ProposalState::Escalated,
            _ => ProposalState::Rejected,
        };
        assert!(rank(got) <= rank(before), "{gates} × {answer}: {got:?}");
        // Only an approving answer keeps where the gates left it.
        let expected = match (gates, answer) {
            ("reject", _) => ProposalState::Rejected,
            (_, "approve") => before,
            _ => ProposalState::Rejected,
        };
        assert_eq!(got, expected, "{gates} × {answer}: {:?}", p.decision);
    }
    // A rejection by the gates is never put to the model.
    let asked_for_unknown_targets = rig
        .fake
        .received()
        .iter()
        .filter(|r| r.body.to_string().contains("no-such-node"))
        .count();
    assert_eq!(asked_for_unknown_targets, 0);
    assert_eq!(rig.fake.received().len(), 2 * answers.len());
}

async fn on_unsure_escalate_needs_a_route_and_reject_rejects(backend: Backend) {
    let rig = Rig::start(backend).await;
    let routed = rig.tenant("routed").await;
    rig.route(&routed).await;
    rig.profile(&routed, "local", OnUnsure::Escalate, 0).await;
    let unsure = rig.submit(&routed, "unsure").await;
    let failed = rig.submit(&routed, "status-500").await;
    let approved = rig.submit(&routed, "approve").await;
    for id in [&unsure, &failed, &approved] {
        let p = rig.settled(&routed.coordinator, id).await;
        assert_eq!(state(&p), ProposalState::Escalated, "{:?}", p.decision);
    }
    // The escalation carries the model's gate after the five.
    let escalation = rig
        .app
        .store
        .get_escalation("routed", &unsure)
        .await
        .unwrap()
        .expect("an escalation");
    let last = escalation.escalation.gates.last().unwrap();
    assert_eq!((last.gate.as_str(), last.passed), ("model", false));
    assert_eq!(last.detail, "unsure: cannot tell");
    let review = escalation
        .escalation
        .model
        .expect("the model review is kept");
    assert_eq!(review.verdict, "unsure");

    // Escalate without a route rejects.
    let unrouted = rig.tenant("unrouted").await;
    rig.profile(&unrouted, "local", OnUnsure::Escalate, 0).await;
    let p = rig.decide(&unrouted, "unsure").await;
    assert_eq!(state(&p), ProposalState::Rejected);
    // Reject with a route rejects.
    let strict = rig.tenant("strict").await;
    rig.route(&strict).await;
    rig.profile(&strict, "local", OnUnsure::Reject, 0).await;
    let p = rig.decide(&strict, "unsure").await;
    assert_eq!(state(&p), ProposalState::Rejected);
    assert_eq!(model_gate(&p), (false, "unsure: cannot tell".to_owned()));
}

async fn over_its_calls_per_minute_a_tenant_is_rejected_without_a_request(backend: Backend) {
    let rig = Rig::start(backend).await;
    let acme = rig.tenant("acme").await;
    rig.profile(&acme, "local", OnUnsure::Reject, 2).await;
    for _ in 0..2 {
        let p = rig.decide(&acme, "approve").await;
        assert_eq!(state(&p), ProposalState::Approved);
    }
    let p = rig.decide(&acme, "approve").await;
    assert_eq!(state(&p), ProposalState::Rejected);
    assert_eq!(model_gate(&p), (false, "over_budget".to_owned()));
    assert_eq!(rig.asked("approve"), 2, "no request over the budget");
    // Another tenant's calls are its own.
    let globex = rig.tenant("globex").await;
    rig.profile(&globex, "local", OnUnsure::Reject, 2).await;
    let p = rig.decide(&globex, "approve").await;
    assert_eq!(state(&p), ProposalState::Approved);
}

/// A reviewer pool of its own (another process's), with the rig's endpoints.
fn pool(rig: &Rig, queue: DynQueue) -> Reviewers {
    let mut config = test_reviewers(1);
    config.models = Models::new(rig.config.model.endpoints().unwrap()).unwrap();
    Reviewers::start(
        rig.app.store.clone(),
        queue,
        config,
        &CancellationToken::new(),
    )
}

async fn reviewers_in_two_processes_share_one_calls_per_minute(backend: Backend) {
    // The API alone; the reviewers of two processes are started here.
    let rig = Rig::start_with(backend, None).await;
    let acme = rig.tenant("acme").await;
    rig.profile(&acme, "local", OnUnsure::Reject, 3).await;
    let queue = queue_of(&rig).await;
    // The first process takes two of the tenant's three calls, and stops.
    let first = pool(&rig, queue.clone());
    for _ in 0..2 {
        let p = rig.decide(&acme, "approve").await;
        assert_eq!(state(&p), ProposalState::Approved, "{:?}", p.decision);
    }
    first.shutdown().await;
    // Two more processes, reviewing at once: one call is left between them.
    let (second, third) = (pool(&rig, queue.clone()), pool(&rig, queue));
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(rig.submit(&acme, "approve").await);
    }
    let mut states = Vec::new();
    for id in &ids {
        let p = rig.decided(&acme.coordinator, id).await;
        if state(&p) == ProposalState::Rejected {
            assert_eq!(model_gate(&p), (false, "over_budget".to_owned()));
        }
        states.push(state(&p));
    }
    let approved = states
        .iter()
        .filter(|s| **s == ProposalState::Approved)
        .count();
    assert_eq!(approved, 1, "{states:?}");
    assert_eq!(rig.asked("approve"), 3, "no request over the cap");
    second.shutdown().await;
    third.shutdown().await;
}

async fn the_prompt_prefix_is_the_tenants_whole_catalogue_whatever_the_action(backend: Backend) {
    let rig = Rig::start(backend).await;
    let acme = rig.tenant("acme").await;
    // Beside SOP-007 (host_restart_service): one for another action that
    // is proposed, and one for an action nobody proposes.
    for (id, action) in [("SOP-100", "host_reboot"), ("SOP-001", "dns_flush")] {
        let sop = countersign_store::SopInput {
            id: id.into(),
            action: action.into(),
            ..countersign_test_support::fixtures::sop()
        };
        rig.app.store.put_sop("acme", sop).await.unwrap();
    }
    rig.profile(&acme, "local", OnUnsure::Reject, 0).await;
    let restart = rig.decide(&acme, "approve").await;
    let reboot_spec = v1::ProposalSpec {
        action: "host_reboot".into(),
        target: rig.target(&acme).await,
        ..valid_spec()
    };
    let reboot = rig
        .submit_spec(&acme.coordinator, "approve", reboot_spec)
        .await;
    let reboot = rig.decided(&acme.coordinator, &reboot).await;
    for p in [&restart, &reboot] {
        assert_eq!(state(p), ProposalState::Approved, "{:?}", p.decision);
    }
    let received = rig.fake.received();
    assert_eq!(received.len(), 2);
    let message = |i: usize, m: usize| {
        received[i].body["messages"][m]["content"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let (first, second) = (message(0, 0), message(1, 0));
    // Byte for byte: a provider's prompt cache serves the second.
    assert!(
        first == second,
        "the prefixes differ:\n{first}\n---\n{second}"
    );
    let at = |id: &str| first.find(id).unwrap_or_else(|| panic!("{id}: {first}"));
    assert!(at("SOP-001") < at("SOP-007") && at("SOP-007") < at("SOP-100"));
    // The proposal is in the suffix only.
    assert!(!first.contains("say:approve"));
    assert!(message(1, 1).contains("host_reboot") && !message(0, 1).contains("host_reboot"));
}

async fn the_model_review_is_chained_in_the_decisions_audit_record(backend: Backend) {
    let rig = Rig::start(backend).await;
    let acme = rig.tenant("acme").await;
    rig.profile(&acme, "local", OnUnsure::Reject, 0).await;
    let auditor = rig.app.key("acme", Role::Auditor).await;
    let id = rig.submit(&acme, "reject").await;
    rig.decided(&acme.coordinator, &id).await;
    let mut audit = v1::audit_service_client::AuditServiceClient::with_interceptor(
        rig.app.channel().await,
        countersign_proto::client::BearerAuth::new(&auditor).unwrap(),
    );
    let entry = tokio::time::timeout(WAIT, async {
        loop {
            let found = audit
                .get_decision(v1::GetDecisionRequest {
                    proposal_id: id.clone(),
                })
                .await;
            match found {
                Ok(entry) => return entry.into_inner(),
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    })
    .await
    .expect("the decision is logged");
    let record: Value = serde_json::from_str(&entry.record_json).unwrap();
    assert_eq!(record["model"]["verdict"], "reject", "{record}");
    assert_eq!(record["model"]["model"], "fake-model");
    assert_eq!(record["model"]["usage"]["cached_prompt"], 64);
    let review = entry
        .decision
        .unwrap()
        .model
        .expect("the review, for people");
    assert_eq!(review.verdict, "reject");
    let verified = audit
        .verify_log(v1::VerifyLogRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(verified.ok, "{verified:?}");
}

/// Everything the backend stores, as text (SQLite: every file of the data
/// directory; PostgreSQL: every row of every table): where a key would show
/// if anything stored it.
async fn every_stored_byte(rig: &Rig) -> String {
    match &rig._db {
        None => {
            let mut all = String::new();
            for file in std::fs::read_dir(rig.app.data_dir()).unwrap() {
                let path = file.unwrap().path();
                if path.is_file() {
                    all.push_str(&String::from_utf8_lossy(&std::fs::read(path).unwrap()));
                }
            }
            all
        }
        Some(db) => {
            use sqlx::{Connection, Row};
            let mut conn = db.superuser_connection().await;
            let tables: Vec<String> = sqlx::query_scalar(
                "SELECT quote_ident(table_schema) || '.' || quote_ident(table_name)
                 FROM information_schema.tables
                 WHERE table_type = 'BASE TABLE'
                   AND table_schema NOT IN ('pg_catalog', 'information_schema')",
            )
            .fetch_all(&mut conn)
            .await
            .unwrap();
            let mut all = String::new();
            for table in tables {
                let rows = sqlx::query(&format!("SELECT row_to_json(t)::text FROM {table} t"))
                    .fetch_all(&mut conn)
                    .await
                    .unwrap();
                for row in rows {
                    all.push_str(&row.get::<String, _>(0));
                }
            }
            conn.close().await.unwrap();
            all
        }
    }
}

async fn an_endpoints_key_is_sent_to_it_alone_and_never_stored(backend: Backend) {
    const KEY: &str = "sk-never-stored-5e1f";
    let fake = FakeModel::start(script(Arc::default())).await;
    // The key's file outside the data directory, which is scanned below.
    let secrets = tempfile::tempdir().unwrap();
    let key_file = secrets.path().join("model.key");
    std::fs::write(&key_file, format!("{KEY}\n")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (mut config, db) = Rig::config(backend, &fake, dir.path()).await;
    config.model.endpoints.push(ModelEndpointSection {
        api_key_file: Some(key_file),
        ..endpoint("keyed", fake.base_url(), Duration::from_secs(5))
    });
    let app = TestApp::from_config(config.clone(), dir, Some(test_reviewers(2)), |_| {}).await;
    let rig = Rig {
        app,
        fake,
        config,
        _db: db,
    };
    let acme = rig.tenant("acme").await;
    let profile = validate_profile(
        ModelProfileInput {
            id: "keyed".into(),
            endpoint: "keyed".into(),
            ..Default::default()
        },
        &["keyed"],
    )
    .unwrap();
    rig.app
        .store
        .put_model_profile("acme", &profile)
        .await
        .unwrap();
    let p = rig.decide(&acme, "approve").await;
    assert_eq!(state(&p), ProposalState::Approved, "{:?}", p.decision);
    let received = rig.fake.received();
    assert_eq!(
        received[0].authorization.as_deref(),
        Some(format!("Bearer {KEY}").as_str()),
        "the key goes to its endpoint, in the header"
    );
    assert!(!received[0].body.to_string().contains(KEY));
    let shown = format!("{p:?}");
    assert!(!shown.contains(KEY), "{shown}");
    let stored = every_stored_byte(&rig).await;
    assert!(
        stored.contains("keyed"),
        "the scan reads the profile's rows"
    );
    assert!(!stored.contains(KEY), "the key is in the database");
}

async fn an_agent_credential_sees_neither_the_model_gate_nor_the_review(backend: Backend) {
    let rig = Rig::start(backend).await;
    let acme = rig.tenant("acme").await;
    rig.profile(&acme, "local", OnUnsure::Reject, 0).await;
    let agent = rig.app.agent_key("acme", Role::Coordinator).await;
    for say in ["reject", "approve"] {
        let id = rig.submit_as(&acme, &agent, say).await;
        let seen = rig.decided(&agent, &id).await;
        let d = seen.decision.expect("a decision");
        assert!(
            d.gates.is_empty() && d.reason.is_empty() && d.summary.is_empty(),
            "{d:?}"
        );
        assert!(d.model.is_none(), "{d:?}");
        // People see it all.
        let full = rig.app.get(&acme.admin, &id).await.unwrap();
        assert!(full.decision.unwrap().model.is_some());
    }
}

async fn a_tenant_without_a_profile_is_untouched(backend: Backend) {
    let rig = Rig::start(backend).await;
    let acme = rig.tenant("acme").await;
    rig.profile(&acme, "local", OnUnsure::Reject, 0).await;
    let plain = rig.tenant("plain").await;
    let p = rig.decide(&plain, "reject").await;
    assert_eq!(state(&p), ProposalState::Approved);
    let d = p.decision.unwrap();
    assert!(d.gates.iter().all(|g| g.gate != "model"), "{d:?}");
    assert!(d.model.is_none());
    assert!(
        rig.fake.received().is_empty(),
        "no request reached the fake"
    );
}

/// The queue the app's reviewers would use: its embedded one, or Redis under
/// the app's prefix.
async fn queue_of(rig: &Rig) -> DynQueue {
    match &rig.config.redis.url {
        None => rig.app.queue(),
        Some(_) => Arc::new(redis::queue_at(&rig.config.redis.prefix).await),
    }
}

async fn a_review_cut_off_mid_call_is_reviewed_again_and_decided_once(backend: Backend) {
    // The API alone; the reviewers are started here, and the first pool dies
    // while the model has the proposal's request.
    let rig = Rig::start_with(backend, None).await;
    let acme = rig.tenant("acme").await;
    // `patient` waits 30 s: the first request hangs past the crash.
    rig.profile(&acme, "patient", OnUnsure::Reject, 0).await;
    let mut config = test_reviewers(1);
    config.lease = Duration::from_millis(600);
    config.models = Models::new(rig.config.model.endpoints().unwrap()).unwrap();
    let queue = queue_of(&rig).await;
    let id = rig.submit(&acme, "first-hangs").await;
    let first = Reviewers::start(
        rig.app.store.clone(),
        queue.clone(),
        config.clone(),
        &CancellationToken::new(),
    );
    rig.until_asked("first-hangs").await;
    // Dropped, its tasks are aborted mid-call: nothing recorded, nothing
    // acked or given back; the lease runs out.
    drop(first);
    let second = Reviewers::start(
        rig.app.store.clone(),
        queue,
        config,
        &CancellationToken::new(),
    );
    rig.approved_once_after_two_requests(&acme, &id).await;
    second.shutdown().await;
}

async fn a_review_waiting_at_shutdown_gives_its_lease_back_and_is_decided_after_the_restart(
    backend: Backend,
) {
    let fake = FakeModel::start(script(Arc::default())).await;
    let dir = tempfile::tempdir().unwrap();
    let (config, _db) = Rig::config(backend, &fake, dir.path()).await;
    // A lease longer than the test: only a lease given back is leased again.
    let mut reviewers = test_reviewers(1);
    reviewers.lease = Duration::from_secs(600);
    let app = TestApp::from_config(config.clone(), dir, Some(reviewers.clone()), |_| {}).await;
    let rig = Rig {
        app,
        fake,
        config,
        _db,
    };
    let acme = rig.tenant("acme").await;
    rig.profile(&acme, "patient", OnUnsure::Reject, 0).await;
    let id = rig.submit(&acme, "first-hangs").await;
    rig.until_asked("first-hangs").await;
    let Rig {
        app,
        fake,
        config,
        _db,
    } = rig;
    // Stopped as SIGTERM stops it, while the model has the request.
    let dir = app.stop().await;
    let app = TestApp::from_config(config.clone(), dir, Some(reviewers), |_| {}).await;
    let rig = Rig {
        app,
        fake,
        config,
        _db,
    };
    rig.approved_once_after_two_requests(&acme, &id).await;
}

async fn a_model_slower_than_the_lease_is_asked_once(backend: Backend) {
    let mut reviewers = test_reviewers(2);
    reviewers.lease = Duration::from_millis(600);
    let rig = Rig::start_with(backend, Some(reviewers)).await;
    let acme = rig.tenant("acme").await;
    // The answer takes 5 s, past eight leases: the review keeps its lease,
    // so no other worker takes the proposal and asks again.
    rig.profile(&acme, "patient", OnUnsure::Reject, 0).await;
    let p = rig.decide(&acme, "slow").await;
    assert_eq!(state(&p), ProposalState::Approved, "{:?}", p.decision);
    assert_eq!(rig.asked("slow"), 1);
}

async fn a_slow_model_holds_up_only_the_proposals_it_reviews(backend: Backend) {
    // One worker: a review that waited for the model in the batch would hold
    // up everything behind it.
    let mut reviewers = test_reviewers(1);
    reviewers.express_workers = 0;
    let rig = Rig::start_with(backend, Some(reviewers)).await;
    let acme = rig.tenant("acme").await;
    rig.profile(&acme, "patient", OnUnsure::Reject, 0).await;
    let slow = rig.submit(&acme, "very-slow").await;
    rig.until_asked("very-slow").await;
    // A gate-only tenant, and another proposal of the same tenant.
    let plain = rig.tenant("plain").await;
    let p = rig.decide(&plain, "approve").await;
    assert_eq!(state(&p), ProposalState::Approved);
    let p = rig.decide(&acme, "approve").await;
    assert_eq!(state(&p), ProposalState::Approved);
    let waiting = rig.app.get(&acme.coordinator, &slow).await.unwrap();
    assert_eq!(
        state(&waiting),
        ProposalState::Reviewing,
        "still with the model"
    );
}

async fn a_model_verdict_answers_retries_from_the_cache_and_a_model_failure_does_not(
    backend: Backend,
) {
    let rig = Rig::start(backend).await;
    let acme = rig.tenant("acme").await;
    rig.profile(&acme, "local", OnUnsure::Reject, 0).await;
    let oncall = rig.app.key("acme", Role::Oncall).await;
    for (first, suppressed) in [("status-500", false), ("reject", true)] {
        // Watched before the submission, so that its rejection is seen.
        let mut stream = rig
            .app
            .watch(
                &oncall,
                v1::WatchRequest {
                    terminal_only: true,
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        let spec = v1::ProposalSpec {
            target: rig.target(&acme).await,
            ..valid_spec()
        };
        let id = rig
            .submit_spec(&acme.coordinator, first, spec.clone())
            .await;
        crate::suppression::until_rejected(&mut stream, &id).await;
        // The same call, reworded.
        let again = v1::ProposalSpec {
            reason: "say:approve".into(),
            ..spec
        };
        let answer = rig.app.submit(&acme.coordinator, again).await.unwrap();
        assert_eq!(answer.suppressed, suppressed, "after {first}");
        let proposal = answer.proposal.unwrap();
        let p = rig.decided(&acme.coordinator, &proposal.id).await;
        let expected = if suppressed {
            ProposalState::Rejected
        } else {
            ProposalState::Approved
        };
        assert_eq!(state(&p), expected, "after {first}");
    }
    // Only the retry after the failure reached the model.
    assert_eq!(rig.asked("approve"), 1);
}
