//! The outbox between the store and an external review queue (Redis). On
//! PostgreSQL, a proposal's `queue_entries` row is written in the proposal's
//! own transaction: once `Submit` answers OK the row is there, whatever the
//! queue's state. A publisher moves unpublished rows to the queue and marks
//! them; a sweeper re-publishes undecided proposals whose queue entry was lost.

use async_trait::async_trait;

use crate::{Result, ReviewKey};

#[async_trait]
pub trait Outbox: Send + Sync + 'static {
    /// Up to `limit` proposals (of every tenant) whose entry was never
    /// published, oldest first.
    async fn unpublished(&self, limit: u32) -> Result<Vec<ReviewKey>>;
    /// Marks these entries as published (a row already marked stays as it is).
    async fn mark_published(&self, keys: &[ReviewKey]) -> Result<()>;
    /// Up to `limit` undecided (PENDING or REVIEWING) proposals of every
    /// tenant whose entry was published, by id, after the id `after` (a page
    /// of the sweep; unpublished entries are the publisher's).
    async fn undecided(&self, after: Option<&str>, limit: u32) -> Result<Vec<ReviewKey>>;
}
