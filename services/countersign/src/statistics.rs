//! Keeps the planner's statistics current while the service writes: every few
//! seconds the store refreshes those of tables that changed a lot (PostgreSQL;
//! see migrations/postgres/0009_statistics.sql). Every process asks; one at a
//! time does it.

use std::time::Duration;

use countersign_store::DynStore;
use tokio::sync::watch;

pub const REFRESH_EVERY: Duration = Duration::from_secs(5);

/// Refreshes until `stop` turns true. A failure is logged and tried again at
/// the next turn: statistics are an optimisation, never a reason to stop.
pub async fn keep(store: DynStore, mut stop: watch::Receiver<bool>) {
    while !*stop.borrow() {
        tokio::select! {
            _ = stop.changed() => continue,
            () = tokio::time::sleep(REFRESH_EVERY) => {}
        }
        match store.refresh_statistics().await {
            Ok(0) => {}
            Ok(tables) => tracing::debug!(tables, "planner statistics refreshed"),
            Err(error) => tracing::warn!(%error, "refreshing planner statistics failed"),
        }
    }
}
