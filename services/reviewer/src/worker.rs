//! One worker: lease, review, record, ack.

use std::{
    panic::{AssertUnwindSafe, catch_unwind},
    sync::Arc,
    time::Duration,
};

use countersign_domain::{
    Millis,
    review::{self, ReviewStamp},
};
use countersign_queue::{DynQueue, Lease};
use countersign_store::{BeginReview, DynStore, EventKind, RecordOutcome};
use tokio::sync::{broadcast, watch};

use crate::ReviewerConfig;

pub struct Worker {
    pub id: String,
    pub store: DynStore,
    pub queue: DynQueue,
    pub config: Arc<ReviewerConfig>,
}

/// What to do with a lease after a review attempt.
enum Step {
    /// Decided (or nothing left to decide): ack.
    Done,
    /// Decided as failed after too many attempts: park the entry.
    DeadLetter(String),
    /// Try again after the delay; the attempt counts.
    Retry(String, Duration),
}

pub(crate) fn now_ms() -> Millis {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as Millis)
        .unwrap_or_default()
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

impl Worker {
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        let mut events = self.store.subscribe();
        tracing::debug!(worker = %self.id, "reviewer started");
        while !*stop.borrow() {
            let leases = match self
                .queue
                .fetch(&self.id, self.config.batch, self.config.lease)
                .await
            {
                Ok(leases) => leases,
                Err(error) => {
                    tracing::warn!(worker = %self.id, %error, "queue fetch failed");
                    tokio::select! {
                        _ = stop.changed() => {}
                        () = tokio::time::sleep(self.config.retry_delay) => {}
                    }
                    continue;
                }
            };
            if leases.is_empty() {
                tokio::select! {
                    _ = stop.changed() => {}
                    () = submission(&mut events) => {}
                    () = tokio::time::sleep(self.config.idle_poll) => {}
                }
                continue;
            }
            for lease in leases {
                if *stop.borrow() {
                    // Hand back what we have not started; its lease would expire anyway.
                    let _ = self.queue.release(&lease, Duration::ZERO).await;
                    continue;
                }
                self.process(lease).await;
            }
        }
        tracing::debug!(worker = %self.id, "reviewer stopped");
    }

    async fn process(&self, lease: Lease) {
        let step = self.review(&lease).await;
        let result = match step {
            Step::Done => self.queue.ack(&lease).await,
            Step::DeadLetter(reason) => {
                metrics::counter!("countersign_dead_letters_total").increment(1);
                self.queue.dead_letter(&lease, &reason).await
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
                self.queue.release(&lease, delay).await
            }
        };
        if let Err(error) = result {
            // The lease will expire and the entry be reclaimed.
            tracing::warn!(worker = %self.id, proposal = %lease.proposal_id, %error, "queue update failed");
        }
    }

    fn stamp(&self, started_at: Millis) -> ReviewStamp {
        let now = now_ms();
        ReviewStamp {
            reviewer: self.id.clone(),
            decided_at: now,
            latency_ms: (now - started_at).max(0) as u64,
        }
    }

    async fn record(&self, lease: &Lease, decision: countersign_domain::Decision) -> Step {
        let outcome = decision.outcome;
        match self
            .store
            .record_decision(&lease.tenant, &lease.proposal_id, decision)
            .await
        {
            Ok(RecordOutcome::Recorded(_)) => {
                metrics::counter!("countersign_reviews_total", "outcome" => outcome.as_str())
                    .increment(1);
                Step::Done
            }
            Ok(RecordOutcome::Discarded(state)) => {
                tracing::info!(proposal = %lease.proposal_id, %state, "late result discarded");
                metrics::counter!("countersign_late_results_discarded_total").increment(1);
                Step::Done
            }
            Ok(RecordOutcome::Stale(why)) => Step::Retry(why, Duration::ZERO),
            Err(error) => Step::Retry(
                format!("recording failed: {error}"),
                self.config.retry_delay,
            ),
        }
    }

    #[tracing::instrument(name = "reviewer.review", skip_all, fields(worker = %self.id, tenant = %lease.tenant, proposal = %lease.proposal_id, attempt = lease.attempts))]
    async fn review(&self, lease: &Lease) -> Step {
        if lease.attempts > self.config.max_attempts {
            let why = format!(
                "{} review attempts did not complete",
                self.config.max_attempts
            );
            let decision = review::failed(&why, self.stamp(now_ms()));
            return match self.record(lease, decision).await {
                Step::Done => Step::DeadLetter(why),
                other => other,
            };
        }
        let begun = match self
            .store
            .begin_review(&lease.tenant, &lease.proposal_id, &self.id)
            .await
        {
            Ok(begun) => begun,
            Err(error) => {
                return Step::Retry(format!("begin failed: {error}"), self.config.retry_delay);
            }
        };
        let (proposal, started_at) = match begun {
            BeginReview::Terminal(_) => return Step::Done,
            BeginReview::Reviewing {
                proposal,
                started_at,
            } => (proposal, started_at),
        };
        let deadline_ms = self.config.review_deadline.as_millis() as u64;
        let deadline = started_at + deadline_ms as Millis;
        if now_ms() >= deadline {
            return self
                .record(
                    lease,
                    review::timed_out(deadline_ms, self.stamp(started_at)),
                )
                .await;
        }
        let facts = match self.store.review_facts(&proposal).await {
            Ok(facts) => facts,
            Err(error) => {
                return Step::Retry(
                    format!("facts unavailable: {error}"),
                    self.config.retry_delay,
                );
            }
        };
        let evaluator = self.config.evaluator.clone();
        let verdict = match catch_unwind(AssertUnwindSafe(|| evaluator(&facts))) {
            Ok(verdict) => verdict,
            Err(_) => return Step::Retry("the review panicked".into(), self.config.retry_delay),
        };
        let decision = if now_ms() >= deadline {
            review::timed_out(deadline_ms, self.stamp(started_at))
        } else {
            review::decide(&verdict, &proposal.spec, self.stamp(started_at))
        };
        self.record(lease, decision).await
    }
}
