use async_trait::async_trait;
use countersign_domain::Role;
use rusqlite::{Connection, params};

use super::{SqliteStore, keys};
use crate::rows::{NamedRows, tenant_from_row};
use crate::{
    BootstrapKey, NewApiKey, Result, StoreError, Tenant, TenantPolicy, Tenants, check_policy,
    now_ms, validate_tenant_name,
};

pub const DEFAULT_TENANT: &str = "default";

#[tracing::instrument(name = "store.sqlite.create_tenant", skip(conn))]
pub fn create(conn: &Connection, name: &str) -> Result<Tenant> {
    validate_tenant_name(name)?;
    let defaults = TenantPolicy::default();
    conn.prepare_cached(
        "INSERT INTO tenants (name, created_at, parallel_window_ms, allow_force_approve_no_sop,
             breaker_threshold, breaker_window_ms, receipt_ttl_ms)
         VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (name) DO NOTHING
         RETURNING *",
    )?
    .named_row(
        params![
            name,
            now_ms(),
            defaults.parallel_window_ms,
            defaults.allow_force_approve_no_sop,
            defaults.breaker_threshold,
            defaults.breaker_window_ms,
            defaults.receipt_ttl_ms
        ],
        |row| tenant_from_row(row),
    )?
    .ok_or_else(|| StoreError::AlreadyExists(format!("tenant `{name}` already exists")))
}

pub fn bootstrap(conn: &mut Connection) -> Result<Option<BootstrapKey>> {
    let tx = conn.transaction()?;
    let count: i64 = tx.query_row("SELECT COUNT(*) FROM tenants", [], |r| r.get(0))?;
    if count > 0 {
        return Ok(None);
    }
    create(&tx, DEFAULT_TENANT)?;
    let (record, key) = keys::insert(
        &tx,
        NewApiKey {
            tenant: DEFAULT_TENANT.into(),
            name: "bootstrap-admin".into(),
            role: Role::Admin,
            agent: false,
            person: None,
        },
    )?;
    tx.commit()?;
    Ok(Some(BootstrapKey {
        tenant: DEFAULT_TENANT.into(),
        key_id: record.id,
        key,
    }))
}

pub fn get(conn: &Connection, name: &str) -> Result<Option<Tenant>> {
    conn.prepare_cached("SELECT * FROM tenants WHERE name = ?")?
        .named_row([name], |row| tenant_from_row(row))
}

pub fn list(conn: &Connection) -> Result<Vec<Tenant>> {
    conn.prepare_cached("SELECT * FROM tenants ORDER BY name")?
        .named_rows([], |row| tenant_from_row(row))
}

pub fn set_policy(conn: &Connection, name: &str, policy: TenantPolicy) -> Result<Tenant> {
    check_policy(&policy)?;
    conn.prepare_cached(
        "UPDATE tenants SET parallel_window_ms = ?, allow_force_approve_no_sop = ?,
             breaker_threshold = ?, breaker_window_ms = ?, receipt_ttl_ms = ?
         WHERE name = ? RETURNING *",
    )?
    .named_row(
        params![
            policy.parallel_window_ms,
            policy.allow_force_approve_no_sop,
            policy.breaker_threshold,
            policy.breaker_window_ms,
            policy.receipt_ttl_ms,
            name
        ],
        |row| tenant_from_row(row),
    )?
    .ok_or_else(|| StoreError::NotFound(format!("tenant `{name}`")))
}

#[async_trait]
impl Tenants for SqliteStore {
    async fn bootstrap(&self) -> Result<Option<BootstrapKey>> {
        self.write(bootstrap).await
    }

    async fn create_tenant(&self, name: &str) -> Result<Tenant> {
        let name = name.to_owned();
        self.write(move |conn| create(conn, &name)).await
    }

    async fn get_tenant(&self, name: &str) -> Result<Option<Tenant>> {
        let name = name.to_owned();
        self.read(move |conn| get(conn, &name)).await
    }

    async fn list_tenants(&self) -> Result<Vec<Tenant>> {
        self.read(|conn| list(conn)).await
    }

    async fn set_tenant_policy(&self, name: &str, policy: TenantPolicy) -> Result<Tenant> {
        let name = name.to_owned();
        self.write(move |conn| set_policy(conn, &name, policy))
            .await
    }
}
