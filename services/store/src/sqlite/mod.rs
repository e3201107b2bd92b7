//! The embedded backend: one SQLite file in WAL mode. Writes go through a
//! single connection (SQLite has one writer anyway, and this way no writer
//! ever sees `SQLITE_BUSY` from another of ours); reads use a small pool.

mod audit;
mod events;
mod group_commit;
mod keys;
mod proposals;
mod reference;
mod review;
mod suppression;
mod tenants;
mod writes;

pub use writes::{SqliteWriter, WriteThreadStopped};

use std::{str::FromStr, time::Duration};

use async_trait::async_trait;
use countersign_domain::{
    Decision, Event, EventHorizon, Millis, Proposal, ProposalSpec, Sop, Target, TargetStatus,
    audit::{AuditEntry, AuditFilter, Checkpoint, StoredEntry},
    gates::ReviewFacts,
};
use sqlx::{
    ConnectOptions, SqlitePool,
    sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous},
};
use tokio::sync::broadcast;

use crate::{
    ApiKeyRecord, BeginReview, BootstrapKey, BreakerReset, NewApiKey, NewProposal, OverdueReview,
    RecentRejection, RecordOutcome, Result, ReviewKey, SopInput, Store, StoreError, StoreEvent,
    SubmitOutcome, Tenant, TenantPolicy,
};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations/sqlite");

/// How the embedded store commits (SQLite's `synchronous`, in WAL mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Synchronous {
    /// Every commit is synced before it is answered: an OK survives an OS
    /// crash or power loss. Group commit shares one sync among the callers
    /// of a batch.
    #[default]
    Full,
    /// Commits are synced at WAL checkpoints only: an OK survives any crash of
    /// the process, but an OS crash or power loss can drop the last commits
    /// that were answered OK.
    Normal,
}

#[derive(Debug, Clone)]
pub struct SqliteStore {
    /// The single writer connection, and the thread its hot paths run on.
    writer: SqliteWriter,
    reader: SqlitePool,
    events: broadcast::Sender<StoreEvent>,
    submitter: crate::group_commit::Submitter,
}

impl SqliteStore {
    /// Opens (creating if missing) the database a `sqlite://` URL names.
    /// The single writer connection, shared with the embedded queue (whose
    /// table the proposal insert writes in the same transaction).
    pub fn writer_pool(&self) -> SqlitePool {
        self.writer.pool().clone()
    }

    /// The writer pool with the thread its hot paths run on (see `writes`).
    pub fn writer(&self) -> SqliteWriter {
        self.writer.clone()
    }

    /// The `synchronous` setting the writer commits with, as SQLite reports it.
    pub async fn synchronous(&self) -> Result<Synchronous> {
        let level: i64 = sqlx::query_scalar("PRAGMA synchronous")
            .fetch_one(self.writer.pool())
            .await?;
        match level {
            1 => Ok(Synchronous::Normal),
            2 => Ok(Synchronous::Full),
            other => Err(StoreError::Corrupt(format!(
                "PRAGMA synchronous is {other}: neither NORMAL (1) nor FULL (2)"
            ))),
        }
    }

    fn publish(&self, event: Option<StoreEvent>) {
        if let Some(event) = event {
            // No subscriber is fine: the event is in the table either way.
            let _ = self.events.send(event);
        }
    }

    /// Opens the database with every commit synced ([`Synchronous::Full`]).
    pub async fn connect(url: &str) -> Result<Self> {
        SqliteStore::connect_with(url, Synchronous::Full).await
    }

    /// Opens (creating if missing) the database a `sqlite://` URL names,
    /// committing as `synchronous` says.
    /// A database file it creates is readable by its owner only (mode 0600),
    /// and so are the WAL and shared-memory files SQLite makes beside it
    /// (they take the database file's mode).
    pub async fn connect_with(url: &str, synchronous: Synchronous) -> Result<Self> {
        let options = SqliteConnectOptions::from_str(url)?;
        create_owner_only(options.get_filename())?;
        let options = options
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(match synchronous {
                Synchronous::Full => SqliteSynchronous::Full,
                Synchronous::Normal => SqliteSynchronous::Normal,
            })
            .busy_timeout(Duration::from_secs(10))
            .foreign_keys(true)
            // A statement this slow is a finding: it goes to the log.
            .log_slow_statements(log::LevelFilter::Warn, Duration::from_millis(250));
        // No liveness check on acquire: a file needs none, and for SQLite it is
        // one more hand-off to the connection's thread per acquisition.
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .test_before_acquire(false)
            .acquire_timeout(Duration::from_secs(30))
            .connect_with(options.clone())
            .await?;
        let reader = SqlitePoolOptions::new()
            .max_connections(8)
            .test_before_acquire(false)
            .acquire_timeout(Duration::from_secs(30))
            .connect_with(options.read_only(true))
            .await?;
        let (events, _) = broadcast::channel(4096);
        let writer = SqliteWriter::start(writer)
            .map_err(|e| StoreError::Unavailable(format!("starting the write thread: {e}")))?;
        let submitter = group_commit::start(writer.clone());
        Ok(SqliteStore {
            writer,
            reader,
            events,
            submitter,
        })
    }
}

