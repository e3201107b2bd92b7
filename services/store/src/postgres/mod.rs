//! The production backend: PostgreSQL through a connection pool, with tenant
//! isolation twice: every query names its tenant, and row-level security
//! (`scope`) binds the service role even when one forgets to.
//!
//! The service connects as a role that row-level security binds (`roles`
//! refuses any other); migrations run as the tables' owner through
//! [`PostgresStore::migrate_as_owner`] (`countersign migrate`).

mod audit;
#[doc(hidden)]
pub use audit::{IN_COMMIT_ORDER, NEXT_DECISIONS};
mod events;
#[doc(hidden)]
pub use events::events_after_query;
mod group_commit;
mod keys;
mod outbox;
mod proposals;
#[doc(hidden)]
pub use proposals::BY_KEY as PROPOSAL_BY_KEY;
mod reference;
mod review;
#[doc(hidden)]
pub use review::{BEGIN_REVIEW, DECIDED_STATE, LOCK_FOR_DECISION, candidates_query};
mod roles;
mod scope;
mod statistics;
mod suppression;
#[doc(hidden)]
pub use suppression::REJECTIONS as BREAKER_REJECTIONS;
mod tenants;

use std::{str::FromStr, time::Duration};

use async_trait::async_trait;
use countersign_domain::{
    Decision, Event, EventHorizon, Millis, Proposal, ProposalSpec, Sop, Target, TargetStatus,
    audit::{AuditEntry, AuditFilter, Checkpoint, StoredEntry},
    gates::ReviewFacts,
};
use sqlx::{
    ConnectOptions, Connection, PgConnection, PgPool,
    postgres::{PgConnectOptions, PgPoolOptions},
};
use tokio::sync::broadcast;

use crate::{
    ApiKeyRecord, BeginReview, BootstrapKey, BreakerReset, NewApiKey, NewProposal, OverdueReview,
    RecentRejection, RecordOutcome, Result, ReviewKey, SopInput, Store, StoreError, StoreEvent,
    SubmitOutcome, Tenant, TenantPolicy,
};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations/postgres");

/// Connections a store opens unless told otherwise.
pub const DEFAULT_POOL_SIZE: u32 = 16;

#[derive(Debug, Clone)]
pub struct PostgresStore {
    pool: PgPool,
    events: broadcast::Sender<StoreEvent>,
    submitter: crate::group_commit::Submitter,
}

fn options(url: &str) -> Result<PgConnectOptions> {
    // Plans: PostgreSQL's default (`plan_cache_mode = auto`), so a statement
    // run many times is planned once per connection. Planning every run was
    // this connection's setting: a primary-key read planned in 0.2 ms and run
    // in 0.1, and the database spent 3.25 ms of CPU per decision on `bench
    // submit-decide --production` against 2.2–2.6 ms now. The few statements
    // whose best plan depends on the data are planned per run by their own
    // transactions (`scope::CUSTOM_PLANS`).
    Ok(PgConnectOptions::from_str(url)?
        // A statement this slow is a finding: it goes to the log.
        .log_slow_statements(log::LevelFilter::Warn, Duration::from_millis(250)))
}

impl PostgresStore {
    /// Connects as the service role a `postgres://` URL names, refusing a role
    /// that row-level security would not bind (superuser, BYPASSRLS, owner).
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, DEFAULT_POOL_SIZE).await
    }

    /// [`PostgresStore::connect`] with at most `pool_size` connections.
    pub async fn connect_with(url: &str, pool_size: u32) -> Result<Self> {
        let options = options(url)?;
        // Checked on a connection of its own, before the pool exists.
        let mut first = PgConnection::connect_with(&options).await?;
        roles::refuse_unsafe_role(&mut first).await?;
        first.close().await?;
        let pool = PgPoolOptions::new()
            .max_connections(pool_size.max(1))
            .acquire_timeout(Duration::from_secs(30))
            .connect_with(options)
            .await?;
        let (events, _) = broadcast::channel(4096);
        let submitter = group_commit::start(pool.clone());
        Ok(PostgresStore {
            pool,
            events,
            submitter,
        })
    }

    /// Brings the schema up to date as its owner (`owner_url`), then grants
    /// `service_role` what the service needs (and no more; see
    /// migrations/postgres/0001_foundation.sql). Idempotent.
    #[tracing::instrument(name = "store.postgres.migrate_as_owner", skip(owner_url))]
    pub async fn migrate_as_owner(owner_url: &str, service_role: &str) -> Result<()> {
        let mut conn = PgConnection::connect_with(&options(owner_url)?).await?;
        let owner: String = sqlx::query_scalar("SELECT current_user::text")
            .fetch_one(&mut conn)
            .await?;
        if owner == service_role {
            return Err(StoreError::InvalidArgument(format!(
                "the service role `{service_role}` must not be the owner that runs the \
                 migrations (the owner can turn row-level security off)"
            )));
        }
        MIGRATOR.run(&mut conn).await?;
        sqlx::query("SELECT countersign_grant_service($1)")
            .bind(service_role)
            .execute(&mut conn)
            .await?;
        conn.close().await?;
        Ok(())
    }

    /// The role a `postgres://` URL connects as (its user, or the default
    /// libpq would pick).
    pub fn role_of(url: &str) -> Result<String> {
        Ok(PgConnectOptions::from_str(url)?.get_username().to_owned())
    }

    /// The pool, for code of this crate's users that keeps its own tables in
    /// the same database (every transaction must set its scope; see `scope`).
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    fn publish(&self, event: StoreEvent) {
        // No subscriber is fine: the event is in the table either way.
        let _ = self.events.send(event);
    }
}

