//! The model reviewer's stage. After the gates (and routes), a proposal the
//! gates would approve, or that a route sends to people, and that one of the
//! tenant's model profiles matches, is asked of a model: one request, in a
//! task of its own, so that the batch it came in is recorded without waiting
//! for it and a slow model delays only the proposals it reviews. The task
//! keeps the proposal's lease while it waits and applies what the answer
//! does (`domain::model::after_model`: only ever stricter); the process's
//! recorder records the decisions and escalations of the reviews that
//! finished together (or within `RECORD_LINGER` of the first), whichever
//! worker asked, in one transaction each and settles their leases. The
//! review's deadline still applies: past it the proposal is TIMED_OUT.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use countersign_domain::{
    Decision, Millis, Proposal,
    escalation::{Escalation, Route},
    gates::{GateSpec, ReviewFacts, Verdict},
    model::{
        Before, ModelOutcome, ModelProfile, ModelReview, Prompt, ProposalFacts, Then, after_model,
        profile_for, prompt,
    },
    review::{self, ReviewStamp},
};
use countersign_model::{Failure, Models, Review, TokenUsage};
use countersign_queue::{DynQueue, Lease};
use countersign_store::{ModelCalls, StoreError};
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;

use crate::worker::{Concluded, Step, Worker, now_ms};

/// Model reviews waiting or in flight per request the endpoints may have in
/// flight at once: beyond it, the shared workers lease nothing new.
const BACKLOG_PER_TURN: usize = 4;

/// The least bound on waiting model reviews, whatever the endpoints allow.
const MIN_BACKLOG: usize = 64;

/// Model reviews' results recorded in one transaction at most.
const RECORD_GROUP: usize = 256;

/// How long the recorder waits, after a group's first answer, for others to
/// share its transaction: under a hundredth of a fast model's answer, for a
/// third fewer commits and a fifth less server CPU a model-reviewed
/// decision, on the writer every tenant shares (BENCHMARKS.md, "the
/// recorder's linger").
const RECORD_LINGER: Duration = Duration::from_micros(1500);

/// What the process's workers share of the model reviewer: the endpoints,
/// where each tenant's calls per minute are counted (the store, shared by
/// every process), and the reviews waiting for a model.
pub(crate) struct ModelStage {
    models: Models,
    calls: Arc<dyn ModelCalls>,
    backlog: AtomicUsize,
    room: Notify,
    bound: usize,
}

/// One proposal to be asked of a model: what the gates found and what the
/// answer is applied to.
#[derive(Debug)]
pub(crate) struct Ask {
    pub profile: ModelProfile,
    pub prompt: Prompt,
    /// The gates' verdict.
    pub verdict: Verdict,
    /// The route that sends the proposal to people, where one applies.
    pub route: Option<Route>,
    /// The spec as the gates saw it, for the decision.
    pub spec: GateSpec,
    /// When its review began (REVIEWING): the deadline runs from here.
    pub started_at: Millis,
}

/// Counts a review while it waits for a model; frees its room when dropped.
pub(crate) struct Waiting(Arc<ModelStage>);

/// A model review's result on its way to the process's recorder, with the
/// lease it settles; it counts as waiting until recorded.
pub(crate) struct Answered {
    lease: Lease,
    span: Option<tracing::Span>,
    concluded: Concluded,
    waiting: Waiting,
}

/// Where the process's model reviews send their results: its recorder.
pub(crate) type Answers = mpsc::UnboundedSender<Answered>;

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.backlog.fetch_sub(1, Ordering::SeqCst);
        self.0.room.notify_waiters();
    }
}

impl ModelStage {
    pub(crate) fn new(models: Models, calls: Arc<dyn ModelCalls>) -> ModelStage {
        ModelStage {
            bound: (models.capacity() * BACKLOG_PER_TURN).max(MIN_BACKLOG),
            models,
            calls,
            backlog: AtomicUsize::new(0),
            room: Notify::new(),
        }
    }

    /// Counts one more review waiting for a model, until the guard drops.
    pub(crate) fn enter(self: &Arc<Self>) -> Waiting {
        self.backlog.fetch_add(1, Ordering::SeqCst);
        Waiting(self.clone())
    }

