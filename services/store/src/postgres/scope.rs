//! Which rows a transaction may touch: the row-level-security scope (see
//! migrations/postgres/0001_foundation.sql). Every statement of the store runs
//! in a transaction that starts here; the settings are transaction-local, so
//! nothing carries over on a pooled connection.
//!
//! A transaction's `BEGIN` and its first scope travel together, in one simple
//! query: a round trip to the database is the largest part of a short
//! transaction's cost on both sides. A tenant name within the rules
//! ([`validate_tenant_name`]: `[a-z0-9-]`, nothing to quote) is written into
//! that statement; any other name is bound as a parameter in a statement of
//! its own, as every later change of scope is.

use sqlx::{PgConnection, PgPool, Postgres, Transaction};

use crate::{Result, validate_tenant_name};

pub type Tx = Transaction<'static, Postgres>;

/// A transaction that sees and writes one tenant's rows only.
pub async fn tenant(pool: &PgPool, tenant: &str) -> Result<Tx> {
    TenantScope::default().begin(pool, tenant).await
}

/// [`tenant`], its statements planned for their parameters ([`CUSTOM_PLANS`]).
pub async fn tenant_planned_per_run(pool: &PgPool, tenant: &str) -> Result<Tx> {
    TenantScope::planned_per_run().begin(pool, tenant).await
}

/// The tenant scope a transaction is in, for a batch whose phases revisit its
/// tenants: moving to the tenant it is already in costs no statement (a
/// one-tenant batch switches once, not once per phase).
#[derive(Default)]
pub struct TenantScope {
    current: Option<String>,
    /// Settings for the whole transaction, sent with the first move.
    settings: Option<&'static str>,
    /// What follows `BEGIN` (isolation level, access mode).
    characteristics: &'static str,
}

impl TenantScope {
    /// A scope whose transaction plans every statement once ([`GENERIC_PLANS`]),
    /// set with its first move at no statement of its own.
    pub fn planned_once() -> TenantScope {
        TenantScope {
            settings: Some(GENERIC_PLANS),
            ..TenantScope::default()
        }
    }

    /// A scope whose transaction plans every statement for its parameters
    /// ([`CUSTOM_PLANS`]).
    pub fn planned_per_run() -> TenantScope {
        TenantScope {
            settings: Some(CUSTOM_PLANS),
            ..TenantScope::default()
        }
    }

    /// [`TenantScope::planned_per_run`] in one read-only snapshot of the
    /// database (`REPEATABLE READ`): every tenant of a batch read as of one
    /// moment.
    pub fn snapshot_planned_per_run() -> TenantScope {
        TenantScope {
            characteristics: " ISOLATION LEVEL REPEATABLE READ, READ ONLY",
            ..TenantScope::planned_per_run()
        }
    }

    /// The scope of a transaction already in `tenant`'s.
    pub fn entered(tenant: &str) -> TenantScope {
        TenantScope {
            current: Some(tenant.to_owned()),
            ..TenantScope::default()
        }
    }

    /// Begins the transaction in `tenant`'s scope.
    pub async fn begin(&mut self, pool: &PgPool, tenant: &str) -> Result<Tx> {
        let settings = self.settings.take();
        let begin = format!("BEGIN{}", self.characteristics);
        let tx = if validate_tenant_name(tenant).is_ok() {
            let more = settings.map(|s| format!(", {s}")).unwrap_or_default();
            pool.begin_with(format!(
                "{begin}; SELECT set_config('app.tenant_id', '{tenant}', true), \
                 set_config('app.scope', '', true){more}"
            ))
            .await?
        } else {
            let mut tx = pool.begin_with(begin).await?;
            enter_with(&mut tx, tenant, settings).await?;
            tx
        };
        self.current = Some(tenant.to_owned());
        Ok(tx)
    }

    pub async fn enter(&mut self, conn: &mut PgConnection, tenant: &str) -> Result<()> {
        if self.current.as_deref() == Some(tenant) {
            return Ok(());
        }
        enter_with(conn, tenant, self.settings.take()).await?;
        self.current = Some(tenant.to_owned());
        Ok(())
    }
}