/// The file a `sqlite:` URL names (`None` for an in-memory database).
pub fn database_file(url: &str) -> Result<Option<std::path::PathBuf>> {
    let options = SqliteConnectOptions::from_str(url)?;
    let path = options.get_filename();
    Ok(
        (!path.as_os_str().is_empty() && path != std::path::Path::new(":memory:"))
            .then(|| path.to_path_buf()),
    )
}

/// Creates an empty database file (SQLite takes an empty file for an empty
/// database) with mode 0600, where there is none yet; an existing file is
/// left as it is. A missing directory is left for the open to report.
fn create_owner_only(path: &std::path::Path) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;

    if path.as_os_str().is_empty() || path == std::path::Path::new(":memory:") {
        return Ok(());
    }
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::AlreadyExists | std::io::ErrorKind::NotFound
            ) =>
        {
            Ok(())
        }
        Err(e) => Err(StoreError::Unavailable(format!(
            "creating {}: {e}",
            path.display()
        ))),
    }
}

#[async_trait]
impl Store for SqliteStore {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    #[tracing::instrument(name = "store.sqlite.migrate", skip_all)]
    async fn migrate(&self) -> Result<()> {
        MIGRATOR.run(self.writer.pool()).await?;
        Ok(())
    }

    async fn bootstrap(&self) -> Result<Option<BootstrapKey>> {
        tenants::bootstrap(self.writer.pool()).await
    }

    async fn create_tenant(&self, name: &str) -> Result<Tenant> {
        tenants::create(self.writer.pool(), name).await
    }

    async fn get_tenant(&self, name: &str) -> Result<Option<Tenant>> {
        tenants::get(&self.reader, name).await
    }

    async fn list_tenants(&self) -> Result<Vec<Tenant>> {
        tenants::list(&self.reader).await
    }

    async fn set_tenant_policy(&self, name: &str, policy: TenantPolicy) -> Result<Tenant> {
        tenants::set_policy(self.writer.pool(), name, policy).await
    }

    async fn create_api_key(&self, new: NewApiKey) -> Result<(ApiKeyRecord, String)> {
        keys::create(self.writer.pool(), new).await
    }

    async fn find_api_key(&self, id: &str) -> Result<Option<ApiKeyRecord>> {
        keys::find(&self.reader, id).await
    }

    async fn list_api_keys(&self, tenant: Option<&str>) -> Result<Vec<ApiKeyRecord>> {
        keys::list(&self.reader, tenant).await
    }

    async fn revoke_api_key(&self, id: &str) -> Result<ApiKeyRecord> {
        keys::revoke(self.writer.pool(), id).await
    }

