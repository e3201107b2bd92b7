//! Reclaims expired leases and times out reviews that ran past their deadline.

use std::sync::Arc;

use countersign_domain::review::{self, ReviewStamp};
use countersign_queue::DynQueue;
use countersign_store::{RecordOutcome, Reviews};
use tokio_util::sync::CancellationToken;

use crate::{ReviewerConfig, worker::now_ms};

pub struct Janitor {
    pub id: String,
    pub store: Arc<dyn Reviews>,
    pub queue: DynQueue,
    pub config: Arc<ReviewerConfig>,
}

impl Janitor {
    pub async fn run(self, stop: CancellationToken) {
        while !stop.is_cancelled() {
            self.sweep().await;
            tokio::select! {
                () = stop.cancelled() => {}
                () = tokio::time::sleep(self.config.janitor_every) => {}
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
}
