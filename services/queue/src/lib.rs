//! The review queue: proposals wait here for a reviewer. At-least-once: a
//! leased entry that is not acked before its lease runs out is handed out
//! again; exactly-once *decisions* are the store's job. The trait and the
//! Redis Streams backend live here, with what makes "accepted means queued"
//! hold on Redis: the outbox's publisher and sweeper (`outbox.rs`), the
//! connect loop (`redis/connect.rs`) and the cross-process enqueue wake-ups
//! (`wake.rs`). The embedded backend is the SQLite database's own table
//! (`countersign_store::EmbeddedQueue`), filled by trigger.

mod outbox;
mod redis;
mod wake;

use std::{sync::Arc, time::Duration};

use async_trait::async_trait;
use countersign_domain::{ErrorKind, Millis, ServiceError};

pub use outbox::{Outbox, OutboxConfig, OutboxTasks, Publisher, Submissions, Sweeper};
pub use redis::{Consumer, DeadLetter, RedisQueue, RedisQueueOptions};
pub use wake::{announce_enqueued, relay_enqueued};

/// How much one tenant has waiting: entries not yet acked or dead-lettered,
/// and how long the oldest of them has been in the queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantDepth {
    pub tenant: String,
    pub depth: u64,
    pub oldest_age: Duration,
}

/// One entry handed to one worker until `expires_at`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The backend's id of the entry: the row id of the embedded queue, the
    /// stream entry id (`<ms>-<seq>`) of the Redis queue. Opaque to callers.
    pub entry_id: String,
    pub tenant: String,
    pub proposal_id: String,
    /// How many times this entry has been leased, this time included.
    pub attempts: u32,
    /// Proves the holder: a stale holder's ack or extend does nothing.
    pub token: String,
    pub expires_at: Millis,
}

/// What a queue operation could not do. The backend's own error is kept as
/// the source (for the log), never as its type.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    #[error("queue unavailable: {0}")]
    Unavailable(String),
    #[error("queue error: {0}")]
    Backend(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl QueueError {
    /// A backend's error, kept as the source.
    pub fn backend(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        QueueError::Backend(Box::new(error))
    }
}

impl ServiceError for QueueError {
    fn kind(&self) -> ErrorKind {
        ErrorKind::Unavailable
    }
}

pub type Result<T, E = QueueError> = std::result::Result<T, E>;

#[async_trait]
pub trait Queue: Send + Sync + 'static {
    /// Adds an entry for a proposal (idempotent per proposal).
    async fn enqueue(&self, tenant: &str, proposal_id: &str) -> Result<()>;
    /// Leases up to `max` ready entries to `worker` for `lease`, interleaving
    /// tenants so one that floods cannot starve the others.
    async fn fetch(&self, worker: &str, max: usize, lease: Duration) -> Result<Vec<Lease>>;
    /// [`Queue::fetch`] from only the tenants none of whose entries is leased
    /// now (tenants nobody is reviewing), the oldest ready entry of each. The
    /// express reviewers' fetch: a tenant's next proposal is not held behind
    /// the batches of one with a backlog (which keep every other worker busy),
    /// and an express batch stays short even when that tenant is between
    /// batches and so counts as idle.
    async fn fetch_idle_tenants(
        &self,
        worker: &str,
        max: usize,
        lease: Duration,
    ) -> Result<Vec<Lease>>;
    /// Extends a lease still held; false if it was lost.
    async fn extend(&self, lease: &Lease, by: Duration) -> Result<bool>;
    /// Done: the entry goes.
    async fn ack(&self, lease: &Lease) -> Result<()>;
    /// [`Queue::ack`] for many leases at once.
    async fn ack_many(&self, leases: &[Lease]) -> Result<()> {
        for lease in leases {
            self.ack(lease).await?;
        }
        Ok(())
    }
    /// Gives the entry back, ready again after `delay`.
    async fn release(&self, lease: &Lease, delay: Duration) -> Result<()>;
    /// Makes entries whose lease ran out ready again; returns how many.
    async fn reclaim_expired(&self) -> Result<u64>;
    /// Parks an entry for good, with the reason (its proposal must already be decided).
    async fn dead_letter(&self, lease: &Lease, reason: &str) -> Result<()>;
    /// Entries not yet acked or dead-lettered.
    async fn depth(&self) -> Result<u64>;
    /// [`Queue::depth`] per tenant with entries, with the age of the oldest
    /// (what the queue gauges sample).
    async fn depth_by_tenant(&self) -> Result<Vec<TenantDepth>>;
    /// A signal that moves whenever this process enqueues an entry, for a
    /// queue that cannot tell its workers otherwise (Redis: the publisher and
    /// the workers of one process). None: the workers rely on the store's
    /// submission events (the embedded queue) or their idle poll.
    fn enqueued(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        None
    }
}

pub type DynQueue = Arc<dyn Queue>;