    #[tracing::instrument(
        name = "store.sqlite.insert_proposal",
        level = "debug",
        skip_all,
        fields(tenant = %new.tenant, proposal_id = tracing::field::Empty)
    )]
    async fn insert_proposal(&self, new: NewProposal) -> Result<SubmitOutcome> {
        let (outcome, event) = self.submitter.submit(new).await?;
        self.publish(event);
        tracing::Span::current().record("proposal_id", outcome.proposal().id.as_str());
        Ok(outcome)
    }

    async fn get_proposal(&self, tenant: &str, id: &str) -> Result<Option<Proposal>> {
        proposals::get(&self.reader, tenant, id).await
    }

    async fn find_idempotent(&self, tenant: &str, spec: &ProposalSpec) -> Result<Option<Proposal>> {
        proposals::find_idempotent(&self.reader, tenant, spec).await
    }

    async fn cancel_proposal_by(
        &self,
        tenant: &str,
        id: &str,
        reason: &str,
        key: Option<&str>,
    ) -> Result<Proposal> {
        let (proposal, event) =
            proposals::cancel(self.writer.pool(), tenant, id, reason, key).await?;
        self.publish(Some(event));
        Ok(proposal)
    }

    async fn put_sop(&self, tenant: &str, sop: SopInput) -> Result<Sop> {
        reference::put_sop(self.writer.pool(), tenant, sop).await
    }

    async fn get_sop(&self, tenant: &str, id: &str) -> Result<Option<Sop>> {
        reference::get_sop(&self.reader, tenant, id).await
    }

    async fn list_sops(
        &self,
        tenant: &str,
        include_retired: bool,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Sop>> {
        reference::list_sops(&self.reader, tenant, include_retired, after, limit).await
    }

    async fn retire_sop(&self, tenant: &str, id: &str) -> Result<Sop> {
        reference::retire_sop(self.writer.pool(), tenant, id).await
    }

    async fn put_target(
        &self,
        tenant: &str,
        id: &str,
        status: TargetStatus,
        labels: std::collections::BTreeMap<String, String>,
    ) -> Result<Target> {
        reference::put_target(self.writer.pool(), tenant, id, status, labels).await
    }

    async fn get_target(&self, tenant: &str, id: &str) -> Result<Option<Target>> {
        reference::get_target(&self.reader, tenant, id).await
    }

    async fn list_targets(
        &self,
        tenant: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Target>> {
        reference::list_targets(&self.reader, tenant, after, limit).await
    }

    async fn begin_reviews(&self, items: &[ReviewKey]) -> Result<Vec<BeginReview>> {
        let items = items.to_vec();
        let (begun, events) = self
            .writer
            .run(move |conn| review::begin_many(conn?, &items))
            .await??;
        for event in events {
            self.publish(Some(event));
        }
        Ok(begun)
    }

    async fn review_facts_many(&self, proposals: &[Proposal]) -> Result<Vec<Result<ReviewFacts>>> {
        let proposals = proposals.to_vec();
        self.writer
            .run(move |conn| review::facts_here(conn?, &proposals))
            .await?
    }

    async fn record_decisions(
        &self,
        items: Vec<(ReviewKey, Decision)>,
    ) -> Result<Vec<RecordOutcome>> {
        let (recorded, events) = self
            .writer
            .run(move |conn| review::record_many(conn?, items))
            .await??;
        for event in events {
            self.publish(Some(event));
        }
        Ok(recorded)
    }

    async fn overdue_reviews(
        &self,
        started_before: Millis,
        limit: u32,
    ) -> Result<Vec<OverdueReview>> {
        review::overdue(&self.reader, started_before, limit).await
    }

    async fn events_after(
        &self,
        after: u64,
        tenant: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Event>> {
        events::after(&self.reader, after, tenant, limit).await
    }

    async fn event_horizon(&self, tenant: Option<&str>) -> Result<EventHorizon> {
        events::horizon(&self.reader, tenant).await
    }

    async fn prune_events(&self, created_before: Millis) -> Result<u64> {
        events::prune(self.writer.pool(), created_before).await
    }

    async fn record_suppressed(&self, counts: Vec<(ReviewKey, u64)>) -> Result<()> {
        suppression::record(self.writer.pool(), counts).await?;
        // Wake the fan-out: the SUPPRESSED events are in the log.
        self.publish(Some(StoreEvent {
            cursor: None,
            tenant: String::new(),
            proposal_id: String::new(),
            kind: countersign_domain::EventKind::Suppressed,
            state: countersign_domain::ProposalState::Rejected,
        }));
        Ok(())
    }

    async fn reset_breaker(&self, tenant: &str, operator: &str) -> Result<()> {
        suppression::reset(self.writer.pool(), tenant, operator).await
    }

    async fn breaker_resets(&self, since: Millis) -> Result<Vec<BreakerReset>> {
        suppression::resets(&self.reader, since).await
    }

    async fn rejections_since(&self, since: Millis) -> Result<Vec<RecentRejection>> {
        suppression::rejections(&self.reader, since).await
    }

    async fn append_audit(&self, limit: u32) -> Result<u64> {
        audit::append(&self.reader, &self.writer, limit).await
    }

    async fn list_audit(
        &self,
        tenant: &str,
        filter: &AuditFilter,
        before: Option<u64>,
        limit: u32,
    ) -> Result<Vec<AuditEntry>> {
        audit::list(&self.reader, tenant, filter, before, limit).await
    }

    async fn get_audit(&self, tenant: &str, proposal_id: &str) -> Result<Option<AuditEntry>> {
        audit::get(&self.reader, tenant, proposal_id).await
    }

    async fn audit_range(&self, tenant: &str, after: u64, limit: u32) -> Result<Vec<StoredEntry>> {
        audit::range(&self.reader, tenant, after, limit).await
    }

    async fn audit_head(&self, tenant: &str) -> Result<(u64, String)> {
        audit::head(&self.reader, tenant).await
    }

    async fn save_checkpoint(&self, checkpoint: &Checkpoint) -> Result<Checkpoint> {
        audit::save_checkpoint(self.writer.pool(), checkpoint).await
    }

    async fn latest_checkpoint(&self, tenant: &str) -> Result<Option<Checkpoint>> {
        audit::latest_checkpoint(&self.reader, tenant).await
    }

    async fn newest_checkpoint(&self) -> Result<Option<Checkpoint>> {
        audit::newest_checkpoint(&self.reader).await
    }

    fn subscribe(&self) -> broadcast::Receiver<StoreEvent> {
        self.events.subscribe()
    }
}
