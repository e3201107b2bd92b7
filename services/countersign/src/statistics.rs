//! Keeps the planner's statistics current while the service writes: every few
//! seconds the store refreshes those of tables that changed a lot (PostgreSQL;
//! see migrations/postgres/0009_statistics.sql). Every process asks; one at a
//! time does it.

use std::{sync::Arc, time::Duration};

use countersign_store::Lifecycle;
use tokio_util::sync::CancellationToken;

pub const REFRESH_EVERY: Duration = Duration::from_secs(5);

/// Refreshes until `stop` is cancelled. A failure is logged and tried again
/// at the next turn: statistics are an optimisation, never a reason to stop.
pub async fn keep(store: Arc<dyn Lifecycle>, stop: CancellationToken) {
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(REFRESH_EVERY) => {}
        }
        match store.refresh_statistics().await {
            Ok(0) => {}
            Ok(tables) => tracing::debug!(tables, "planner statistics refreshed"),
            Err(error) => tracing::warn!(%error, "refreshing planner statistics failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use countersign_store::SqliteStore;

    use super::*;

    async fn store(dir: &tempfile::TempDir) -> Arc<dyn Lifecycle> {
        let url = format!("sqlite://{}", dir.path().join("c.db").display());
        Arc::new(SqliteStore::connect(&url).await.expect("store"))
    }

    #[tokio::test]
    async fn the_keeper_stops_when_told() {
        let dir = tempfile::tempdir().unwrap();
        let stop = CancellationToken::new();
        let keeper = tokio::spawn(keep(store(&dir).await, stop.clone()));
        stop.cancel();
        tokio::time::timeout(Duration::from_secs(5), keeper)
            .await
            .expect("stopped at once")
            .unwrap();
    }
}
