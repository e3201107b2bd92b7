//! The embedded backend: one SQLite file in WAL mode. Writes go through a
//! single connection (SQLite has one writer anyway, and this way no writer
//! ever sees `SQLITE_BUSY` from another of ours); reads use a small pool.

mod keys;
mod proposals;
mod tenants;

use std::{str::FromStr, time::Duration};

use async_trait::async_trait;
use countersign_domain::Proposal;
use sqlx::{
    SqlitePool,
    sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous},
};

use crate::{
    ApiKeyRecord, BootstrapKey, NewApiKey, NewProposal, Result, Store, SubmitOutcome, Tenant,
    TenantPolicy,
};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations/sqlite");

#[derive(Debug, Clone)]
pub struct SqliteStore {
    writer: SqlitePool,
    reader: SqlitePool,
}

impl SqliteStore {
    /// Opens (creating if missing) the database a `sqlite://` URL names.
    pub async fn connect(url: &str) -> Result<Self> {
        let options = SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // WAL + NORMAL survives any process crash; only an OS crash or power
            // loss can drop the last commits.
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(10))
            .foreign_keys(true);
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_secs(30))
            .connect_with(options.clone())
            .await?;
        let reader = SqlitePoolOptions::new()
            .max_connections(8)
            .acquire_timeout(Duration::from_secs(30))
            .connect_with(options.read_only(true))
            .await?;
        Ok(SqliteStore { writer, reader })
    }
}

#[async_trait]
impl Store for SqliteStore {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    #[tracing::instrument(name = "store.sqlite.migrate", skip_all)]
    async fn migrate(&self) -> Result<()> {
        MIGRATOR.run(&self.writer).await?;
        Ok(())
    }

    async fn bootstrap(&self) -> Result<Option<BootstrapKey>> {
        tenants::bootstrap(&self.writer).await
    }

    async fn create_tenant(&self, name: &str) -> Result<Tenant> {
        tenants::create(&self.writer, name).await
    }

    async fn get_tenant(&self, name: &str) -> Result<Option<Tenant>> {
        tenants::get(&self.reader, name).await
    }

    async fn list_tenants(&self) -> Result<Vec<Tenant>> {
        tenants::list(&self.reader).await
    }

    async fn set_tenant_policy(&self, name: &str, policy: TenantPolicy) -> Result<Tenant> {
        tenants::set_policy(&self.writer, name, policy).await
    }

    async fn create_api_key(&self, new: NewApiKey) -> Result<(ApiKeyRecord, String)> {
        keys::create(&self.writer, new).await
    }

    async fn find_api_key(&self, id: &str) -> Result<Option<ApiKeyRecord>> {
        keys::find(&self.reader, id).await
    }

    async fn list_api_keys(&self, tenant: Option<&str>) -> Result<Vec<ApiKeyRecord>> {
        keys::list(&self.reader, tenant).await
    }

    async fn revoke_api_key(&self, id: &str) -> Result<ApiKeyRecord> {
        keys::revoke(&self.writer, id).await
    }

    async fn insert_proposal(&self, new: NewProposal) -> Result<SubmitOutcome> {
        proposals::insert(&self.writer, new).await
    }

    async fn get_proposal(&self, tenant: &str, id: &str) -> Result<Option<Proposal>> {
        proposals::get(&self.reader, tenant, id).await
    }

    async fn cancel_proposal(&self, tenant: &str, id: &str, reason: &str) -> Result<Proposal> {
        proposals::cancel(&self.writer, tenant, id, reason).await
    }
}
