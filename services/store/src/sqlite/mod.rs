//! The embedded backend: one SQLite file in WAL mode, through `rusqlite`.
//! Every write runs on the single writer connection, on its own thread
//! (`writes`: SQLite has one writer anyway, and this way no writer ever sees
//! `SQLITE_BUSY` from another of ours); reads run on a few read-only
//! connections (`reads`). The embedded review queue is this database's
//! `queue_entries` table (`queue`).

mod audit;
mod connection;
mod events;
mod group_commit;
mod keys;
mod migrate;
mod proposals;
mod queue;
mod reads;
mod reference;
mod review;
mod suppression;
mod tenants;
mod writes;

pub use connection::database_file;
pub use migrate::{MigrateError, Migrations};
pub use queue::EmbeddedQueue;
pub use writes::{SqliteWriter, WriteThreadStopped};

use async_trait::async_trait;
use countersign_domain::{
    Decision, Event, EventHorizon, Millis, Proposal, ProposalSpec, Sop, Target, TargetStatus,
    audit::{AuditEntry, AuditFilter, Checkpoint, StoredEntry},
    gates::ReviewFacts,
};
use rusqlite::Connection;
use tokio::sync::broadcast;

use connection::Location;
use reads::Readers;

use crate::{
    ApiKeyRecord, BeginReview, BootstrapKey, BreakerReset, NewApiKey, NewProposal, OverdueReview,
    RecentRejection, RecordOutcome, Result, ReviewKey, SopInput, Store, StoreError, StoreEvent,
    SubmitOutcome, Tenant, TenantPolicy,
};

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
    /// The single writer connection, on the thread it runs on.
    writer: SqliteWriter,
    /// The read-only connections; none for an in-memory database (a private
    /// one, which only the writer's connection sees): its reads run on the
    /// writer.
    readers: Option<Readers>,
    events: broadcast::Sender<StoreEvent>,
    submitter: crate::group_commit::Submitter,
}

impl SqliteStore {
    /// The writer's thread, shared with the embedded queue (whose table the
    /// proposal insert writes in the same transaction).
    pub fn writer(&self) -> SqliteWriter {
        self.writer.clone()
    }

    /// The embedded review queue on this database.
    pub fn queue(&self) -> EmbeddedQueue {
        EmbeddedQueue::new(self.writer())
    }

    /// The `synchronous` setting the writer commits with, as SQLite reports it.
    pub async fn synchronous(&self) -> Result<Synchronous> {
        let level: i64 = self
            .write(|conn| Ok(conn.pragma_query_value(None, "synchronous", |r| r.get(0))?))
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
        let location = Location::parse(url)?;
        let (writer, readers) = tokio::task::spawn_blocking(move || {
            let writer = connection::open_writer(&location, synchronous)?;
            let readers = match &location {
                Location::File(path) => Some(Readers::open(path)?),
                Location::Memory => None,
            };
            Ok::<_, StoreError>((writer, readers))
        })
        .await
        .map_err(|e| StoreError::Unavailable(format!("opening the database: {e}")))??;
        let writer = SqliteWriter::start(writer)
            .map_err(|e| StoreError::Unavailable(format!("starting the write thread: {e}")))?;
        let (events, _) = broadcast::channel(4096);
        let submitter = group_commit::start(writer.clone());
        Ok(SqliteStore {
            writer,
            readers,
            events,
            submitter,
        })
    }