    /// Resolves once fewer reviews wait for a model than the bound (or at
    /// `stop`).
    pub(crate) async fn room(&self, stop: &CancellationToken) {
        loop {
            let freed = self.room.notified();
            tokio::pin!(freed);
            // Registered before the count is read: a review that ends
            // between the two still wakes this wait.
            freed.as_mut().enable();
            if self.backlog.load(Ordering::SeqCst) < self.bound {
                return;
            }
            tokio::select! {
                () = stop.cancelled() => return,
                () = freed => {}
            }
        }
    }

    /// Asks the profile's endpoint about one of `tenant`'s proposals, within
    /// the tenant's calls per minute, counted in the store for every process
    /// (over them: `over_budget`, and no request is sent). Every failure of
    /// the endpoint is an outcome; `Err` only when the store could not count
    /// the call (no request is sent: the review is tried again). Counted by
    /// tenant, endpoint and verdict, with its latency and tokens.
    pub(crate) async fn review(
        &self,
        tenant: &str,
        profile: &ModelProfile,
        prompt: &Prompt,
    ) -> Result<Review, StoreError> {
        let per_minute = profile.calls_per_minute;
        let taken = self
            .calls
            .take_model_call(tenant, now_ms(), per_minute)
            .await?;
        let review = if taken {
            let review = self.models.review(&profile.endpoint, prompt).await;
            metrics::histogram!("countersign_model_call_duration_seconds", "endpoint" => review.endpoint.clone())
                .record(review.latency.as_secs_f64());
            review
        } else {
            unanswered(&profile.endpoint, Failure::OverBudget)
        };
        count(
            tenant,
            &review.endpoint,
            review.outcome.verdict(),
            review.usage,
        );
        Ok(review)
    }
}

/// A review that sent no request, or whose answer did not come in time.
fn unanswered(endpoint: &str, failure: Failure) -> Review {
    Review {
        endpoint: endpoint.to_owned(),
        model: String::new(),
        outcome: ModelOutcome::Failed(failure),
        usage: TokenUsage::default(),
        latency: Duration::ZERO,
    }
}

/// The calls and token counters of one review.
fn count(tenant: &str, endpoint: &str, verdict: &'static str, usage: TokenUsage) {
    let (tenant, endpoint) = (tenant.to_owned(), endpoint.to_owned());
    metrics::counter!("countersign_model_calls_total", "tenant" => tenant.clone(), "endpoint" => endpoint.clone(), "verdict" => verdict)
        .increment(1);
    for (kind, tokens) in [
        ("prompt", usage.prompt),
        ("completion", usage.completion),
        ("cached_prompt", usage.cached_prompt),
    ] {
        if tokens > 0 {
            metrics::counter!("countersign_model_tokens_total", "tenant" => tenant.clone(), "endpoint" => endpoint.clone(), "kind" => kind)
                .increment(tokens);
        }
    }
}

/// The tenant's profile that reviews the proposal, if any matches it
/// (`domain::model::profile_for`).
pub(crate) fn profile_of(facts: &ReviewFacts) -> Option<ModelProfile> {
    let none = Default::default();
    let labels = facts.target.as_ref().map_or(&none, |t| &t.labels);
    profile_for(&facts.model_profiles, &facts.spec, labels).cloned()
}

/// The request for one proposal: the gates' verdict and the facts they saw,
/// with the coordinator's words as untrusted data, and the tenant's whole
/// SOP catalogue in the stable prefix (the same for every proposal of the
/// tenant, whatever its action, while its SOPs stay the same).
pub(crate) fn prompt_for(proposal: &Proposal, facts: &ReviewFacts, verdict: &Verdict) -> Prompt {
    let none = Default::default();
    let spec = &proposal.spec;
    prompt(
        &facts.sop_catalogue,
        &ProposalFacts {
            action: &spec.action,
            class: spec.class,
            target: &spec.target,
            target_status: facts.target.as_ref().map(|t| t.status),
            target_labels: facts.target.as_ref().map_or(&none, |t| &t.labels),
            blast_radius: spec.blast_radius,
            parameters: &spec.parameters,
            sop: verdict.sop.as_ref(),
            gates: &verdict.gates,
            reason: &spec.reason,
            context_summary: &spec.context_summary,
        },
    )
}

