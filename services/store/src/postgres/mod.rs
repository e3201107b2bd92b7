//! The production backend: PostgreSQL through a connection pool, with tenant
//! isolation twice: every query names its tenant, and row-level security
//! (`scope`) binds the service role even when one forgets to.
//!
//! The service connects as a role that row-level security binds (`roles`
//! refuses any other); migrations run as the tables' owner through
//! [`PostgresStore::migrate_as_owner`] (`countersign migrate`).

mod audit;
mod console_sessions;
mod escalations;
#[doc(hidden)]
pub use audit::{IN_COMMIT_ORDER, NEXT_DECISIONS};
#[doc(hidden)]
pub use escalations::{
    DUE as ESCALATIONS_DUE, NEXT_EXPIRY as NEXT_ESCALATION_EXPIRY,
    OPEN_BY_TENANT as OPEN_ESCALATIONS_BY_TENANT, OPEN_PAGE as OPEN_ESCALATIONS_PAGE,
    VOTE_EVENTS_AFTER, VOTES_ON as VOTES_ON_PROPOSALS,
};
mod events;
#[doc(hidden)]
pub use events::{events_after_query, events_at_query};
mod group_commit;
mod keys;
mod model_calls;
mod outbox;
mod proposals;
#[doc(hidden)]
pub use proposals::BY_KEY as PROPOSAL_BY_KEY;
mod reference;
mod review;
#[doc(hidden)]
pub use review::{
    BEGIN_REVIEWS, DECIDED_STATES, LOCK_FOR_DECISION, LOCK_FOR_DECISIONS, OVERDUE, candidates_query,
};
mod roles;
mod routes;
mod scope;
mod suppression;
#[doc(hidden)]
pub use suppression::REJECTIONS as BREAKER_REJECTIONS;
mod tenants;

use std::{str::FromStr, time::Duration};

use async_trait::async_trait;
use sqlx::{
    ConnectOptions, Connection, PgConnection, PgPool,
    postgres::{PgConnectOptions, PgPoolOptions},
};
use tokio::sync::broadcast;

use crate::{Changes, Lifecycle, Result, StoreError, StoreEvent};

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
impl Lifecycle for PostgresStore {
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

    /// ANALYZEs the tables the service writes fastest that changed enough
    /// since their last analysis (none while another process does it), on
    /// the service's clock rather than autovacuum's (see
    /// migrations/postgres/0009_statistics.sql); returns how many.
    #[tracing::instrument(name = "store.postgres.refresh_statistics", level = "debug", skip_all)]
    async fn refresh_statistics(&self) -> Result<u64> {
        let analysed: i32 = sqlx::query_scalar("SELECT countersign_refresh_statistics()")
            .fetch_one(&self.pool)
            .await?;
        Ok(u64::try_from(analysed).unwrap_or(0))
    }
}

impl Changes for PostgresStore {
    fn subscribe(&self) -> broadcast::Receiver<StoreEvent> {
        self.events.subscribe()
    }
}
