//! Storage for Countersign behind one [`Store`] trait: SQLite is the embedded
//! default, PostgreSQL the production backend. Every query is scoped by tenant
//! here, in the repository layer.

mod error;
mod facts;
mod group_commit;
pub mod postgres;
mod recording;
mod rows;
pub mod sqlite;
mod types;

use std::sync::Arc;

use async_trait::async_trait;
use countersign_domain::{
    Decision, Millis, Proposal, ProposalSpec, Role, Sop, Target, TargetStatus,
    audit::{AuditEntry, AuditFilter, Checkpoint, StoredEntry},
    gates::ReviewFacts,
};

pub use countersign_domain::{
    Event, EventHorizon, EventKind, ReviewKey, TenantPolicy, reference::SopInput,
};
pub use error::StoreError;
pub use postgres::PostgresStore;
pub use sqlite::{EmbeddedQueue, SqliteStore, SqliteWriter, Synchronous, database_file};
pub use types::{
    ApiKeyRecord, BeginReview, BootstrapKey, BreakerReset, NewApiKey, NewProposal, OverdueReview,
    RecentRejection, RecordOutcome, StoreEvent, SubmitOutcome, Tenant, validate_tenant_name,
};

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// A shared handle to whichever backend is configured.
pub type DynStore = Arc<dyn Store>;

