//! One worker: lease a batch, review each, record the decisions (or open the
//! escalations a tenant's routes ask for), ack. A proposal a tenant's model
//! profile sends to a model leaves the batch for a task of its own
//! (`model_stage`); the process's recorder records the results of those that
//! finished together, whichever worker asked, and settles their leases.

use std::{
    panic::{AssertUnwindSafe, catch_unwind},
    sync::Arc,
    time::Duration,
};

use countersign_domain::{
    Decision, Millis, Proposal,
    escalation::{self, AfterGates, Escalation, Route},
    gates::{ReviewFacts, Verdict},
    model::{ModelProfile, Prompt},
    review::{self, ReviewStamp},
};
use countersign_queue::{DynQueue, Lease, Submissions};
use countersign_store::{
    BeginReview, Changes, Escalations, EventKind, RecordOutcome, ReviewKey, Reviews,
};
use tokio::{
    sync::{broadcast, watch},
    task::JoinSet,
};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::{
    Evaluator, ReviewerConfig,
    model_stage::{self, Answers, Ask, ModelStage},
    trace_context,
};

/// Which entries a worker leases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// Any tenant's, in turns ([`countersign_queue::Queue::fetch`]).
    Shared,
    /// Only tenants nobody is reviewing ([`countersign_queue::Queue::fetch_idle_tenants`]).
    Express,
}

pub struct Worker {
    pub id: String,
    pub lane: Lane,
    pub store: Arc<dyn Reviews>,
    /// Where the proposals a route sends to people are escalated.
    pub escalations: Arc<dyn Escalations>,
    /// What wakes it on the embedded queue: submissions in this process.
    pub changes: Arc<dyn Changes>,
    pub queue: DynQueue,
    pub config: Arc<ReviewerConfig>,
    /// The model reviewer, shared by the process's workers.
    pub model: Arc<ModelStage>,
}

/// What to do with a lease after a review attempt.
#[derive(Debug, Clone)]
pub(crate) enum Step {
    /// Decided (or nothing left to decide): ack.
    Done,
    /// Decided as failed after too many attempts: park the entry.
    DeadLetter(String),
    /// Try again after the delay; the attempt counts.
    Retry(String, Duration),
    /// Handed to a model review's task, which settles it.
    Asked,
}

pub(crate) use countersign_domain::now_ms;

/// What a review concludes.
#[derive(Debug, Clone)]
pub(crate) enum Concluded {
    /// Decided as the gates (and the model) say, or failed, or timed out.
    Decided(Decision),
    /// Sent to people under a route of the tenant's, instead of decided.
    Escalated(Escalation),
}

/// Where the gates leave a review: concluded (as [`Concluded`]), or to be
/// asked of a model.
#[derive(Debug)]
enum Reviewed {
    Decided(Decision),
    Escalated(Escalation),
    Ask(Box<Ask>),
}

type Results = Vec<(usize, Result<Reviewed, Step>)>;

/// Every proposal of `due` goes back to the queue to be tried again.
fn retry_all(
    mut out: Results,
    due: Vec<(usize, Box<Proposal>, Millis)>,
    why: &str,
    delay: Duration,
) -> Results {
    out.extend(
        due.into_iter()
            .map(|(i, _, _)| (i, Err(Step::Retry(why.to_owned(), delay)))),
    );
    out
}

/// This process's submissions as they commit, for the outbox publisher: one
/// item for each [`submission`].
pub fn submissions(store: &dyn Changes) -> Submissions {
    Box::pin(futures::stream::unfold(
        store.subscribe(),
        |mut events| async move {
            let key = submission(&mut events).await;
            Some((key, events))
        },
    ))
}

/// The next proposal submitted in this process, once it has committed;
/// `None` when events were lost (some may have been missed).
async fn submission(
    events: &mut broadcast::Receiver<countersign_store::StoreEvent>,
) -> Option<ReviewKey> {
    loop {
        match events.recv().await {
            Ok(event) if event.kind == EventKind::Submitted => {
                return Some(ReviewKey {
                    tenant: event.tenant,
                    id: event.proposal_id,
                });
            }
            Ok(_) => continue,
            Err(broadcast::error::RecvError::Lagged(_)) => return None,
            Err(broadcast::error::RecvError::Closed) => std::future::pending().await,
        }
    }
}

/// Forgets the events already received: a fetch that follows sees what
/// they announce.
fn drain(events: &mut broadcast::Receiver<countersign_store::StoreEvent>) {
    while !matches!(
        events.try_recv(),
        Err(broadcast::error::TryRecvError::Empty | broadcast::error::TryRecvError::Closed)
    ) {}
}

