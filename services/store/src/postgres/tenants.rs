use async_trait::async_trait;
use countersign_domain::Role;
use sqlx::PgConnection;

use super::{PostgresStore, keys, scope};
use crate::rows::tenant_from_row;
use crate::{
    BootstrapKey, NewApiKey, Result, StoreError, Tenant, TenantPolicy, Tenants, check_policy,
    now_ms, validate_tenant_name,
};

pub const DEFAULT_TENANT: &str = "default";

/// Inserts tenant `name`; the transaction must be in its scope.
async fn insert(conn: &mut PgConnection, name: &str) -> Result<Tenant> {
    validate_tenant_name(name)?;
    let defaults = TenantPolicy::default();
    let row = sqlx::query(
        "INSERT INTO tenants (name, created_at, parallel_window_ms, allow_force_approve_no_sop,
             breaker_threshold, breaker_window_ms, receipt_ttl_ms)
         VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (name) DO NOTHING
         RETURNING *",
    )
    .bind(name)
    .bind(now_ms())
    .bind(defaults.parallel_window_ms)
    .bind(defaults.allow_force_approve_no_sop)
    .bind(i64::from(defaults.breaker_threshold))
    .bind(defaults.breaker_window_ms)
    .bind(defaults.receipt_ttl_ms)
    .fetch_optional(&mut *conn)
    .await?;
    match row {
        Some(row) => tenant_from_row(&row),
        None => Err(StoreError::AlreadyExists(format!(
            "tenant `{name}` already exists"
        ))),
    }
}

/// Tenant `name`, read in a transaction of its own or the caller's scope.
pub async fn get(conn: &mut PgConnection, name: &str) -> Result<Option<Tenant>> {
    sqlx::query("SELECT * FROM tenants WHERE name = $1")
        .bind(name)
        .fetch_optional(conn)
        .await?
        .as_ref()
        .map(tenant_from_row)
        .transpose()
}

#[async_trait]
impl Tenants for PostgresStore {
    #[tracing::instrument(name = "store.postgres.bootstrap", skip_all)]
    async fn bootstrap(&self) -> Result<Option<BootstrapKey>> {
        // System scope for "is the database empty" (it reads every tenant), then
        // the new tenant's own scope for the writes.
        let mut tx = scope::system(&self.pool).await?;
        // Two replicas starting together: one bootstraps, the other sees its tenant.
        sqlx::query("SELECT pg_advisory_xact_lock(7310291346331862)")
            .execute(&mut *tx)
            .await?;
        let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM tenants")
            .fetch_one(&mut *tx)
            .await?;
        if count > 0 {
            return Ok(None);
        }
        scope::enter_tenant(&mut tx, DEFAULT_TENANT).await?;
        insert(&mut tx, DEFAULT_TENANT).await?;
        let (record, key) = keys::insert(
            &mut tx,
            NewApiKey {
                tenant: DEFAULT_TENANT.into(),
                name: "bootstrap-admin".into(),
                role: Role::Admin,
                agent: false,
                person: None,
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

    #[tracing::instrument(name = "store.postgres.create_tenant", skip(self))]
    async fn create_tenant(&self, name: &str) -> Result<Tenant> {
        validate_tenant_name(name)?;
        let mut tx = scope::tenant(&self.pool, name).await?;
        let tenant = insert(&mut tx, name).await?;
        tx.commit().await?;
        Ok(tenant)
    }

    async fn get_tenant(&self, name: &str) -> Result<Option<Tenant>> {
        let mut tx = scope::tenant(&self.pool, name).await?;
        let tenant = get(&mut tx, name).await?;
        tx.commit().await?;
        Ok(tenant)
    }

    async fn list_tenants(&self) -> Result<Vec<Tenant>> {
        let mut tx = scope::system(&self.pool).await?;
        let rows = sqlx::query("SELECT * FROM tenants ORDER BY name")
            .fetch_all(&mut *tx)
            .await?;
        tx.commit().await?;
        rows.iter().map(tenant_from_row).collect()
    }

    #[tracing::instrument(name = "store.postgres.set_tenant_policy", skip(self))]
    async fn set_tenant_policy(&self, name: &str, policy: TenantPolicy) -> Result<Tenant> {
        check_policy(&policy)?;
        let mut tx = scope::tenant(&self.pool, name).await?;
        let row = sqlx::query(
            "UPDATE tenants SET parallel_window_ms = $1, allow_force_approve_no_sop = $2,
                 breaker_threshold = $3, breaker_window_ms = $4, receipt_ttl_ms = $5
             WHERE name = $6 RETURNING *",
        )
        .bind(policy.parallel_window_ms)
        .bind(policy.allow_force_approve_no_sop)
        .bind(i64::from(policy.breaker_threshold))
        .bind(policy.breaker_window_ms)
        .bind(policy.receipt_ttl_ms)
        .bind(name)
        .fetch_optional(&mut *tx)
        .await?;
        tx.commit().await?;
        match row {
            Some(row) => tenant_from_row(&row),
            None => Err(StoreError::NotFound(format!("tenant `{name}`"))),
        }
    }
}
