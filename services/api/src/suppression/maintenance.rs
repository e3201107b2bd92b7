//! The suppression's background work: write counted retries in batches, read
//! breaker resets, rebuild breakers at start.

use std::sync::Arc;

use countersign_domain::now_ms;
use countersign_store::Suppressions;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{MAX_BREAKER_WINDOW, Suppression, millis};

/// Runs until `shutdown` is cancelled; flushes once more on the way out.
pub fn spawn_maintenance(
    suppression: Arc<Suppression>,
    store: Arc<dyn Suppressions>,
    shutdown: CancellationToken,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let started = now_ms();
        let since = started - millis(MAX_BREAKER_WINDOW);
        match store.rejections_since(since).await {
            Ok(rejections) => rejections
                .iter()
                .for_each(|r| suppression.remember_rejection(r)),
            Err(error) => tracing::warn!(%error, "breakers start empty: rejections unreadable"),
        }
        let mut resets_seen = since;
        let mut tick = tokio::time::interval(suppression.config.flush_every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let stop = tokio::select! {
                () = shutdown.cancelled() => true,
                _ = tick.tick() => false,
            };
            flush(&suppression, &*store).await;
            match store.breaker_resets(resets_seen).await {
                Ok(resets) => {
                    for reset in &resets {
                        suppression.apply_reset(reset);
                        resets_seen = resets_seen.max(reset.reset_at);
                    }
                }
                Err(error) => tracing::warn!(%error, "reading breaker resets failed"),
            }
            suppression.forget_idle(now_ms());
            metrics::gauge!("countersign_suppression_cache_entries")
                .set(suppression.cached() as f64);
            if stop {
                return;
            }
        }
    })
}

async fn flush(suppression: &Suppression, store: &dyn Suppressions) {
    let counts = suppression.take_retries();
    if counts.is_empty() {
        return;
    }
    if let Err(error) = store.record_suppressed(counts.clone()).await {
        tracing::warn!(%error, "writing suppressed retries failed; kept for the next flush");
        suppression.restore_retries(counts);
    }
}
