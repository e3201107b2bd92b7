use countersign_domain::Role;
use sqlx::{Row, SqliteConnection, SqlitePool, sqlite::SqliteRow};

use super::keys;
use crate::{
    BootstrapKey, NewApiKey, Result, StoreError, Tenant, TenantPolicy, now_ms, validate_tenant_name,
};

pub const DEFAULT_TENANT: &str = "default";

fn from_row(row: &SqliteRow) -> Result<Tenant> {
    Ok(Tenant {
        name: row.try_get("name")?,
        created_at: row.try_get("created_at")?,
        policy: TenantPolicy {
            parallel_window_ms: row.try_get("parallel_window_ms")?,
            allow_force_approve_no_sop: row.try_get("allow_force_approve_no_sop")?,
            breaker_threshold: row.try_get::<i64, _>("breaker_threshold")?.max(0) as u32,
            breaker_window_ms: row.try_get("breaker_window_ms")?,
        },
    })
}

async fn insert(conn: &mut SqliteConnection, name: &str) -> Result<Tenant> {
    validate_tenant_name(name)?;
    let defaults = TenantPolicy::default();
    let row = sqlx::query(
        "INSERT INTO tenants (name, created_at, parallel_window_ms, allow_force_approve_no_sop,
             breaker_threshold, breaker_window_ms)
         VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (name) DO NOTHING
         RETURNING *",
    )
    .bind(name)
    .bind(now_ms())
    .bind(defaults.parallel_window_ms)
    .bind(defaults.allow_force_approve_no_sop)
    .bind(defaults.breaker_threshold)
    .bind(defaults.breaker_window_ms)
    .fetch_optional(&mut *conn)
    .await?;
    match row {
        Some(row) => from_row(&row),
        None => Err(StoreError::AlreadyExists(format!(
            "tenant `{name}` already exists"
        ))),
    }
}

#[tracing::instrument(name = "store.sqlite.create_tenant", skip(pool))]
pub async fn create(pool: &SqlitePool, name: &str) -> Result<Tenant> {
    let mut conn = pool.acquire().await?;
    insert(&mut conn, name).await
}

pub async fn bootstrap(pool: &SqlitePool) -> Result<Option<BootstrapKey>> {
    let mut tx = pool.begin().await?;
    let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM tenants")
        .fetch_one(&mut *tx)
        .await?;
    if count > 0 {
        return Ok(None);
    }
    insert(&mut tx, DEFAULT_TENANT).await?;
    let (record, key) = keys::insert(
        &mut tx,
        NewApiKey {
            tenant: DEFAULT_TENANT.into(),
            name: "bootstrap-admin".into(),
            role: Role::Admin,
            agent: false,
        },
    )
    .await?;
    tx.commit().await?;
    Ok(Some(BootstrapKey {
        tenant: DEFAULT_TENANT.into(),
        key_id: record.id,
        key,
    }))
}

pub async fn get<'e>(db: impl sqlx::SqliteExecutor<'e>, name: &str) -> Result<Option<Tenant>> {
    sqlx::query("SELECT * FROM tenants WHERE name = ?")
        .bind(name)
        .fetch_optional(db)
        .await?
        .as_ref()
        .map(from_row)
        .transpose()
}

pub async fn list(pool: &SqlitePool) -> Result<Vec<Tenant>> {
    sqlx::query("SELECT * FROM tenants ORDER BY name")
        .fetch_all(pool)
        .await?
        .iter()
        .map(from_row)
        .collect()
}

pub async fn set_policy(pool: &SqlitePool, name: &str, policy: TenantPolicy) -> Result<Tenant> {
    if policy.parallel_window_ms < 0 || policy.breaker_window_ms < 0 {
        return Err(StoreError::InvalidArgument(
            "windows must not be negative".into(),
        ));
    }
    let row = sqlx::query(
        "UPDATE tenants SET parallel_window_ms = ?, allow_force_approve_no_sop = ?,
             breaker_threshold = ?, breaker_window_ms = ?
         WHERE name = ? RETURNING *",
    )
    .bind(policy.parallel_window_ms)
    .bind(policy.allow_force_approve_no_sop)
    .bind(policy.breaker_threshold)
    .bind(policy.breaker_window_ms)
    .bind(name)
    .fetch_optional(pool)
    .await?;
    match row {
        Some(row) => from_row(&row),
        None => Err(StoreError::NotFound(format!("tenant `{name}`"))),
    }
}