/// Where the model's answer leaves the proposal: the `model` gate reported
/// after the five, then decided as the gates and it say (the only approval
/// is `review::decide`'s, which needs the five and the model's gate passed),
/// or sent to people under the route; either keeps the review's record.
/// Nothing the model says approves what the gates did not.
pub(crate) fn conclude(ask: &Ask, review: &Review, stamp: ReviewStamp) -> Concluded {
    let record = ModelReview::new(
        &ask.profile.id,
        &review.endpoint,
        &review.model,
        &review.outcome,
        review.latency.as_millis() as u64,
        review.usage,
    );
    let before = match ask.route {
        Some(_) => Before::Escalate,
        None => Before::Approve,
    };
    let step = after_model(
        before,
        &review.outcome,
        ask.profile.on_unsure,
        ask.route.is_some(),
    );
    let verdict = ask.verdict.with_model(step.gate);
    match (step.then, &ask.route) {
        (Then::Escalate, Some(route)) => Concluded::Escalated(Escalation {
            model: Some(record),
            ..Escalation::open(route, &verdict, &stamp)
        }),
        _ => Concluded::Decided(Decision {
            model: Some(record),
            ..review::decide(&verdict, &ask.spec, stamp)
        }),
    }
}

/// Extends `lease` by `by` every third of it, for as long as it is polled;
/// a lease found lost is left (another worker reviews the proposal again,
/// and the store records one decision).
async fn hold(queue: &DynQueue, lease: &Lease, by: Duration) {
    let every = (by / 3).max(Duration::from_millis(10));
    loop {
        tokio::time::sleep(every).await;
        match queue.extend(lease, by).await {
            Ok(true) => {}
            Ok(false) => {
                tracing::warn!(proposal = %lease.proposal_id, "lease lost while the model reviews");
                return std::future::pending().await;
            }
            Err(error) => {
                tracing::warn!(proposal = %lease.proposal_id, %error, "lease not extended; trying again")
            }
        }
    }
}

impl Worker {
    /// One proposal's model review, as a task of its own: asks the model
    /// (keeping the lease while it waits, bounded by the review's
    /// deadline) and hands what the answer leaves to the process's recorder
    /// ([`Worker::record_answers`]). At `stop` it gives the lease back
    /// unreviewed. `waiting` counts it among the reviews waiting for a model
    /// until it is recorded.
    pub(crate) async fn review_by_model(
        self: Arc<Self>,
        (lease, span): (Lease, Option<tracing::Span>),
        ask: Ask,
        (waiting, answers): (Waiting, Answers),
        stop: CancellationToken,
    ) {
        let deadline_ms = self.config.review_deadline.as_millis() as u64;
        let deadline = ask.started_at + deadline_ms as Millis;
        let left = Duration::from_millis((deadline - now_ms()).max(0) as u64);
        let asked = async {
            tokio::select! {
                review = self.model.review(&lease.tenant, &ask.profile, &ask.prompt) => Some(review),
                () = hold(&self.queue, &lease, self.config.lease) => None,
                () = tokio::time::sleep(left) => None,
            }
        };
        let answered = tokio::select! {
            () = stop.cancelled() => {
                if let Err(error) = self.queue.release(&lease, Duration::ZERO).await {
                    tracing::warn!(proposal = %lease.proposal_id, %error, "lease not given back; it expires");
                }
                return;
            }
            answered = asked => answered,
        };
        let stamp = self.stamp(ask.started_at);
        let concluded = match answered {
            Some(Ok(review)) if now_ms() < deadline => conclude(&ask, &review, stamp),
            Some(Ok(_)) => Concluded::Decided(review::timed_out(deadline_ms, stamp)),
            Some(Err(error)) => {
                // The tenant's calls could not be counted: no request was
                // sent; the review is tried again (the attempt counts).
                tracing::warn!(proposal = %lease.proposal_id, %error, "model call not counted; will retry");
                metrics::counter!("countersign_review_retries_total").increment(1);
                if let Err(error) = self.queue.release(&lease, self.config.retry_delay).await {
                    tracing::warn!(proposal = %lease.proposal_id, %error, "lease not given back; it expires");
                }
                return;
            }
            None => {
                // Cut off by the review's deadline: counted as a timeout.
                let endpoint = &ask.profile.endpoint;
                count(
                    &lease.tenant,
                    endpoint,
                    Failure::Timeout.as_str(),
                    TokenUsage::default(),
                );
                Concluded::Decided(review::timed_out(deadline_ms, stamp))
            }
        };
        // The recorder outlives every review (it ends when the last sender goes).
        let _ = answers.send(Answered {
            lease,
            span,
            concluded,
            waiting,
        });
    }