/// Resolves when this process enqueued an entry since it was last seen
/// (never, for a queue without the signal).
async fn enqueued_here(enqueued: &mut Option<watch::Receiver<u64>>) {
    if let Some(rx) = enqueued
        && rx.changed().await.is_ok()
    {
        return;
    }
    std::future::pending().await
}

/// What the gates, the tenant's routes and its model profiles make of a
/// review: the gates' verdict; the strictest of the tenant's routes that
/// matches may send the proposal to people (`escalation::after_review`);
/// where the gates would approve it or a route escalates it, and a model
/// profile of the tenant matches it, it is to be asked of the model
/// (`model_stage`). A rejection by the gates is never put to a model.
pub(crate) struct Conclusion {
    verdict: Verdict,
    route: Option<Route>,
    asked: Option<(ModelProfile, Prompt)>,
}

/// [`Conclusion`] of `evaluator` on `facts`; `None` if it panicked.
pub(crate) fn conclude(
    evaluator: &Evaluator,
    proposal: &Proposal,
    facts: &ReviewFacts,
) -> Option<Conclusion> {
    catch_unwind(AssertUnwindSafe(|| {
        let verdict = evaluator(facts);
        let route = match escalation::after_review(facts, &verdict, &facts.routes) {
            AfterGates::Escalate(route) => Some(route.clone()),
            AfterGates::Decide => None,
        };
        let asked = (route.is_some() || verdict.approves())
            .then(|| model_stage::profile_of(facts))
            .flatten()
            .map(|profile| (profile, model_stage::prompt_for(proposal, facts, &verdict)));
        Conclusion {
            verdict,
            route,
            asked,
        }
    }))
    .ok()
}

impl Conclusion {
    /// The decision the gates reach alone: `None` where people or a model
    /// are to be asked first.
    pub(crate) fn decided_alone(self, proposal: &Proposal, stamp: ReviewStamp) -> Option<Decision> {
        if self.route.is_some() || self.asked.is_some() {
            return None;
        }
        Some(review::decide(
            &self.verdict,
            &(&proposal.spec).into(),
            stamp,
        ))
    }

    /// Where the review goes from here.
    fn reviewed(
        self,
        proposal: &Proposal,
        facts: &ReviewFacts,
        started_at: Millis,
        stamp: ReviewStamp,
    ) -> Reviewed {
        if let Some((profile, prompt)) = self.asked {
            Reviewed::Ask(Box::new(Ask {
                profile,
                prompt,
                verdict: self.verdict,
                route: self.route,
                spec: facts.spec.clone(),
                started_at,
            }))
        } else if let Some(route) = self.route {
            Reviewed::Escalated(Escalation::open(&route, &self.verdict, &stamp))
        } else {
            Reviewed::Decided(review::decide(
                &self.verdict,
                &(&proposal.spec).into(),
                stamp,
            ))
        }
    }
}

/// A recorded decision's series: by outcome, by each gate that failed, and
/// how long the review took (REVIEWING to decision).
pub(crate) fn record_metrics(decision: &Decision) {
    metrics::counter!("countersign_reviews_total", "outcome" => decision.outcome.as_str())
        .increment(1);
    for gate in decision.gates.iter().filter(|g| !g.passed) {
        metrics::counter!("countersign_review_failed_gates_total", "gate" => gate.gate.clone())
            .increment(1);
    }
    metrics::histogram!("countersign_review_duration_seconds")
        .record(decision.review_latency_ms as f64 / 1000.0);
}

fn key(lease: &Lease) -> ReviewKey {
    ReviewKey {
        tenant: lease.tenant.clone(),
        id: lease.proposal_id.clone(),
    }
}

impl Worker {
    /// Reviews batches until `stop`, its model reviews sending their
    /// results to `answers` (the process's recorder); then waits for those
    /// reviews, which give their leases back on `stop`.
    pub(crate) async fn run(self, stop: CancellationToken, answers: Answers) {
        let this = Arc::new(self);
        let mut asked = JoinSet::new();
        this.run_until(&stop, &mut asked, &answers).await;
        while asked.join_next().await.is_some() {}
        tracing::debug!(worker = %this.id, "reviewer stopped");
    }

