//! The sequencer: appends recorded decisions to their tenants' hash-chained
//! logs in batches, so recording a decision never waits on a chain's head.

use std::{sync::Arc, time::Duration};

use countersign_store::{AuditLog, Changes, StoreEvent};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

/// Decisions appended per transaction.
const BATCH: u32 = 1_000;

/// How long a signalled decision waits for others to share its append. An
/// append is a round of its own whatever its size (the chain's head and the
/// next decisions read, planned for their parameters, the entries written,
/// the progress mark): one per decision at low rates was a fifth of the
/// database's planning time at 100 decisions/s.
const GATHER: Duration = Duration::from_millis(50);

pub struct Sequencer {
    pub log: Arc<dyn AuditLog>,
    /// What wakes it: decisions committed in this process.
    pub changes: Arc<dyn Changes>,
    /// How often it looks for decisions no signal announced (another process).
    pub every: Duration,
}

/// Resolves when a decision commits in this process (or signals were lost).
async fn decided(signals: &mut broadcast::Receiver<StoreEvent>) {
    loop {
        match signals.recv().await {
            Ok(event) if event.state.is_terminal() => break,
            Ok(_) => continue,
            Err(broadcast::error::RecvError::Lagged(_)) => break,
            Err(broadcast::error::RecvError::Closed) => std::future::pending().await,
        }
    }
}

impl Sequencer {
    pub async fn run(self, stop: CancellationToken) {
        let mut signals = self.changes.subscribe();
        while !stop.is_cancelled() {
            self.drain().await;
            tokio::select! {
                () = stop.cancelled() => {}
                () = decided(&mut signals) => {
                    tokio::select! {
                        () = stop.cancelled() => {}
                        () = tokio::time::sleep(GATHER) => {}
                    }
                    // One append answers every decision signalled so far.
                    while signals.try_recv().is_ok() {}
                }
                () = tokio::time::sleep(self.every) => {}
            }
        }
        // What was decided before the stop goes into the log now.
        self.drain().await;
    }

    /// Appends until nothing is left; returns how many.
    pub async fn drain(&self) -> u64 {
        let mut total = 0;
        loop {
            match self.log.append_audit(BATCH).await {
                Ok(n) => {
                    total += n;
                    if n > 0 {
                        metrics::counter!("countersign_audit_appended_total").increment(n);
                    }
                    if n < u64::from(BATCH) {
                        return total;
                    }
                }
                Err(error) => {
                    // The decisions stay where they are; the next round retries.
                    tracing::warn!(%error, "appending decisions to the audit log failed");
                    return total;
                }
            }
        }
    }
}