    /// Records model reviews' results as they come: what finished while the
    /// last group was being written goes in the next, one `record_decisions`
    /// and one `open_escalations` per group, its leases settled together.
    /// Ends when every sender is gone and the last group is recorded.
    pub(crate) async fn record_answers(
        self: Arc<Self>,
        mut answers: mpsc::UnboundedReceiver<Answered>,
    ) {
        let mut group = Vec::new();
        while answers.recv_many(&mut group, RECORD_GROUP).await > 0 {
            // The answers to one wave of requests come back spread over a
            // few milliseconds: the rest of them join this group rather than
            // each paying a transaction (and its sync) of its own.
            let until = tokio::time::Instant::now() + RECORD_LINGER;
            while group.len() < RECORD_GROUP {
                let room = RECORD_GROUP - group.len();
                match tokio::time::timeout_at(until, answers.recv_many(&mut group, room)).await {
                    Ok(n) if n > 0 => {}
                    _ => break,
                }
            }
            let mut leases = Vec::with_capacity(group.len());
            let mut spans = Vec::with_capacity(group.len());
            // Counted as waiting until recorded.
            let mut waiting = Vec::with_capacity(group.len());
            let (mut decided, mut escalating) = (Vec::new(), Vec::new());
            for (i, answered) in group.drain(..).enumerate() {
                leases.push(answered.lease);
                spans.push(answered.span);
                waiting.push(answered.waiting);
                match answered.concluded {
                    Concluded::Decided(decision) => decided.push((i, decision, Step::Done)),
                    Concluded::Escalated(escalation) => escalating.push((i, escalation)),
                }
            }
            let mut steps = vec![None; leases.len()];
            self.record(&leases, &spans, decided, escalating, &mut steps)
                .await;
            // A lease given back here waits for a worker's next fetch (at
            // the latest, its idle poll).
            self.settle(&leases, steps).await;
            drop(waiting);
        }
    }
}

#[cfg(test)]
mod tests {
    use countersign_domain::{
        BlastRadius, DecisionOutcome, OperationClass,
        decision::GateResult,
        escalation::{RouteInput, RouteMatch, validate_route},
        gates::{GATES, MODEL, SOP},
        model::{ModelProfileInput, OnUnsure, parse_reply, validate_profile},
    };
    use countersign_model::{ApiKey, EndpointConfig};
    use countersign_store::{EmbeddedQueue, NewProposal, Proposals, Tenants};
    use countersign_test_support::{
        fake_model::{Answer, FakeModel},
        fixtures,
        sqlite::SqliteDatabase,
    };
    use futures::FutureExt;

    use super::*;

    fn models(base_url: String) -> Models {
        Models::new(vec![EndpointConfig {
            name: "local".into(),
            base_url,
            model: "fake".into(),
            api_key: ApiKey::None,
            timeout: Duration::from_secs(10),
            max_concurrency: 4,
            json_mode: true,
        }])
        .unwrap()
    }

    fn profile(on_unsure: OnUnsure, calls_per_minute: u32) -> ModelProfile {
        let mut profile = validate_profile(
            ModelProfileInput {
                id: "all".into(),
                endpoint: "local".into(),
                calls_per_minute,
                ..Default::default()
            },
            &["local"],
        )
        .unwrap();
        profile.on_unsure = on_unsure;
        profile
    }

    fn prompt() -> Prompt {
        Prompt {
            system: "instructions".into(),
            user: "one proposal".into(),
        }
    }

    /// The five gates, `sop` failed or not.
    fn verdict(sop_passed: bool) -> Verdict {
        Verdict {
            gates: GATES
                .iter()
                .map(|gate| GateResult {
                    gate: (*gate).to_owned(),
                    passed: *gate != SOP || sop_passed,
                    detail: "checked".into(),
                })
                .collect(),
            sop: None,
            rollback_path: None,
        }
    }

    fn route() -> Route {
        validate_route(RouteInput {
            id: "people".into(),
            matcher: RouteMatch::default(),
            approvals_required: 1,
            approver_roles: Vec::new(),
            expires_after_ms: Some(60_000),
            escalate_on: vec![SOP.into()],
        })
        .unwrap()
    }