    async fn run_until(
        self: &Arc<Self>,
        stop: &CancellationToken,
        asked: &mut JoinSet<()>,
        answers: &Answers,
    ) {
        let mut events = self.changes.subscribe();
        let mut enqueued = self.queue.enqueued();
        tracing::debug!(worker = %self.id, "reviewer started");
        while !stop.is_cancelled() {
            while asked.try_join_next().is_some() {}
            // A shared worker leases nothing while the process's model
            // reviews are at their bound: what it began would wait for the
            // model's turns and run into its deadline. The express lane
            // still serves the tenants nobody is reviewing.
            if self.lane == Lane::Shared {
                self.model.room(stop).await;
                if stop.is_cancelled() {
                    break;
                }
            }
            // Seen before the fetch: an entry enqueued after it wakes the
            // wait, and the submissions the fetch sees wake no second one.
            if let Some(enqueued) = &mut enqueued {
                enqueued.borrow_and_update();
            }
            drain(&mut events);
            let (batch, lease) = (self.config.batch, self.config.lease);
            let fetched = match self.lane {
                Lane::Shared => self.queue.fetch(&self.id, batch, lease).await,
                Lane::Express => self.queue.fetch_idle_tenants(&self.id, batch, lease).await,
            };
            let leases = match fetched {
                Ok(leases) => leases,
                Err(error) => {
                    tracing::warn!(worker = %self.id, %error, "queue fetch failed");
                    tokio::select! {
                        () = stop.cancelled() => {}
                        () = tokio::time::sleep(self.config.retry_delay) => {}
                    }
                    continue;
                }
            };
            // A shared fetch short of a batch took every entry ready then:
            // after this batch, only what was enqueued since is left, and
            // that woke the wait below already.
            let drained = self.lane == Lane::Shared && leases.len() < batch;
            if !leases.is_empty() {
                let again = self.process(leases, (asked, answers), stop).await;
                if !drained || again {
                    continue;
                }
            }
            tokio::select! {
                () = stop.cancelled() => {}
                _ = submission(&mut events) => {}
                () = enqueued_here(&mut enqueued) => {}
                () = tokio::time::sleep(self.config.idle_poll) => {}
            }
        }
    }

    pub(crate) fn stamp(&self, started_at: Millis) -> ReviewStamp {
        let now = now_ms();
        ReviewStamp {
            reviewer: self.id.clone(),
            decided_at: now,
            latency_ms: (now - started_at).max(0) as u64,
        }
    }

    /// Reviews a batch: one transaction starts them, one records them. The
    /// proposals a model reviews go to tasks of their own in `asked`,
    /// started before the rest is recorded, which send their results to
    /// `answers` (the process's recorder). Whether a lease went back to be
    /// tried again at once.
    #[tracing::instrument(name = "reviewer.review_batch", skip_all, fields(worker = %self.id, n = leases.len()))]
    async fn process(
        self: &Arc<Self>,
        leases: Vec<Lease>,
        (asked, answers): (&mut JoinSet<()>, &Answers),
        stop: &CancellationToken,
    ) -> bool {
        let mut steps: Vec<Option<Step>> = vec![None; leases.len()];
        // One `reviewer.review` span per proposal begun, in its caller's trace.
        let mut spans: Vec<Option<tracing::Span>> = vec![None; leases.len()];
        // (index, decision, step once recorded)
        let mut decided: Vec<(usize, Decision, Step)> = Vec::new();
        let mut escalating: Vec<(usize, Escalation)> = Vec::new();

        let mut fresh = Vec::new();
        for (i, lease) in leases.iter().enumerate() {
            if lease.attempts > self.config.max_attempts {
                let why = format!(
                    "{} review attempts did not complete",
                    self.config.max_attempts
                );
                decided.push((
                    i,
                    review::failed(&why, self.stamp(now_ms())),
                    Step::DeadLetter(why),
                ));
            } else {
                fresh.push(i);
            }
        }

        let keys: Vec<ReviewKey> = fresh.iter().map(|&i| key(&leases[i])).collect();
        match self.store.begin_reviews(&keys).await {
            Err(error) => {
                for &i in &fresh {
                    steps[i] = Some(Step::Retry(
                        format!("begin failed: {error}"),
                        self.config.retry_delay,
                    ));
                }
            }
            Ok(begun) => {
                let mut open = Vec::new();
                for (&i, begun) in fresh.iter().zip(begun) {
                    match begun {
                        BeginReview::Terminal(_) => steps[i] = Some(Step::Done),
                        BeginReview::Reviewing {
                            proposal,
                            started_at,
                            trace_parent,
                        } => {
                            spans[i] = Some(trace_context::review_span(
                                &leases[i].tenant,
                                &leases[i].proposal_id,
                                trace_parent.as_deref(),
                            ));
                            open.push((i, proposal, started_at));
                        }
                    }
                }
                for (i, result) in self.review_all(open, &spans).await {
                    match result {
                        Ok(Reviewed::Decided(decision)) => decided.push((i, decision, Step::Done)),
                        Ok(Reviewed::Escalated(escalation)) => escalating.push((i, escalation)),
                        Ok(Reviewed::Ask(ask)) => {
                            let task = self.clone().review_by_model(
                                (leases[i].clone(), spans[i].clone()),
                                *ask,
                                (self.model.enter(), answers.clone()),
                                stop.clone(),
                            );
                            asked.spawn(match spans[i].clone() {
                                Some(span) => task.instrument(span),
                                None => task.instrument(tracing::Span::none()),
                            });
                            steps[i] = Some(Step::Asked);
                        }
                        Err(step) => steps[i] = Some(step),
                    }
                }
            }
        }
        self.record(&leases, &spans, decided, escalating, &mut steps)
            .await;
        self.settle(&leases, steps).await
    }

