//! Reclaims expired leases, times out reviews that ran past their deadline,
//! and expires escalations nobody completed in time.

use std::{sync::Arc, time::Duration};

use countersign_domain::review::{self, ReviewStamp};
use countersign_queue::DynQueue;
use countersign_store::{Escalations, RecordOutcome, Reviews};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::{ReviewerConfig, worker::now_ms};

/// The longest the janitor goes without looking for escalations that ran
/// out: its timer is set on the earliest `expires_at` it knows of, and this
/// bounds the wait for one opened meanwhile (by this process or another),
/// so every expiry is applied within about a second of its `expires_at`.
const EXPIRY_POLL: Duration = Duration::from_secs(1);

/// Escalations expired per store call.
const EXPIRE_BATCH: u32 = 256;

pub struct Janitor {
    pub id: String,
    pub store: Arc<dyn Reviews>,
    pub escalations: Arc<dyn Escalations>,
    pub queue: DynQueue,
    pub config: Arc<ReviewerConfig>,
}

impl Janitor {
    /// Sweeps every `janitor_every`, and expires escalations at their
    /// `expires_at` (or within [`EXPIRY_POLL`] of it). Everything it acts on
    /// is in the database, so a restarted janitor picks up where one left.
    pub async fn run(self, stop: CancellationToken) {
        let mut next_sweep = Instant::now();
        while !stop.is_cancelled() {
            if Instant::now() >= next_sweep {
                self.sweep().await;
                next_sweep = Instant::now() + self.config.janitor_every;
            }
            let next_expiry = self.expire().await;
            tokio::select! {
                () = stop.cancelled() => {}
                () = tokio::time::sleep_until(next_sweep.min(next_expiry)) => {}
            }
        }
    }

    pub async fn sweep(&self) {
        match self.queue.reclaim_expired().await {
            Ok(0) => {}
            Ok(n) => {
                tracing::info!(reclaimed = n, "expired leases reclaimed");
                metrics::counter!("countersign_lease_reclaims_total").increment(n);
            }
            Err(error) => tracing::warn!(%error, "lease reclaim failed"),
        }
        let deadline_ms = self.config.review_deadline.as_millis() as u64;
        let cutoff = now_ms() - deadline_ms as i64;
        let overdue = match self.store.overdue_reviews(cutoff, 256).await {
            Ok(overdue) => overdue,
            Err(error) => {
                tracing::warn!(%error, "overdue review scan failed");
                return;
            }
        };
        for review in overdue {
            let now = now_ms();
            let stamp = ReviewStamp {
                reviewer: self.id.clone(),
                decided_at: now,
                latency_ms: (now - review.started_at).max(0) as u64,
            };
            match self
                .store
                .record_decision(
                    &review.tenant,
                    &review.proposal_id,
                    review::timed_out(deadline_ms, stamp),
                )
                .await
            {
                Ok(RecordOutcome::Recorded) => {
                    tracing::warn!(proposal = %review.proposal_id, "review timed out");
                    metrics::counter!("countersign_reviews_total", "outcome" => "timed_out")
                        .increment(1);
                }
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(proposal = %review.proposal_id, %error, "time-out not recorded")
                }
            }
        }
    }

    /// Decides, as expired, every escalation that has run out (rejected,
    /// the `human` gate failed), then answers when to look again: at the
    /// next `expires_at`, or after [`EXPIRY_POLL`] at the latest.
    pub async fn expire(&self) -> Instant {
        let poll = Instant::now() + EXPIRY_POLL.min(self.config.janitor_every);
        loop {
            match self
                .escalations
                .expire_escalations(now_ms(), EXPIRE_BATCH)
                .await
            {
                Ok(expired) => {
                    metrics::counter!("countersign_escalations_expired_total")
                        .increment(expired.len() as u64);
                    for key in &expired {
                        tracing::info!(tenant = %key.tenant, proposal = %key.id, "escalation expired");
                    }
                    if expired.len() < EXPIRE_BATCH as usize {
                        break;
                    }
                }
                Err(error) => {
                    tracing::warn!(%error, "escalation expiry failed");
                    return poll;
                }
            }
        }
        match self.escalations.next_expiry().await {
            // One that is due already was just tried (and left, logged):
            // the next look is the poll's, not at once.
            Ok(Some(at)) if at > now_ms() => {
                // A millisecond past it: by then the clock has reached it.
                let wait = Duration::from_millis((at - now_ms()) as u64 + 1);
                poll.min(Instant::now() + wait)
            }
            Ok(_) => poll,
            Err(error) => {
                tracing::warn!(%error, "next escalation expiry unknown");
                poll
            }
        }
    }
}