    fn ask(sop_passed: bool, route: Option<Route>, on_unsure: OnUnsure) -> Ask {
        Ask {
            profile: profile(on_unsure, 0),
            prompt: prompt(),
            verdict: verdict(sop_passed),
            route,
            spec: GateSpec {
                action: "host_restart".into(),
                class: OperationClass::Write,
                target: "node-01".into(),
                blast_radius: BlastRadius::SingleDevice,
                rollback_plan: String::new(),
                force_approve_no_sop: false,
            },
            started_at: 0,
        }
    }

    fn answered(text: &str) -> Review {
        Review {
            endpoint: "local".into(),
            model: "fake".into(),
            outcome: ModelOutcome::Replied(parse_reply(text)),
            usage: TokenUsage::default(),
            latency: Duration::from_millis(5),
        }
    }

    fn stamp() -> ReviewStamp {
        ReviewStamp {
            reviewer: "w".into(),
            decided_at: 1,
            latency_ms: 1,
        }
    }

    /// What `conclude` leaves: the outcome (or "escalated") and the model
    /// gate as reported.
    fn concluded(ask: &Ask, review: &Review) -> (String, GateResult) {
        match conclude(ask, review, stamp()) {
            Concluded::Decided(d) => (
                d.outcome.as_str().to_owned(),
                d.gates.last().unwrap().clone(),
            ),
            Concluded::Escalated(e) => ("escalated".into(), e.gates.last().unwrap().clone()),
        }
    }