    /// Records `decided` in one transaction and opens `escalating` in
    /// another; each lease's step as its fate says.
    pub(crate) async fn record(
        &self,
        leases: &[Lease],
        spans: &[Option<tracing::Span>],
        decided: Vec<(usize, Decision, Step)>,
        escalating: Vec<(usize, Escalation)>,
        steps: &mut [Option<Step>],
    ) {
        if !decided.is_empty() {
            let items = decided
                .iter()
                .map(|(i, d, _)| (key(&leases[*i]), d.clone()))
                .collect();
            match self.store.record_decisions(items).await {
                Err(error) => {
                    for (i, _, _) in &decided {
                        steps[*i] = Some(Step::Retry(
                            format!("recording failed: {error}"),
                            self.config.retry_delay,
                        ));
                    }
                }
                Ok(outcomes) => {
                    for ((i, decision, on_success), outcome) in decided.into_iter().zip(outcomes) {
                        steps[i] = Some(match outcome {
                            RecordOutcome::Recorded => {
                                if let Some(span) = &spans[i] {
                                    span.record("outcome", decision.outcome.as_str());
                                }
                                record_metrics(&decision);
                                on_success
                            }
                            RecordOutcome::Discarded(state) => {
                                tracing::info!(proposal = %leases[i].proposal_id, %state, "late result discarded");
                                metrics::counter!("countersign_late_results_discarded_total")
                                    .increment(1);
                                Step::Done
                            }
                            RecordOutcome::Stale(why) => Step::Retry(why, Duration::ZERO),
                        });
                    }
                }
            }
        }
        if !escalating.is_empty() {
            self.open_escalations(leases, escalating, spans, steps)
                .await;
        }
    }

    /// Opens the batch's escalations in one transaction; each lease's step
    /// as its fate says (like a decision's: a late result is done, a stale
    /// one reviewed again, a failed write retried).
    async fn open_escalations(
        &self,
        leases: &[Lease],
        escalating: Vec<(usize, Escalation)>,
        spans: &[Option<tracing::Span>],
        steps: &mut [Option<Step>],
    ) {
        let items = escalating
            .iter()
            .map(|(i, e)| (key(&leases[*i]), e.clone()))
            .collect();
        match self.escalations.open_escalations(items).await {
            Err(error) => {
                for (i, _) in &escalating {
                    steps[*i] = Some(Step::Retry(
                        format!("opening the escalation failed: {error}"),
                        self.config.retry_delay,
                    ));
                }
            }
            Ok(outcomes) => {
                for ((i, escalation), outcome) in escalating.into_iter().zip(outcomes) {
                    steps[i] = Some(match outcome {
                        RecordOutcome::Recorded => {
                            if let Some(span) = &spans[i] {
                                span.record("outcome", "escalated");
                            }
                            tracing::info!(
                                proposal = %leases[i].proposal_id,
                                route = %escalation.route_id,
                                expires_at = escalation.expires_at,
                                "escalated to people"
                            );
                            metrics::counter!("countersign_escalations_opened_total").increment(1);
                            Step::Done
                        }
                        RecordOutcome::Discarded(state) => {
                            tracing::info!(proposal = %leases[i].proposal_id, %state, "late escalation discarded");
                            Step::Done
                        }
                        RecordOutcome::Stale(why) => Step::Retry(why, Duration::ZERO),
                    });
                }
            }
        }
    }

