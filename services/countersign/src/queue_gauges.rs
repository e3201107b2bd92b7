//! `countersign_queue_depth{tenant}` and
//! `countersign_queue_oldest_age_seconds{tenant}`, sampled from the queue,
//! and `countersign_escalations_open{tenant}`, from the store: every few
//! seconds, with every tenant of the store present (0 when it has nothing
//! waiting), so a dashboard sees a flat line rather than a gap.

use std::{collections::BTreeSet, time::Duration};

use countersign_queue::DynQueue;
use countersign_store::DynStore;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub const SAMPLE_EVERY: Duration = Duration::from_secs(5);

/// Samples until `stop` is cancelled.
pub fn spawn(store: DynStore, queue: DynQueue, stop: CancellationToken) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut shown = BTreeSet::new();
        while !stop.is_cancelled() {
            sample(&store, &queue, &mut shown).await;
            tokio::select! {
                () = stop.cancelled() => {}
                () = tokio::time::sleep(SAMPLE_EVERY) => {}
            }
        }
    })
}

async fn sample(store: &DynStore, queue: &DynQueue, shown: &mut BTreeSet<String>) {
    let depths = match queue.depth_by_tenant().await {
        Ok(depths) => depths,
        Err(error) => {
            tracing::debug!(%error, "queue gauges: sampling failed");
            return;
        }
    };
    // Tenants with nothing queued read 0, as do those that had entries before.
    if let Ok(tenants) = store.list_tenants().await {
        shown.extend(tenants.into_iter().map(|t| t.name));
    }
    for tenant in shown.iter() {
        if !depths.iter().any(|d| &d.tenant == tenant) {
            set(tenant, 0, Duration::ZERO);
        }
    }
    for depth in depths {
        set(&depth.tenant, depth.depth, depth.oldest_age);
        shown.insert(depth.tenant);
    }
    match store.open_escalations_by_tenant().await {
        Ok(open) => {
            for tenant in shown.iter() {
                let n = open
                    .iter()
                    .find(|(t, _)| t == tenant)
                    .map_or(0, |(_, n)| *n);
                metrics::gauge!("countersign_escalations_open", "tenant" => tenant.clone())
                    .set(n as f64);
            }
        }
        Err(error) => tracing::debug!(%error, "escalation gauge: sampling failed"),
    }
}

fn set(tenant: &str, depth: u64, oldest_age: Duration) {
    metrics::gauge!("countersign_queue_depth", "tenant" => tenant.to_owned()).set(depth as f64);
    metrics::gauge!("countersign_queue_oldest_age_seconds", "tenant" => tenant.to_owned())
        .set(oldest_age.as_secs_f64());
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use countersign_store::EmbeddedQueue;
    use countersign_store::{Lifecycle, SqliteStore};

    use super::*;

    #[tokio::test]
    async fn sampling_stops_when_told() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("c.db").display());
        let sqlite = SqliteStore::connect(&url).await.unwrap();
        sqlite.migrate().await.unwrap();
        let queue: DynQueue = Arc::new(EmbeddedQueue::new(sqlite.writer()));
        let stop = CancellationToken::new();
        let sampler = spawn(Arc::new(sqlite), queue, stop.clone());
        stop.cancel();
        tokio::time::timeout(Duration::from_secs(5), sampler)
            .await
            .expect("stopped at once")
            .unwrap();
    }
}
