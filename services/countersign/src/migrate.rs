//! `countersign migrate`: SQLite in place; PostgreSQL as the schema's owner
//! role, granting the service role what it needs (see
//! migrations/postgres/0001_foundation.sql).

use anyhow::Context;
use clap::Args;

use crate::settings::{StoreArgs, is_postgres};

/// `countersign migrate` on PostgreSQL: the schema belongs to an owner role
/// the service never runs as.
#[derive(Debug, Clone, Args)]
pub struct MigrateArgs {
    /// PostgreSQL: the URL of the role that owns the schema and runs the
    /// migrations (not the service's role).
    #[arg(long, env = "COUNTERSIGN_MIGRATE_DATABASE_URL")]
    pub owner_url: Option<String>,
    /// PostgreSQL: the role `serve` connects as, granted what it needs;
    /// default the user of `--database-url`.
    #[arg(long, env = "COUNTERSIGN_SERVICE_ROLE")]
    pub service_role: Option<String>,
}

/// Brings the schema up to date: SQLite in place; PostgreSQL as the owner,
/// granting the service role, then checked through the service role when its
/// URL is known. Returns what was migrated, for the message.
pub async fn run(store: &StoreArgs, args: &MigrateArgs) -> anyhow::Result<String> {
    let url = store.database_url();
    let owner = match (&args.owner_url, is_postgres(&url)) {
        (Some(owner), _) => owner.clone(),
        (None, true) => anyhow::bail!(
            "migrating PostgreSQL needs the owner role's URL: set \
             COUNTERSIGN_MIGRATE_DATABASE_URL (or --owner-url); the service role cannot \
             change the schema"
        ),
        (None, false) => {
            store.open().await?;
            return Ok(crate::output::redact_url(&url));
        }
    };
    let role = match (&args.service_role, store.database_url.as_deref()) {
        (Some(role), _) => role.clone(),
        (None, Some(url)) if is_postgres(url) => countersign_store::PostgresStore::role_of(url)?,
        _ => anyhow::bail!(
            "name the service role to grant: --service-role (COUNTERSIGN_SERVICE_ROLE) or \
             COUNTERSIGN_DATABASE_URL"
        ),
    };
    countersign_store::PostgresStore::migrate_as_owner(&owner, &role)
        .await
        .context("running migrations as the owner")?;
    if store.database_url.as_deref().is_some_and(is_postgres) {
        // The service's view: its role is accepted and the schema is current.
        store.open().await.context("checking the service role")?;
    }
    Ok(format!(
        "{} (service role `{role}`)",
        crate::output::redact_url(&owner)
    ))
}