    /// Gathers the facts of a batch (one snapshot) and runs the gates on each.
    /// `Err` is what to do with a lease instead of recording a decision.
    async fn review_all(
        &self,
        open: Vec<(usize, Box<Proposal>, Millis)>,
        spans: &[Option<tracing::Span>],
    ) -> Results {
        let deadline_ms = self.config.review_deadline.as_millis() as u64;
        let past = |started_at: Millis| now_ms() >= started_at + deadline_ms as Millis;
        // A review already past its deadline needs no facts.
        let (late, due): (Vec<_>, Vec<_>) = open.into_iter().partition(|(_, _, at)| past(*at));
        let mut out: Vec<_> = late
            .into_iter()
            .map(|(i, _, at)| {
                let timed_out = review::timed_out(deadline_ms, self.stamp(at));
                (i, Ok(Reviewed::Decided(timed_out)))
            })
            .collect();
        if due.is_empty() {
            return out;
        }
        let proposals: Vec<Proposal> = due.iter().map(|(_, p, _)| (**p).clone()).collect();
        let facts = match self.store.review_facts_many(&proposals).await {
            Ok(facts) if facts.len() == due.len() => facts,
            Ok(facts) => {
                let why = format!("facts for {} of {} proposals", facts.len(), due.len());
                return retry_all(out, due, &why, self.config.retry_delay);
            }
            Err(error) => {
                let why = format!("facts unavailable: {error}");
                return retry_all(out, due, &why, self.config.retry_delay);
            }
        };
        for ((i, proposal, started_at), facts) in due.into_iter().zip(facts) {
            let result = match facts {
                Err(error) => Err(Step::Retry(
                    format!("facts unavailable: {error}"),
                    self.config.retry_delay,
                )),
                Ok(facts) => match &spans[i] {
                    Some(span) => span.in_scope(|| self.decide(&proposal, &facts, started_at)),
                    None => self.decide(&proposal, &facts, started_at),
                },
            };
            out.push((i, result));
        }
        out
    }

    /// Runs the gates on gathered facts, then the step after them
    /// ([`conclude`]). A panic or a passed deadline never approves, never
    /// escalates and asks no model.
    fn decide(
        &self,
        proposal: &Proposal,
        facts: &ReviewFacts,
        started_at: Millis,
    ) -> Result<Reviewed, Step> {
        let deadline_ms = self.config.review_deadline.as_millis() as u64;
        let concluded = conclude(&self.config.evaluator, proposal, facts)
            .ok_or_else(|| Step::Retry("the review panicked".into(), self.config.retry_delay))?;
        let stamp = self.stamp(started_at);
        Ok(if now_ms() >= started_at + deadline_ms as Millis {
            Reviewed::Decided(review::timed_out(deadline_ms, stamp))
        } else {
            concluded.reviewed(proposal, facts, started_at, stamp)
        })
    }

    /// Acks, dead-letters and releases as each lease's step says; whether
    /// a lease went back to be tried again at once.
    pub(crate) async fn settle(&self, leases: &[Lease], steps: Vec<Option<Step>>) -> bool {
        let mut done = Vec::new();
        let mut again = false;
        for (lease, step) in leases.iter().zip(steps) {
            let result = match step.unwrap_or(Step::Retry("no step".into(), Duration::ZERO)) {
                Step::Asked => Ok(()),
                Step::Done => {
                    done.push(lease.clone());
                    Ok(())
                }
                Step::DeadLetter(reason) => {
                    metrics::counter!("countersign_dead_letters_total").increment(1);
                    self.queue.dead_letter(lease, &reason).await
                }
                Step::Retry(why, delay) => {
                    tracing::warn!(
                        worker = %self.id,
                        proposal = %lease.proposal_id,
                        attempt = lease.attempts,
                        why,
                        "review attempt failed; will retry"
                    );
                    metrics::counter!("countersign_review_retries_total").increment(1);
                    again |= delay.is_zero();
                    self.queue.release(lease, delay).await
                }
            };
            if let Err(error) = result {
                // The lease will expire and the entry be reclaimed.
                tracing::warn!(worker = %self.id, proposal = %lease.proposal_id, %error, "queue update failed");
            }
        }
        // A batch the model took whole has nothing to ack: no trip to the queue.
        if !done.is_empty()
            && let Err(error) = self.queue.ack_many(&done).await
        {
            tracing::warn!(worker = %self.id, %error, "ack failed; leases will expire and be reclaimed");
        }
        again
    }
}
