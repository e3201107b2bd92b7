//! One worker: lease a batch, review each, record the decisions (or open the
//! escalations a tenant's routes ask for), ack.

use std::{
    panic::{AssertUnwindSafe, catch_unwind},
    sync::Arc,
    time::Duration,
};

use countersign_domain::{
    Decision, Millis, Proposal,
    escalation::{self, AfterGates, Escalation},
    gates::ReviewFacts,
    review::{self, ReviewStamp},
};
use countersign_queue::{DynQueue, Lease, Submissions};
use countersign_store::{
    BeginReview, Changes, Escalations, EventKind, RecordOutcome, ReviewKey, Reviews,
};
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;

use crate::{ReviewerConfig, trace_context};

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
}

/// What to do with a lease after a review attempt.
#[derive(Debug, Clone)]
enum Step {
    /// Decided (or nothing left to decide): ack.
    Done,
    /// Decided as failed after too many attempts: park the entry.
    DeadLetter(String),
    /// Try again after the delay; the attempt counts.
    Retry(String, Duration),
}

pub(crate) use countersign_domain::now_ms;

/// What a review concludes.
#[derive(Debug, Clone)]
enum Concluded {
    /// Decided as the gates say (or failed, or timed out).
    Decided(Decision),
    /// Sent to people under a route of the tenant's, instead of decided.
    Escalated(Escalation),
}

type Reviewed = Vec<(usize, Result<Concluded, Step>)>;

/// Every proposal of `due` goes back to the queue to be tried again.
fn retry_all(
    mut out: Reviewed,
    due: Vec<(usize, Box<Proposal>, Millis)>,
    why: &str,
    delay: Duration,
) -> Reviewed {
    out.extend(
        due.into_iter()
            .map(|(i, _, _)| (i, Err(Step::Retry(why.to_owned(), delay)))),
    );
    out
}

/// This process's submissions, as the wake-ups of the outbox publisher: one
/// item for each [`submission`].
pub fn submissions(store: &dyn Changes) -> Submissions {
    Box::pin(futures::stream::unfold(
        store.subscribe(),
        |mut events| async move {
            submission(&mut events).await;
            Some(((), events))
        },
    ))
}

/// Resolves when a proposal is submitted in this process (or events were lost).
async fn submission(events: &mut broadcast::Receiver<countersign_store::StoreEvent>) {
    loop {
        match events.recv().await {
            Ok(event) if event.kind == EventKind::Submitted => return,
            Ok(_) => continue,
            Err(broadcast::error::RecvError::Lagged(_)) => return,
            Err(broadcast::error::RecvError::Closed) => std::future::pending().await,
        }
    }
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

/// A recorded decision's series: by outcome, by each gate that failed, and
/// how long the review took (REVIEWING to decision).
fn record_metrics(decision: &Decision) {
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
    pub async fn run(self, stop: CancellationToken) {
        let mut events = self.changes.subscribe();
        let mut enqueued = self.queue.enqueued();
        tracing::debug!(worker = %self.id, "reviewer started");
        while !stop.is_cancelled() {
            // Seen before the fetch: an entry enqueued after it wakes the wait.
            if let Some(enqueued) = &mut enqueued {
                enqueued.borrow_and_update();
            }
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
            if leases.is_empty() {
                tokio::select! {
                    () = stop.cancelled() => {}
                    () = submission(&mut events) => {}
                    () = enqueued_here(&mut enqueued) => {}
                    () = tokio::time::sleep(self.config.idle_poll) => {}
                }
                continue;
            }
            self.process(leases).await;
        }
        tracing::debug!(worker = %self.id, "reviewer stopped");
    }

    fn stamp(&self, started_at: Millis) -> ReviewStamp {
        let now = now_ms();
        ReviewStamp {
            reviewer: self.id.clone(),
            decided_at: now,
            latency_ms: (now - started_at).max(0) as u64,
        }
    }

    /// Reviews a batch: one transaction starts them, one records them.
    #[tracing::instrument(name = "reviewer.review_batch", skip_all, fields(worker = %self.id, n = leases.len()))]
    async fn process(&self, leases: Vec<Lease>) {
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
                        Ok(Concluded::Decided(decision)) => decided.push((i, decision, Step::Done)),
                        Ok(Concluded::Escalated(escalation)) => escalating.push((i, escalation)),
                        Err(step) => steps[i] = Some(step),
                    }
                }
            }
        }

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
            self.open_escalations(&leases, escalating, &spans, &mut steps)
                .await;
        }
        self.settle(&leases, steps).await;
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
    ) -> Reviewed {
        let deadline_ms = self.config.review_deadline.as_millis() as u64;
        let past = |started_at: Millis| now_ms() >= started_at + deadline_ms as Millis;
        // A review already past its deadline needs no facts.
        let (late, due): (Vec<_>, Vec<_>) = open.into_iter().partition(|(_, _, at)| past(*at));
        let mut out: Vec<_> = late
            .into_iter()
            .map(|(i, _, at)| {
                let timed_out = review::timed_out(deadline_ms, self.stamp(at));
                (i, Ok(Concluded::Decided(timed_out)))
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

    /// Runs the gates on gathered facts, then the step after them: the
    /// strictest of the tenant's routes that matches may send the proposal
    /// to people (`escalation::after_review`), else the gates decide. A
    /// panic or a passed deadline never approves and never escalates.
    fn decide(
        &self,
        proposal: &Proposal,
        facts: &ReviewFacts,
        started_at: Millis,
    ) -> Result<Concluded, Step> {
        let deadline_ms = self.config.review_deadline.as_millis() as u64;
        let evaluator = self.config.evaluator.clone();
        let (verdict, route) = catch_unwind(AssertUnwindSafe(|| {
            let verdict = evaluator(facts);
            let route = match escalation::after_review(facts, &verdict, &facts.routes) {
                AfterGates::Escalate(route) => Some(route.clone()),
                AfterGates::Decide => None,
            };
            (verdict, route)
        }))
        .map_err(|_| Step::Retry("the review panicked".into(), self.config.retry_delay))?;
        let stamp = self.stamp(started_at);
        Ok(if now_ms() >= started_at + deadline_ms as Millis {
            Concluded::Decided(review::timed_out(deadline_ms, stamp))
        } else if let Some(route) = route {
            Concluded::Escalated(Escalation::open(&route, &verdict, &stamp))
        } else {
            Concluded::Decided(review::decide(&verdict, &(&proposal.spec).into(), stamp))
        })
    }

    /// Acks, dead-letters and releases as each lease's step says.
    async fn settle(&self, leases: &[Lease], steps: Vec<Option<Step>>) {
        let mut done = Vec::new();
        for (lease, step) in leases.iter().zip(steps) {
            let result = match step.unwrap_or(Step::Retry("no step".into(), Duration::ZERO)) {
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
                    self.queue.release(lease, delay).await
                }
            };
            if let Err(error) = result {
                // The lease will expire and the entry be reclaimed.
                tracing::warn!(worker = %self.id, proposal = %lease.proposal_id, %error, "queue update failed");
            }
        }
        if let Err(error) = self.queue.ack_many(&done).await {
            tracing::warn!(worker = %self.id, %error, "ack failed; leases will expire and be reclaimed");
        }
    }
}