#[async_trait]
impl Store for PostgresStore {
    fn backend(&self) -> &'static str {
        "postgres"
    }

    /// The service role cannot change the schema: this checks that it is up
    /// to date (and protected), and says to run `countersign migrate` if not.
    #[tracing::instrument(name = "store.postgres.migrate", skip_all)]
    async fn migrate(&self) -> Result<()> {
        let mut conn = self.pool.acquire().await?;
        roles::check_schema(&mut conn, &MIGRATOR).await
    }

    async fn bootstrap(&self) -> Result<Option<BootstrapKey>> {
        tenants::bootstrap(&self.pool).await
    }

    async fn create_tenant(&self, name: &str) -> Result<Tenant> {
        tenants::create(&self.pool, name).await
    }

    async fn get_tenant(&self, name: &str) -> Result<Option<Tenant>> {
        tenants::get_one(&self.pool, name).await
    }

    async fn list_tenants(&self) -> Result<Vec<Tenant>> {
        tenants::list(&self.pool).await
    }

    async fn set_tenant_policy(&self, name: &str, policy: TenantPolicy) -> Result<Tenant> {
        tenants::set_policy(&self.pool, name, policy).await
    }

    async fn create_api_key(&self, new: NewApiKey) -> Result<(ApiKeyRecord, String)> {
        keys::create(&self.pool, new).await
    }

    async fn find_api_key(&self, id: &str) -> Result<Option<ApiKeyRecord>> {
        keys::find(&self.pool, id).await
    }

    async fn list_api_keys(&self, tenant: Option<&str>) -> Result<Vec<ApiKeyRecord>> {
        keys::list(&self.pool, tenant).await
    }

    async fn revoke_api_key(&self, id: &str) -> Result<ApiKeyRecord> {
        keys::revoke(&self.pool, id).await
    }

    async fn insert_proposal(&self, new: NewProposal) -> Result<SubmitOutcome> {
        let (outcome, event) = self.submitter.submit(new).await?;
        if let Some(event) = event {
            self.publish(event);
        }
        Ok(outcome)
    }

    async fn get_proposal(&self, tenant: &str, id: &str) -> Result<Option<Proposal>> {
        proposals::get(&self.pool, tenant, id).await
    }

    async fn find_idempotent(&self, tenant: &str, spec: &ProposalSpec) -> Result<Option<Proposal>> {
        proposals::find_idempotent(&self.pool, tenant, spec).await
    }

    async fn cancel_proposal_by(
        &self,
        tenant: &str,
        id: &str,
        reason: &str,
        key: Option<&str>,
    ) -> Result<Proposal> {
        let (proposal, event) = proposals::cancel(&self.pool, tenant, id, reason, key).await?;
        self.publish(event);
        Ok(proposal)
    }

    async fn put_sop(&self, tenant: &str, sop: SopInput) -> Result<Sop> {
        reference::put_sop(&self.pool, tenant, sop).await
    }

    async fn get_sop(&self, tenant: &str, id: &str) -> Result<Option<Sop>> {
        reference::get_sop(&self.pool, tenant, id).await
    }

    async fn list_sops(
        &self,
        tenant: &str,
        include_retired: bool,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Sop>> {
        reference::list_sops(&self.pool, tenant, include_retired, after, limit).await
    }

    async fn retire_sop(&self, tenant: &str, id: &str) -> Result<Sop> {
        reference::retire_sop(&self.pool, tenant, id).await
    }

    async fn put_target(
        &self,
        tenant: &str,
        id: &str,
        status: TargetStatus,
        labels: std::collections::BTreeMap<String, String>,
    ) -> Result<Target> {
        reference::put_target(&self.pool, tenant, id, status, labels).await
    }

    async fn get_target(&self, tenant: &str, id: &str) -> Result<Option<Target>> {
        reference::get_target_in(&self.pool, tenant, id).await
    }

    async fn list_targets(
        &self,
        tenant: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Target>> {
        reference::list_targets(&self.pool, tenant, after, limit).await
    }

    async fn begin_reviews(&self, items: &[ReviewKey]) -> Result<Vec<BeginReview>> {
        let (begun, events) = review::begin_many(&self.pool, items).await?;
        for event in events {
            self.publish(event);
        }
        Ok(begun)
    }

    async fn review_facts_many(&self, proposals: &[Proposal]) -> Result<Vec<Result<ReviewFacts>>> {
        review::facts_many(&self.pool, proposals).await
    }

    async fn record_decisions(
        &self,
        items: Vec<(ReviewKey, Decision)>,
    ) -> Result<Vec<RecordOutcome>> {
        let (recorded, events) = review::record_many(&self.pool, items).await?;
        for event in events {
            self.publish(event);
        }
        Ok(recorded)
    }

    async fn overdue_reviews(
        &self,
        started_before: Millis,
        limit: u32,
    ) -> Result<Vec<OverdueReview>> {
        review::overdue(&self.pool, started_before, limit).await
    }

    async fn events_after(
        &self,
        after: u64,
        tenant: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Event>> {
        events::after(&self.pool, after, tenant, limit).await
    }

    async fn event_horizon(&self, tenant: Option<&str>) -> Result<EventHorizon> {
        events::horizon(&self.pool, tenant).await
    }

    async fn prune_events(&self, created_before: Millis) -> Result<u64> {
        events::prune(&self.pool, created_before).await
    }

    async fn refresh_statistics(&self) -> Result<u64> {
        statistics::refresh(&self.pool).await
    }

    async fn record_suppressed(&self, counts: Vec<(ReviewKey, u64)>) -> Result<()> {
        suppression::record(&self.pool, counts).await?;
        // Wake the fan-out: the SUPPRESSED events are in the log.
        self.publish(StoreEvent {
            cursor: None,
            tenant: String::new(),
            proposal_id: String::new(),
            kind: countersign_domain::EventKind::Suppressed,
            state: countersign_domain::ProposalState::Rejected,
        });
        Ok(())
    }

    async fn reset_breaker(&self, tenant: &str, operator: &str) -> Result<()> {
        suppression::reset(&self.pool, tenant, operator).await
    }

    async fn breaker_resets(&self, since: Millis) -> Result<Vec<BreakerReset>> {
        suppression::resets(&self.pool, since).await
    }

    async fn rejections_since(&self, since: Millis) -> Result<Vec<RecentRejection>> {
        suppression::rejections(&self.pool, since).await
    }

    async fn append_audit(&self, limit: u32) -> Result<u64> {
        audit::append(&self.pool, limit).await
    }

    async fn list_audit(
        &self,
        tenant: &str,
        filter: &AuditFilter,
        before: Option<u64>,
        limit: u32,
    ) -> Result<Vec<AuditEntry>> {
        audit::list(&self.pool, tenant, filter, before, limit).await
    }

    async fn get_audit(&self, tenant: &str, proposal_id: &str) -> Result<Option<AuditEntry>> {
        audit::get(&self.pool, tenant, proposal_id).await
    }

    async fn audit_range(&self, tenant: &str, after: u64, limit: u32) -> Result<Vec<StoredEntry>> {
        audit::range(&self.pool, tenant, after, limit).await
    }

    async fn audit_head(&self, tenant: &str) -> Result<(u64, String)> {
        audit::head(&self.pool, tenant).await
    }

    async fn save_checkpoint(&self, checkpoint: &Checkpoint) -> Result<Checkpoint> {
        audit::save_checkpoint(&self.pool, checkpoint).await
    }

    async fn latest_checkpoint(&self, tenant: &str) -> Result<Option<Checkpoint>> {
        audit::latest_checkpoint(&self.pool, tenant).await
    }

    async fn newest_checkpoint(&self) -> Result<Option<Checkpoint>> {
        audit::newest_checkpoint(&self.pool).await
    }

    fn subscribe(&self) -> broadcast::Receiver<StoreEvent> {
        self.events.subscribe()
    }
}