#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// `sqlite` or `postgres`, for logs and span names.
    fn backend(&self) -> &'static str;

    /// Brings the schema up to date.
    async fn migrate(&self) -> Result<()>;

    /// On an empty database: creates tenant `default` and an admin key for it,
    /// in one transaction, and returns the key. Otherwise `None`.
    async fn bootstrap(&self) -> Result<Option<BootstrapKey>>;

    async fn create_tenant(&self, name: &str) -> Result<Tenant>;
    async fn get_tenant(&self, name: &str) -> Result<Option<Tenant>>;
    async fn list_tenants(&self) -> Result<Vec<Tenant>>;
    async fn set_tenant_policy(&self, name: &str, policy: TenantPolicy) -> Result<Tenant>;

    /// Mints a key; the returned text is the only time it exists unhashed.
    async fn create_api_key(&self, new: NewApiKey) -> Result<(ApiKeyRecord, String)>;
    async fn find_api_key(&self, id: &str) -> Result<Option<ApiKeyRecord>>;
    async fn list_api_keys(&self, tenant: Option<&str>) -> Result<Vec<ApiKeyRecord>>;
    async fn revoke_api_key(&self, id: &str) -> Result<ApiKeyRecord>;

    /// Stores a PENDING proposal, honouring its idempotency key.
    async fn insert_proposal(&self, new: NewProposal) -> Result<SubmitOutcome>;
    /// The earlier proposal that holds `spec`'s idempotency key, if it has the
    /// same spec (what [`Store::insert_proposal`] would answer, deduplicated);
    /// `AlreadyExists` if another spec holds it; `None` for a free key or none.
    async fn find_idempotent(&self, tenant: &str, spec: &ProposalSpec) -> Result<Option<Proposal>>;
    async fn get_proposal(&self, tenant: &str, id: &str) -> Result<Option<Proposal>>;
    /// PENDING or REVIEWING becomes CANCELLED; terminal is `FailedPrecondition`.
    async fn cancel_proposal(&self, tenant: &str, id: &str, reason: &str) -> Result<Proposal> {
        self.cancel_proposal_by(tenant, id, reason, None).await
    }
    /// [`Store::cancel_proposal`], limited to what `key` submitted if given:
    /// a proposal another key submitted (or none recorded) is then
    /// `PermissionDenied`, whatever its state.
    async fn cancel_proposal_by(
        &self,
        tenant: &str,
        id: &str,
        reason: &str,
        key: Option<&str>,
    ) -> Result<Proposal>;

    /// Creates or replaces an SOP; each put bumps its version.
    async fn put_sop(&self, tenant: &str, sop: SopInput) -> Result<Sop>;
    async fn get_sop(&self, tenant: &str, id: &str) -> Result<Option<Sop>>;
    /// A page of the tenant's SOPs in id order (byte order): those after
    /// `after` (none: from the first), at most `limit`, retired ones only
    /// with `include_retired`.
    async fn list_sops(
        &self,
        tenant: &str,
        include_retired: bool,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Sop>>;
    /// Retires an SOP (a new version); it no longer covers anything.
    async fn retire_sop(&self, tenant: &str, id: &str) -> Result<Sop>;

    async fn put_target(
        &self,
        tenant: &str,
        id: &str,
        status: TargetStatus,
        labels: std::collections::BTreeMap<String, String>,
    ) -> Result<Target>;
    async fn get_target(&self, tenant: &str, id: &str) -> Result<Option<Target>>;
    /// A page of the tenant's targets in id order (byte order): those after
    /// `after` (none: from the first), at most `limit`.
    async fn list_targets(
        &self,
        tenant: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Target>>;

    /// Moves the PENDING proposals of `items` to REVIEWING (with their events)
    /// in one transaction; a REVIEWING one (redelivered) stays so and keeps its
    /// first start time. Answers in order.
    async fn begin_reviews(&self, items: &[ReviewKey]) -> Result<Vec<BeginReview>>;
    /// Everything the gates look at, as of now, for a batch, in order, from
    /// one snapshot where the backend has them: the outer error fails the
    /// whole batch, an inner one only its proposal.
    async fn review_facts_many(&self, proposals: &[Proposal]) -> Result<Vec<Result<ReviewFacts>>>;
    /// Writes the decision, the state change and its event in one transaction,
    /// only if the proposal is still open. Approvals are re-checked against the
    /// SOP and target as they are at commit.
    async fn record_decision(
        &self,
        tenant: &str,
        id: &str,
        decision: Decision,
    ) -> Result<RecordOutcome> {
        let key = ReviewKey {
            tenant: tenant.to_owned(),
            id: id.to_owned(),
        };
        let mut recorded = self.record_decisions(vec![(key, decision)]).await?;
        recorded
            .pop()
            .ok_or_else(|| StoreError::NotFound(format!("proposal `{id}`")))
    }
    /// [`Store::record_decision`] for many in one transaction, in order.
    async fn record_decisions(
        &self,
        items: Vec<(ReviewKey, Decision)>,
    ) -> Result<Vec<RecordOutcome>>;
    /// Reviews that started before `started_before` and are still REVIEWING.
    async fn overdue_reviews(
        &self,
        started_before: Millis,
        limit: u32,
    ) -> Result<Vec<OverdueReview>>;

    /// Logged events, oldest first, each with its proposal as the event left
    /// it: with `tenant`, that tenant's events after its own cursor `after` (a
    /// watcher's replay); with `None`, every tenant's after log position
    /// `after` (the fan-out). See [`Event`] for the two numberings.
    async fn events_after(
        &self,
        after: u64,
        tenant: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Event>>;
    /// How far the log reaches back, and its newest: `tenant`'s part in its
    /// own cursors, or (`None`) the whole log in positions.
    async fn event_horizon(&self, tenant: Option<&str>) -> Result<EventHorizon>;
    /// Deletes events committed before `created_before`; returns how many.
    async fn prune_events(&self, created_before: Millis) -> Result<u64>;
    /// Refreshes the planner's statistics of tables that grew or changed a
    /// lot since they were last gathered; returns how many tables it did.
    /// PostgreSQL only: SQLite plans without statistics (no ANALYZE ever
    /// runs; the plans that matter are pinned by tests), so it does nothing.
    async fn refresh_statistics(&self) -> Result<u64> {
        Ok(0)
    }

    /// Adds suppressed retries to rejected proposals and logs one SUPPRESSED
    /// event for each, in one transaction (a batch of retries, one write).
    async fn record_suppressed(&self, counts: Vec<(ReviewKey, u64)>) -> Result<()>;
    /// Closes an operator's breaker now (their earlier rejections stop counting).
    async fn reset_breaker(&self, tenant: &str, operator: &str) -> Result<()>;
    /// Breaker resets at or after `since`, oldest first.
    async fn breaker_resets(&self, since: Millis) -> Result<Vec<BreakerReset>>;
    /// Rejections decided at or after `since` (to rebuild breakers at start).
    async fn rejections_since(&self, since: Millis) -> Result<Vec<RecentRejection>>;

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

    /// State changes as they commit in this process (a wake-up signal; the
    /// events table is the record).
    fn subscribe(&self) -> tokio::sync::broadcast::Receiver<StoreEvent>;
}

/// Opens the store a URL names: `sqlite://…` or `postgres://…`.
pub async fn connect(url: &str) -> Result<DynStore> {
    if url.starts_with("sqlite:") {
        Ok(Arc::new(SqliteStore::connect(url).await?))
    } else if url.starts_with("postgres:") || url.starts_with("postgresql:") {
        Ok(Arc::new(PostgresStore::connect(url).await?))
    } else {
        Err(StoreError::Unsupported(format!(
            "database URL must start with sqlite:// or postgres:// (got `{}`)",
            url.split(':').next().unwrap_or_default()
        )))
    }
}

pub(crate) use countersign_domain::now_ms;

pub(crate) fn role_from_db(s: &str) -> Result<Role> {
    s.parse()
        .map_err(|e| StoreError::Corrupt(format!("api_keys.role: {e}")))
}
