//! `countersign_queue_depth{tenant}` and
//! `countersign_queue_oldest_age_seconds{tenant}`, sampled from the queue,
//! and `countersign_escalations_open{tenant}`, from the store: every few
//! seconds, with every tenant of the store present (0 when it has nothing
//! waiting), so a dashboard sees a flat line rather than a gap. Each queue
//! sample is recorded in [`QueueDepths`] too, for the console's Tenant page.

use std::{collections::BTreeSet, time::Duration};

use countersign_api::{QueueDepth, QueueDepths};
use countersign_domain::now_ms;
use countersign_queue::DynQueue;
use countersign_store::DynStore;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub const SAMPLE_EVERY: Duration = Duration::from_secs(5);

/// Samples until `stop` is cancelled.
pub fn spawn(
    store: DynStore,
    queue: DynQueue,
    depths: QueueDepths,
    stop: CancellationToken,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut shown = BTreeSet::new();
        while !stop.is_cancelled() {
            sample(&store, &queue, &depths, &mut shown).await;
            tokio::select! {
                () = stop.cancelled() => {}
                () = tokio::time::sleep(SAMPLE_EVERY) => {}
            }
        }
    })
}

async fn sample(
    store: &DynStore,
    queue: &DynQueue,
    latest: &QueueDepths,
    shown: &mut BTreeSet<String>,
) {
    let depths = match queue.depth_by_tenant().await {
        Ok(depths) => depths,
        Err(error) => {
            tracing::debug!(%error, "queue gauges: sampling failed");
            return;
        }
    };
    let sampled_at = now_ms();
    let set = |tenant: &str, depth: u64, oldest_age: Duration| {
        gauges(tenant, depth, oldest_age);
        latest.record(
            tenant,
            QueueDepth {
                depth,
                oldest_age,
                sampled_at,
            },
        );
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

fn gauges(tenant: &str, depth: u64, oldest_age: Duration) {
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

    /// A migrated embedded store and its queue (the directory keeps them).
    async fn embedded() -> (DynStore, DynQueue, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("c.db").display());
        let sqlite = SqliteStore::connect(&url).await.unwrap();
        sqlite.migrate().await.unwrap();
        let queue: DynQueue = Arc::new(EmbeddedQueue::new(sqlite.writer()));
        (Arc::new(sqlite), queue, dir)
    }

    #[tokio::test]
    async fn sampling_stops_when_told() {
        let (store, queue, _dir) = embedded().await;
        let stop = CancellationToken::new();
        let sampler = spawn(store, queue, QueueDepths::default(), stop.clone());
        stop.cancel();
        tokio::time::timeout(Duration::from_secs(5), sampler)
            .await
            .expect("stopped at once")
            .unwrap();
    }

    #[tokio::test]
    async fn each_sample_records_every_tenants_depth_for_the_console() {
        let (store, queue, _dir) = embedded().await;
        store.create_tenant("acme").await.unwrap();
        store.create_tenant("globex").await.unwrap();
        queue.enqueue("acme", "p-1").await.unwrap();
        queue.enqueue("acme", "p-2").await.unwrap();
        let latest = QueueDepths::default();
        let before = now_ms();
        sample(&store, &queue, &latest, &mut BTreeSet::new()).await;
        let acme = latest.of("acme").expect("a tenant with entries");
        assert_eq!(acme.depth, 2);
        assert!(acme.sampled_at >= before);
        let globex = latest
            .of("globex")
            .expect("a tenant without entries reads 0");
        assert_eq!((globex.depth, globex.oldest_age), (0, Duration::ZERO));
    }
}
