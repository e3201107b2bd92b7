use async_trait::async_trait;

use crate::Result;

/// The store as a whole: which backend it is, its schema, its planner's
/// statistics (what start-up and the maintenance tasks call).
#[async_trait]
pub trait Lifecycle: Send + Sync + 'static {
    /// `sqlite` or `postgres`, for logs and span names.
    fn backend(&self) -> &'static str;

    /// Brings the schema up to date.
    async fn migrate(&self) -> Result<()>;

    /// Refreshes the planner's statistics of tables that grew or changed a
    /// lot since they were last gathered; returns how many tables it did.
    /// PostgreSQL only: SQLite plans without statistics (no ANALYZE ever
    /// runs; the plans that matter are pinned by tests), so it does nothing.
    async fn refresh_statistics(&self) -> Result<u64> {
        Ok(0)
    }
}