    #[test]
    fn only_an_approving_answer_keeps_an_approval_and_only_a_route_escalates() {
        let approve = answered(r#"{"verdict": "approve", "reason": "fits"}"#);
        let reject = answered("Decision: reject\nnot what the SOP covers");
        let unsure = answered("approve with caveats");
        let failed = |failure| Review {
            outcome: ModelOutcome::Failed(failure),
            ..answered("")
        };
        let approving = ask(true, None, OnUnsure::Escalate);
        let (outcome, gate) = concluded(&approving, &approve);
        assert_eq!((outcome.as_str(), gate.passed), ("approve", true));
        let Concluded::Decided(decision) = conclude(&approving, &approve, stamp()) else {
            panic!("decided")
        };
        let record = decision.model.expect("the review is recorded");
        assert_eq!(
            (
                record.profile_id.as_str(),
                record.endpoint.as_str(),
                record.verdict.as_str()
            ),
            ("all", "local", "approve")
        );
        let escalated = ask(true, Some(route()), OnUnsure::Reject);
        let Concluded::Escalated(escalation) = conclude(&escalated, &approve, stamp()) else {
            panic!("escalated")
        };
        assert_eq!(escalation.model.expect("kept").verdict, "approve");
        assert_eq!(
            (gate.gate.as_str(), gate.detail.as_str()),
            (MODEL, "approve: fits")
        );
        for review in [
            &reject,
            &unsure,
            &failed(Failure::Timeout),
            &failed(Failure::ProviderError),
            &failed(Failure::Malformed),
            &failed(Failure::OverBudget),
        ] {
            // No route: on_unsure escalate still rejects.
            let (outcome, gate) = concluded(&approving, review);
            assert_eq!(
                (outcome.as_str(), gate.passed),
                ("reject", false),
                "{review:?}"
            );
        }
        let escalating = ask(false, Some(route()), OnUnsure::Escalate);
        assert_eq!(concluded(&escalating, &approve).0, "escalated");
        assert_eq!(concluded(&escalating, &unsure).0, "escalated");
        assert_eq!(
            concluded(&escalating, &failed(Failure::Timeout)).0,
            "escalated"
        );
        assert_eq!(concluded(&escalating, &reject).0, "reject");
        let strict = ask(false, Some(route()), OnUnsure::Reject);
        assert_eq!(concluded(&strict, &unsure).0, "reject");
        assert_eq!(concluded(&strict, &approve).0, "escalated");
    }

    #[test]
    fn an_approving_answer_never_approves_what_a_gate_failed() {
        // Not an ask the worker makes (a rejection by the gates is never
        // put to a model), and still the decision rejects.
        let failed_gate = ask(false, None, OnUnsure::Reject);
        let approve = answered(r#"{"verdict": "approve"}"#);
        let Concluded::Decided(decision) = conclude(&failed_gate, &approve, stamp()) else {
            panic!("decided")
        };
        assert_eq!(decision.outcome, DecisionOutcome::Reject);
        assert_eq!(decision.missing_gates, [SOP]);
    }

    /// Counts no calls: every call is taken.
    struct Uncounted;

    #[async_trait::async_trait]
    impl ModelCalls for Uncounted {
        async fn take_model_call(&self, _: &str, _: Millis, _: u32) -> Result<bool, StoreError> {
            Ok(true)
        }
    }

    #[tokio::test]
    async fn over_its_calls_per_minute_a_tenant_gets_over_budget_and_no_request_is_sent() {
        let fake =
            FakeModel::start(|_| Answer::Completion(r#"{"verdict": "approve"}"#.into())).await;
        let db = SqliteDatabase::new();
        let store = Arc::new(db.store().await);
        for tenant in ["acme", "globex"] {
            store.create_tenant(tenant).await.unwrap();
        }
        // Two processes' reviewers on one database.
        let stage = ModelStage::new(models(fake.base_url()), store.clone());
        let other_process = ModelStage::new(models(fake.base_url()), store);
        let capped = profile(OnUnsure::Reject, 3);
        let mut verdicts = Vec::new();
        for stage in [&stage, &other_process, &stage, &other_process] {
            let review = stage.review("acme", &capped, &prompt()).await.unwrap();
            verdicts.push(review.outcome.verdict());
        }
        assert_eq!(verdicts, ["approve", "approve", "approve", "over_budget"]);
        assert_eq!(fake.received().len(), 3);
        // Another tenant's calls are its own.
        let other = stage.review("globex", &capped, &prompt()).await.unwrap();
        assert_eq!(other.outcome.verdict(), "approve");
        assert_eq!(fake.received().len(), 4);
        // No cap.
        let uncapped = profile(OnUnsure::Reject, 0);
        for _ in 0..5 {
            stage.review("acme", &uncapped, &prompt()).await.unwrap();
        }
        assert_eq!(fake.received().len(), 9);
    }

    #[test]
    fn the_shared_workers_wait_while_the_backlog_is_at_its_bound() {
        let stage = Arc::new(ModelStage::new(Models::default(), Arc::new(Uncounted)));
        let stop = CancellationToken::new();
        let mut waiting: Vec<Waiting> = (0..MIN_BACKLOG).map(|_| stage.enter()).collect();
        assert!(stage.room(&stop).now_or_never().is_none(), "at the bound");
        let room = stage.room(&stop);
        tokio::pin!(room);
        assert!(room.as_mut().now_or_never().is_none());
        waiting.pop();
        assert!(room.now_or_never().is_some(), "one review ended");
        waiting.push(stage.enter());
        stop.cancel();
        assert!(stage.room(&stop).now_or_never().is_some(), "stopping");
    }

    #[tokio::test]
    async fn a_review_waiting_for_the_model_keeps_its_lease() {
        let db = SqliteDatabase::new();
        let store = db.store().await;
        let queue: DynQueue = Arc::new(EmbeddedQueue::new(store.writer()));
        store.create_tenant("acme").await.unwrap();
        store
            .insert_proposal(NewProposal {
                id: NewProposal::new_id(),
                tenant: "acme".into(),
                spec: fixtures::spec(),
                submitted_by: "tester".into(),
                submitted_by_person: None,
                trace_parent: None,
                submitted_key: None,
            })
            .await
            .unwrap();
        let lease_for = Duration::from_millis(600);
        let lease = queue.fetch("w", 1, lease_for).await.unwrap().remove(0);
        // Three leases' time while held: nothing to reclaim, and still ours.
        tokio::select! {
            () = hold(&queue, &lease, lease_for) => unreachable!("hold never ends"),
            () = tokio::time::sleep(lease_for * 3) => {}
        }
        assert_eq!(queue.reclaim_expired().await.unwrap(), 0);
        assert!(queue.extend(&lease, lease_for).await.unwrap());
        // Not held, it runs out and is reclaimed.
        tokio::time::sleep(lease_for * 2).await;
        assert_eq!(queue.reclaim_expired().await.unwrap(), 1);
    }
}
