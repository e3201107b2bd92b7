//! What the queue holds per tenant, as this process's queue sampler last saw
//! it. The queue belongs to the composition root, not to the API: the sampler
//! that feeds the queue gauges records each tenant's depth here too, and the
//! console's Tenant page reads it (as of `sampled_at`, every few seconds).

use std::{
    collections::HashMap,
    sync::{Arc, PoisonError, RwLock},
    time::Duration,
};

use countersign_domain::Millis;

/// One tenant's entries waiting in the queue when it was sampled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueDepth {
    pub depth: u64,
    /// How long the oldest of them has waited (zero when none waits).
    pub oldest_age: Duration,
    pub sampled_at: Millis,
}

/// The latest [`QueueDepth`] of every tenant sampled; shared by the sampler
/// (writes) and the console (reads).
#[derive(Clone, Debug, Default)]
pub struct QueueDepths(Arc<RwLock<HashMap<String, QueueDepth>>>);

impl QueueDepths {
    pub fn record(&self, tenant: &str, depth: QueueDepth) {
        self.0
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(tenant.to_owned(), depth);
    }

    /// The tenant's latest sample; none before the first.
    pub fn of(&self, tenant: &str) -> Option<QueueDepth> {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(tenant)
            .copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_latest_sample_of_each_tenant_is_read_back() {
        let depths = QueueDepths::default();
        assert_eq!(depths.of("acme"), None);
        let first = QueueDepth {
            depth: 3,
            oldest_age: Duration::from_secs(2),
            sampled_at: 1_000,
        };
        let second = QueueDepth {
            depth: 0,
            oldest_age: Duration::ZERO,
            sampled_at: 6_000,
        };
        depths.record("acme", first);
        depths.clone().record("acme", second);
        depths.record("globex", first);
        assert_eq!(depths.of("acme"), Some(second));
        assert_eq!(depths.of("globex"), Some(first));
        assert_eq!(depths.of("initech"), None);
    }
}
