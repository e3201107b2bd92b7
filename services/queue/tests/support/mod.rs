//! What the queue's suites share beyond `countersign-test-support`: enqueueing
//! fresh proposals and fetching them under a lease.

use std::time::Duration;

use countersign_queue::{Lease, Queue};

/// A lease no test outlives.
pub const LONG: Duration = Duration::from_secs(60);

/// Enqueues a new proposal of `tenant`; returns its id.
pub async fn enqueue(queue: &dyn Queue, tenant: &str) -> String {
    let id = countersign_test_support::random_name("p-");
    queue.enqueue(tenant, &id).await.unwrap();
    id
}

pub async fn fetch(queue: &dyn Queue, worker: &str, max: usize, lease: Duration) -> Vec<Lease> {
    queue.fetch(worker, max, lease).await.unwrap()
}
