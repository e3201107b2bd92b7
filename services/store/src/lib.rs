//! Storage for Countersign behind one trait per role (`traits`), summed up
//! in [`Store`]: SQLite is the embedded default, PostgreSQL the production
//! backend. Every query is scoped by tenant here, in the repository layer.

mod at_submission;
mod error;
mod escalation;
mod facts;
mod group_commit;
mod model;
mod policy;
pub mod postgres;
mod recording;
mod rows;
pub mod sqlite;
mod traits;
mod types;

use std::sync::Arc;

use countersign_domain::Role;

pub use countersign_domain::{
    Event, EventHorizon, EventKind, ReviewKey, TenantPolicy, reference::SopInput,
};
pub use error::StoreError;
pub use postgres::PostgresStore;
pub use sqlite::{EmbeddedQueue, SqliteStore, SqliteWriter, Synchronous, database_file};
pub use traits::{
    ApiKeys, AuditLog, Changes, ConsoleSessions, Directory, Escalations, EventLog, Lifecycle,
    ModelCalls, ModelProfiles, Proposals, Reference, Reviews, Routes, Store, Suppressions, Tenants,
};
pub use types::{
    ApiKeyRecord, BeginReview, BootstrapKey, BreakerReset, ConsoleSession, EscalationRecord,
    EventHead, NewApiKey, NewProposal, OverdueReview, Pick, PickedPage, RecentRejection,
    RecordOutcome, StoreEvent, SubmitOutcome, SubmitReview, Tenant, Voted, check_policy,
    validate_tenant_name,
};

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// A shared handle to whichever backend is configured.
pub type DynStore = Arc<dyn Store>;

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
