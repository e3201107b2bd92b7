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
            // Stopped, or the sender is gone (nobody left to stop it).
            changed = stop.changed() => match changed {
                Ok(()) => continue,
                Err(_) => break,
            },
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
    use std::{sync::Arc, time::Duration};

    use countersign_store::SqliteStore;

    use super::*;

    async fn store(dir: &tempfile::TempDir) -> DynStore {
        let url = format!("sqlite://{}", dir.path().join("c.db").display());
        Arc::new(SqliteStore::connect(&url).await.expect("store"))
    }

    #[tokio::test]
    async fn the_keeper_stops_when_told() {
        let dir = tempfile::tempdir().unwrap();
        let (stop, stopped) = watch::channel(false);
        let keeper = tokio::spawn(keep(store(&dir).await, stopped));
        stop.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(5), keeper)
            .await
            .expect("stopped at once")
            .unwrap();
    }

    #[tokio::test]
    async fn the_keeper_ends_when_nobody_is_left_to_stop_it_rather_than_spin() {
        let dir = tempfile::tempdir().unwrap();
        let (stop, stopped) = watch::channel(false);
        let keeper = tokio::spawn(keep(store(&dir).await, stopped));
        drop(stop);
        tokio::time::timeout(Duration::from_secs(5), keeper)
            .await
            .expect("ended at once")
            .unwrap();
    }
}
