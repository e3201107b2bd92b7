//! Where rejections are cached. The in-process LRU is the first tier; a shared
//! tier (Redis, so a retry routed to another replica is suppressed too) fits
//! the same trait.

use std::{sync::Arc, time::Duration};

use countersign_domain::{Millis, Proposal};
use moka::sync::Cache;

/// A cached rejection.
#[derive(Debug)]
pub struct Entry {
    /// The rejected proposal, with its decision.
    pub proposal: Arc<Proposal>,
    pub expires_at: Millis,
    /// When its review started: a change to its SOPs or target after this
    /// makes it stale.
    pub review_started: Millis,
}

pub trait SuppressionTier: Send + Sync {
    fn get(&self, fingerprint: &str) -> Option<Arc<Entry>>;
    fn put(&self, fingerprint: String, entry: Arc<Entry>);
    fn remove(&self, fingerprint: &str);
    fn clear(&self);
    fn entries(&self) -> u64;
}

/// A bounded LRU with a TTL, in this process.
pub struct LocalTier {
    cache: Cache<String, Arc<Entry>>,
}

impl LocalTier {
    pub fn new(capacity: u64, ttl: Duration) -> Self {
        LocalTier {
            cache: Cache::builder()
                .max_capacity(capacity)
                .time_to_live(ttl.max(Duration::from_millis(1)))
                .build(),
        }
    }
}

impl SuppressionTier for LocalTier {
    fn get(&self, fingerprint: &str) -> Option<Arc<Entry>> {
        self.cache.get(fingerprint)
    }

    fn put(&self, fingerprint: String, entry: Arc<Entry>) {
        self.cache.insert(fingerprint, entry);
    }

    fn remove(&self, fingerprint: &str) {
        self.cache.invalidate(fingerprint);
    }

    fn clear(&self) {
        self.cache.invalidate_all();
    }

    fn entries(&self) -> u64 {
        self.cache.run_pending_tasks();
        self.cache.entry_count()
    }
}