/// Moves a transaction to another tenant's rows (and out of the system scope).
pub async fn enter_tenant(conn: &mut PgConnection, tenant: &str) -> Result<()> {
    enter_with(conn, tenant, None).await
}

/// [`enter_tenant`], with more `set_config` calls (`settings`, comma
/// separated) in the same statement.
async fn enter_with(conn: &mut PgConnection, tenant: &str, settings: Option<&str>) -> Result<()> {
    let more = settings.map(|s| format!(", {s}")).unwrap_or_default();
    sqlx::query(&format!(
        "SELECT set_config('app.tenant_id', $1, true), set_config('app.scope', '', true){more}"
    ))
    .bind(tenant)
    .execute(conn)
    .await?;
    Ok(())
}

/// Plans every statement of the transaction for its own parameters. A generic
/// plan (PostgreSQL's choice for a prepared statement after five runs) is
/// costed without them, which is right for a read by key and wrong where the
/// best plan depends on the values: a review's facts (a tenant's share of the
/// table, a batch's arrays), a watcher's replay (a tenant's share of the log),
/// the inbox (a tenant's share of the open escalations) and the audit
/// sequencer (see `audit::IN_COMMIT_ORDER`) set it; every other
/// statement keeps its cached plan (test: `postgres_plans::the_hot_reads_keep_key_plans_when_planned_once_for_any_parameters`).
pub const CUSTOM_PLANS: &str = "set_config('plan_cache_mode', 'force_custom_plan', true)";

/// Plans the transaction's next statements as `setting` says
/// ([`CUSTOM_PLANS`] or [`GENERIC_PLANS`]).
pub async fn plan(conn: &mut PgConnection, setting: &str) -> Result<()> {
    sqlx::query(&format!("SELECT {setting}"))
        .execute(conn)
        .await?;
    Ok(())
}

/// A transaction that reads every tenant's rows and writes none of them (the
/// event log's retention excepted). Only the cross-tenant operations named in
/// the migration use it: bootstrap's emptiness check, the tenant and key
/// lists, key lookup by id, the fan-out's read of every tenant's events and the
/// horizon, pruning, overdue reviews, and the breaker rebuild.
pub async fn system(pool: &PgPool) -> Result<Tx> {
    system_with(pool, "").await
}

/// Plans every statement of the transaction once per connection, without its
/// parameters, and keeps that plan. For a statement whose every branch is a
/// read by key, where PostgreSQL's own choice (a plan per run while the
/// estimates favour it) only costs planning: the fan-out's read of every
/// tenant's next events, run after every signal (planned per run, a third
/// of the database's planning time at 100 decisions/s).
pub const GENERIC_PLANS: &str = "set_config('plan_cache_mode', 'force_generic_plan', true)";

/// [`system`], its statements planned once ([`GENERIC_PLANS`]).
pub async fn system_planned_once(pool: &PgPool) -> Result<Tx> {
    system_with(pool, &format!(", {GENERIC_PLANS}")).await
}

async fn system_with(pool: &PgPool, settings: &str) -> Result<Tx> {
    Ok(pool
        .begin_with(format!(
            "BEGIN; SELECT set_config('app.scope', 'system', true), \
             set_config('app.tenant_id', '', true){settings}"
        ))
        .await?)
}

/// Writes the events of the transaction's state changes so far, now rather
/// than at commit (they are deferred; see migrations/postgres/0010), taking
/// the event log's lock until the commit. Only for a transaction that then
/// appends events of its own and takes no further row lock: the lock must be
/// every transaction's last, or two could wait for each other.
pub async fn write_pending_events(conn: &mut PgConnection) -> Result<()> {
    sqlx::query("SET CONSTRAINTS ALL IMMEDIATE")
        .execute(conn)
        .await?;
    Ok(())
}

pub use crate::facts::by_tenant;