    /// Runs `write` on the writer's thread.
    async fn write<T, F>(&self, write: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T> + Send + 'static,
    {
        self.writer.run(write).await?
    }

    /// Runs `read` on a reader (on the writer for an in-memory database).
    async fn read<T, F>(&self, read: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T> + Send + 'static,
    {
        match &self.readers {
            Some(readers) => readers.run(read).await,
            None => self.write(read).await,
        }
    }
}

#[async_trait]
impl Store for SqliteStore {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    #[tracing::instrument(name = "store.sqlite.migrate", skip_all)]
    async fn migrate(&self) -> Result<()> {
        self.write(|conn| Ok(Migrations::embedded().run(conn)?))
            .await
    }

    async fn bootstrap(&self) -> Result<Option<BootstrapKey>> {
        self.write(tenants::bootstrap).await
    }

    async fn create_tenant(&self, name: &str) -> Result<Tenant> {
        let name = name.to_owned();
        self.write(move |conn| tenants::create(conn, &name)).await
    }

    async fn get_tenant(&self, name: &str) -> Result<Option<Tenant>> {
        let name = name.to_owned();
        self.read(move |conn| tenants::get(conn, &name)).await
    }

    async fn list_tenants(&self) -> Result<Vec<Tenant>> {
        self.read(|conn| tenants::list(conn)).await
    }

    async fn set_tenant_policy(&self, name: &str, policy: TenantPolicy) -> Result<Tenant> {
        let name = name.to_owned();
        self.write(move |conn| tenants::set_policy(conn, &name, policy))
            .await
    }

    async fn create_api_key(&self, new: NewApiKey) -> Result<(ApiKeyRecord, String)> {
        self.write(move |conn| keys::insert(conn, new)).await
    }

    async fn find_api_key(&self, id: &str) -> Result<Option<ApiKeyRecord>> {
        let id = id.to_owned();
        self.read(move |conn| keys::find(conn, &id)).await
    }

    async fn list_api_keys(&self, tenant: Option<&str>) -> Result<Vec<ApiKeyRecord>> {
        let tenant = tenant.map(str::to_owned);
        self.read(move |conn| keys::list(conn, tenant.as_deref()))
            .await
    }

    async fn revoke_api_key(&self, id: &str) -> Result<ApiKeyRecord> {
        let id = id.to_owned();
        self.write(move |conn| keys::revoke(conn, &id)).await
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
        let (tenant, id) = (tenant.to_owned(), id.to_owned());
        self.read(move |conn| {
            let tx = conn.transaction()?;
            proposals::get(&tx, &tenant, &id)
        })
        .await
    }

    async fn find_idempotent(&self, tenant: &str, spec: &ProposalSpec) -> Result<Option<Proposal>> {
        if spec.idempotency_key.is_empty() {
            return Ok(None);
        }
        let (tenant, spec) = (tenant.to_owned(), spec.clone());
        self.read(move |conn| {
            let tx = conn.transaction()?;
            proposals::find_idempotent(&tx, &tenant, &spec)
        })
        .await
    }

    async fn cancel_proposal_by(
        &self,
        tenant: &str,
        id: &str,
        reason: &str,
        key: Option<&str>,
    ) -> Result<Proposal> {
        let (tenant, id, reason) = (tenant.to_owned(), id.to_owned(), reason.to_owned());
        let key = key.map(str::to_owned);
        let (proposal, event) = self
            .write(move |conn| proposals::cancel(conn, &tenant, &id, &reason, key.as_deref()))
            .await?;
        self.publish(Some(event));
        Ok(proposal)
    }

    async fn put_sop(&self, tenant: &str, sop: SopInput) -> Result<Sop> {
        let tenant = tenant.to_owned();
        self.write(move |conn| reference::put_sop(conn, &tenant, sop))
            .await
    }

    async fn get_sop(&self, tenant: &str, id: &str) -> Result<Option<Sop>> {
        let (tenant, id) = (tenant.to_owned(), id.to_owned());
        self.read(move |conn| reference::get_sop(conn, &tenant, &id))
            .await
    }

    async fn list_sops(
        &self,
        tenant: &str,
        include_retired: bool,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Sop>> {
        let (tenant, after) = (tenant.to_owned(), after.map(str::to_owned));
        self.read(move |conn| {
            reference::list_sops(conn, &tenant, include_retired, after.as_deref(), limit)
        })
        .await
    }

    async fn retire_sop(&self, tenant: &str, id: &str) -> Result<Sop> {
        let (tenant, id) = (tenant.to_owned(), id.to_owned());
        self.write(move |conn| reference::retire_sop(conn, &tenant, &id))
            .await
    }

    async fn put_target(
        &self,
        tenant: &str,
        id: &str,
        status: TargetStatus,
        labels: std::collections::BTreeMap<String, String>,
    ) -> Result<Target> {
        let (tenant, id) = (tenant.to_owned(), id.to_owned());
        self.write(move |conn| reference::put_target(conn, &tenant, &id, status, labels))
            .await
    }

    async fn get_target(&self, tenant: &str, id: &str) -> Result<Option<Target>> {
        let (tenant, id) = (tenant.to_owned(), id.to_owned());
        self.read(move |conn| reference::get_target(conn, &tenant, &id))
            .await
    }

    async fn list_targets(
        &self,
        tenant: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Target>> {
        let (tenant, after) = (tenant.to_owned(), after.map(str::to_owned));
        self.read(move |conn| reference::list_targets(conn, &tenant, after.as_deref(), limit))
            .await
    }

    async fn begin_reviews(&self, items: &[ReviewKey]) -> Result<Vec<BeginReview>> {
        let items = items.to_vec();
        let (begun, events) = self
            .write(move |conn| review::begin_many(conn, &items))
            .await?;
        for event in events {
            self.publish(Some(event));
        }
        Ok(begun)
    }

    async fn review_facts_many(&self, proposals: &[Proposal]) -> Result<Vec<Result<ReviewFacts>>> {
        let proposals = proposals.to_vec();
        self.write(move |conn| review::facts_here(conn, &proposals))
            .await
    }

    async fn record_decisions(
        &self,
        items: Vec<(ReviewKey, Decision)>,
    ) -> Result<Vec<RecordOutcome>> {
        let (recorded, events) = self
            .write(move |conn| review::record_many(conn, items))
            .await?;
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
        self.read(move |conn| review::overdue(conn, started_before, limit))
            .await
    }

    async fn events_after(
        &self,
        after: u64,
        tenant: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Event>> {
        let tenant = tenant.map(str::to_owned);
        self.read(move |conn| events::after(conn, after, tenant.as_deref(), limit))
            .await
    }

    async fn event_horizon(&self, tenant: Option<&str>) -> Result<EventHorizon> {
        let tenant = tenant.map(str::to_owned);
        self.read(move |conn| events::horizon(conn, tenant.as_deref()))
            .await
    }

    async fn prune_events(&self, created_before: Millis) -> Result<u64> {
        let mut total = 0;
        // A slice per job: other writes run between them.
        for _ in 0..events::PRUNE_SLICES {
            let deleted = self
                .write(move |conn| events::prune_slice(conn, created_before))
                .await?;
            total += deleted;
            if deleted == 0 {
                break;
            }
        }
        Ok(total)
    }

    async fn record_suppressed(&self, counts: Vec<(ReviewKey, u64)>) -> Result<()> {
        self.write(move |conn| suppression::record(conn, counts))
            .await?;
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
        let (tenant, operator) = (tenant.to_owned(), operator.to_owned());
        self.write(move |conn| suppression::reset(conn, &tenant, &operator))
            .await
    }

    async fn breaker_resets(&self, since: Millis) -> Result<Vec<BreakerReset>> {
        self.read(move |conn| suppression::resets(conn, since))
            .await
    }

    async fn rejections_since(&self, since: Millis) -> Result<Vec<RecentRejection>> {
        self.read(move |conn| suppression::rejections(conn, since))
            .await
    }

    async fn append_audit(&self, limit: u32) -> Result<u64> {
        loop {
            let Some(next) = self
                .read(move |conn| audit::chain_next(conn, limit))
                .await?
            else {
                return Ok(0);
            };
            let appended = next.count;
            if self
                .write(move |conn| audit::write_next(conn, next))
                .await?
            {
                return Ok(appended);
            }
        }
    }

    async fn list_audit(
        &self,
        tenant: &str,
        filter: &AuditFilter,
        before: Option<u64>,
        limit: u32,
    ) -> Result<Vec<AuditEntry>> {
        let (tenant, filter) = (tenant.to_owned(), filter.clone());
        self.read(move |conn| audit::list(conn, &tenant, &filter, before, limit))
            .await
    }

    async fn get_audit(&self, tenant: &str, proposal_id: &str) -> Result<Option<AuditEntry>> {
        let (tenant, proposal_id) = (tenant.to_owned(), proposal_id.to_owned());
        self.read(move |conn| audit::get(conn, &tenant, &proposal_id))
            .await
    }

    async fn audit_range(&self, tenant: &str, after: u64, limit: u32) -> Result<Vec<StoredEntry>> {
        let tenant = tenant.to_owned();
        self.read(move |conn| audit::range(conn, &tenant, after, limit))
            .await
    }

    async fn audit_head(&self, tenant: &str) -> Result<(u64, String)> {
        let tenant = tenant.to_owned();
        self.read(move |conn| audit::head(conn, &tenant)).await
    }

    async fn save_checkpoint(&self, checkpoint: &Checkpoint) -> Result<Checkpoint> {
        let checkpoint = checkpoint.clone();
        self.write(move |conn| audit::save_checkpoint(conn, &checkpoint))
            .await
    }

    async fn latest_checkpoint(&self, tenant: &str) -> Result<Option<Checkpoint>> {
        let tenant = tenant.to_owned();
        self.read(move |conn| audit::latest_checkpoint(conn, &tenant))
            .await
    }

    async fn newest_checkpoint(&self) -> Result<Option<Checkpoint>> {
        self.read(|conn| audit::newest_checkpoint(conn)).await
    }

    fn subscribe(&self) -> broadcast::Receiver<StoreEvent> {
        self.events.subscribe()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    impl SqliteStore {
        /// Runs `job` on the writer's connection (a test's look at the rows).
        pub(crate) async fn on_writer<T, F>(&self, job: F) -> T
        where
            T: Send + 'static,
            F: FnOnce(&mut Connection) -> T + Send + 'static,
        {
            self.writer.run(job).await.unwrap()
        }
    }

    /// A freshly migrated store in a directory of its own.
    pub(crate) async fn migrated() -> (SqliteStore, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("s.db").display());
        let store = SqliteStore::connect(&url).await.unwrap();
        store.migrate().await.unwrap();
        (store, dir)
    }

    /// The steps of `query`'s plan on a freshly migrated database.
    pub(crate) async fn plan_of(query: &str) -> Vec<String> {
        let (store, _dir) = migrated().await;
        let query = format!("EXPLAIN QUERY PLAN {query}");
        store
            .on_writer(move |conn| {
                // Its parameters left unbound: the plan is the same.
                let mut statement = conn.prepare(&query)?;
                let mut rows = statement.raw_query();
                let mut steps = Vec::new();
                while let Some(row) = rows.next()? {
                    steps.push(row.get::<_, String>(3)?);
                }
                Ok::<_, rusqlite::Error>(steps)
            })
            .await
            .unwrap()
    }
}
