use async_trait::async_trait;
use countersign_domain::Millis;

use crate::{BreakerReset, RecentRejection, Result, ReviewKey};

/// What the rejection tier keeps: suppressed retries, breaker resets, and
/// the rejections its breakers count.
#[async_trait]
pub trait Suppressions: Send + Sync + 'static {
    /// Adds suppressed retries to rejected proposals and logs one SUPPRESSED
    /// event for each, in one transaction (a batch of retries, one write).
    async fn record_suppressed(&self, counts: Vec<(ReviewKey, u64)>) -> Result<()>;
    /// Closes an operator's breaker now (their earlier rejections stop counting).
    async fn reset_breaker(&self, tenant: &str, operator: &str) -> Result<()>;
    /// Breaker resets at or after `since`, oldest first.
    async fn breaker_resets(&self, since: Millis) -> Result<Vec<BreakerReset>>;
    /// Rejections decided at or after `since` (to rebuild breakers at start).
    async fn rejections_since(&self, since: Millis) -> Result<Vec<RecentRejection>>;
}
