use async_trait::async_trait;
use countersign_domain::audit::{AuditEntry, AuditFilter, Checkpoint, StoredEntry};

use crate::Result;

/// The tamper-evident audit log: the sequencer appends to it, the audit
/// service reads, verifies and checkpoints it.
#[async_trait]
pub trait AuditLog: Send + Sync + 'static {
    /// The sequencer's step: appends up to `limit` decisions not yet in their
    /// tenant's log, in commit order, in one transaction; returns how many.
    async fn append_audit(&self, limit: u32) -> Result<u64>;
    /// A tenant's log, newest first, below sequence `before`, as `filter` says.
    async fn list_audit(
        &self,
        tenant: &str,
        filter: &AuditFilter,
        before: Option<u64>,
        limit: u32,
    ) -> Result<Vec<AuditEntry>>;
    /// The log entry of one proposal's decision.
    async fn get_audit(&self, tenant: &str, proposal_id: &str) -> Result<Option<AuditEntry>>;
    /// Entries after sequence `after`, oldest first, exactly as stored, each
    /// with the copies of its record's fields the store keeps beside it (its
    /// filter columns, its decision row, its proposal's columns and state).
    async fn audit_range(&self, tenant: &str, after: u64, limit: u32) -> Result<Vec<StoredEntry>>;
    /// The newest entry's `(sequence, digest hex)`; `(0, 64 zeros)` when empty.
    async fn audit_head(&self, tenant: &str) -> Result<(u64, String)>;
    /// Keeps `checkpoint` unless the tenant has one of at least its size (the
    /// log has not grown since); returns the one kept: `checkpoint`, or the
    /// newest there was. Two saves at once keep one.
    async fn save_checkpoint(&self, checkpoint: &Checkpoint) -> Result<Checkpoint>;
    async fn latest_checkpoint(&self, tenant: &str) -> Result<Option<Checkpoint>>;
    /// The newest checkpoint of any tenant (what `serve` checks its signing
    /// key against at start).
    async fn newest_checkpoint(&self) -> Result<Option<Checkpoint>>;
}
