use async_trait::async_trait;
use rusqlite::{Connection, params};

use super::SqliteStore;
use crate::rows::{Named, NamedRows};
use crate::{ApiKeyRecord, ApiKeys, NewApiKey, Result, StoreError, now_ms, role_from_db};

fn from_row(row: &Named<'_, '_>) -> Result<ApiKeyRecord> {
    Ok(ApiKeyRecord {
        id: row.get("id")?,
        tenant: row.get("tenant")?,
        name: row.get("name")?,
        role: role_from_db(&row.get::<String>("role")?)?,
        agent: row.get("agent")?,
        key_hash: row.get("key_hash")?,
        created_at: row.get("created_at")?,
        revoked_at: row.get("revoked_at")?,
        person: row.get("person")?,
    })
}

/// Mints a key of an existing tenant (in the caller's transaction, if any).
#[tracing::instrument(name = "store.sqlite.create_api_key", skip_all, fields(tenant = %new.tenant))]
pub fn insert(conn: &Connection, new: NewApiKey) -> Result<(ApiKeyRecord, String)> {
    let exists = conn
        .prepare_cached("SELECT 1 FROM tenants WHERE name = ?")?
        .exists([&new.tenant])?;
    if !exists {
        return Err(StoreError::NotFound(format!("tenant `{}`", new.tenant)));
    }
    let (minted, name) = new.mint();
    let record = conn
        .prepare_cached(
            "INSERT INTO api_keys (id, tenant, name, role, agent, key_hash, created_at, person)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING *",
        )?
        .named_one(
            params![
                minted.id,
                new.tenant,
                name,
                new.role.as_str(),
                new.agent,
                &minted.hash[..],
                now_ms(),
                new.person(),
            ],
            from_row,
        )?;
    Ok((record, minted.key))
}

pub fn find(conn: &Connection, id: &str) -> Result<Option<ApiKeyRecord>> {
    conn.prepare_cached("SELECT * FROM api_keys WHERE id = ?")?
        .named_row([id], from_row)
}

pub fn list(conn: &Connection, tenant: Option<&str>) -> Result<Vec<ApiKeyRecord>> {
    conn.prepare_cached(
        "SELECT * FROM api_keys WHERE (?1 IS NULL OR tenant = ?1) ORDER BY tenant, created_at, id",
    )?
    .named_rows([tenant], from_row)
}

pub fn revoke(conn: &Connection, id: &str) -> Result<ApiKeyRecord> {
    conn.prepare_cached(
        "UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ? RETURNING *",
    )?
    .named_row(params![now_ms(), id], from_row)?
    .ok_or_else(|| StoreError::NotFound(format!("API key `{id}`")))
}

#[async_trait]
impl ApiKeys for SqliteStore {
    async fn create_api_key(&self, new: NewApiKey) -> Result<(ApiKeyRecord, String)> {
        self.write(move |conn| insert(conn, new)).await
    }

    async fn find_api_key(&self, id: &str) -> Result<Option<ApiKeyRecord>> {
        let id = id.to_owned();
        self.read(move |conn| find(conn, &id)).await
    }

    async fn list_api_keys(&self, tenant: Option<&str>) -> Result<Vec<ApiKeyRecord>> {
        let tenant = tenant.map(str::to_owned);
        self.read(move |conn| list(conn, tenant.as_deref())).await
    }

    async fn revoke_api_key(&self, id: &str) -> Result<ApiKeyRecord> {
        let id = id.to_owned();
        self.write(move |conn| revoke(conn, &id)).await
    }
}
