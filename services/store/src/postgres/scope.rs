//! Which rows a transaction may touch: the row-level-security scope (see
//! migrations/postgres/0001_foundation.sql). Every statement of the store runs
//! in a transaction that starts here; the settings are transaction-local, so
//! nothing carries over on a pooled connection.

use sqlx::{PgConnection, PgPool, Postgres, Transaction};

use crate::Result;

pub type Tx = Transaction<'static, Postgres>;

/// A transaction that sees and writes one tenant's rows only.
pub async fn tenant(pool: &PgPool, tenant: &str) -> Result<Tx> {
    let mut tx = pool.begin().await?;
    enter_tenant(&mut tx, tenant).await?;
    Ok(tx)
}

/// Moves a transaction to another tenant's rows (and out of the system scope).
pub async fn enter_tenant(conn: &mut PgConnection, tenant: &str) -> Result<()> {
    sqlx::query("SELECT set_config('app.tenant_id', $1, true), set_config('app.scope', '', true)")
        .bind(tenant)
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
    let mut tx = pool.begin().await?;
    sqlx::query(
        "SELECT set_config('app.scope', 'system', true), set_config('app.tenant_id', '', true)",
    )
    .execute(&mut *tx)
    .await?;
    Ok(tx)
}

/// Taken first by every transaction that appends events, before any row lock:
/// cursors are then handed out in commit order (see migrations/postgres/0002).
pub async fn lock_event_log(conn: &mut PgConnection) -> Result<()> {
    sqlx::query("SELECT lock_event_log()").execute(conn).await?;
    Ok(())
}

/// A tenant's write transaction that will append events: scoped, then locked.
pub async fn tenant_appending(pool: &PgPool, tenant: &str) -> Result<Tx> {
    let mut tx = self::tenant(pool, tenant).await?;
    lock_event_log(&mut tx).await?;
    Ok(tx)
}

/// Items grouped by tenant, first appearance first, each with its index in
/// `items` (batches may span tenants; a transaction switches scope per group).
pub fn by_tenant<T>(items: &[T], tenant_of: impl Fn(&T) -> &str) -> Vec<(String, Vec<usize>)> {
    let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let tenant = tenant_of(item);
        match groups.iter_mut().find(|(t, _)| t == tenant) {
            Some((_, indices)) => indices.push(i),
            None => groups.push((tenant.to_owned(), vec![i])),
        }
    }
    groups
}
