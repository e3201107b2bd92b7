use countersign_domain::api_key;
use rand::RngCore;
use sqlx::{Row, SqliteConnection, SqlitePool, sqlite::SqliteRow};

use crate::{ApiKeyRecord, NewApiKey, Result, StoreError, now_ms, role_from_db};

fn from_row(row: &SqliteRow) -> Result<ApiKeyRecord> {
    Ok(ApiKeyRecord {
        id: row.try_get("id")?,
        tenant: row.try_get("tenant")?,
        name: row.try_get("name")?,
        role: role_from_db(row.try_get("role")?)?,
        agent: row.try_get("agent")?,
        key_hash: row.try_get("key_hash")?,
        created_at: row.try_get("created_at")?,
        revoked_at: row.try_get("revoked_at")?,
    })
}

pub async fn insert(conn: &mut SqliteConnection, new: NewApiKey) -> Result<(ApiKeyRecord, String)> {
    let exists: Option<String> = sqlx::query_scalar("SELECT name FROM tenants WHERE name = ?")
        .bind(&new.tenant)
        .fetch_optional(&mut *conn)
        .await?;
    if exists.is_none() {
        return Err(StoreError::NotFound(format!("tenant `{}`", new.tenant)));
    }
    let mut id = [0u8; 8];
    let mut secret = [0u8; 32];
    rand::rng().fill_bytes(&mut id);
    rand::rng().fill_bytes(&mut secret);
    let minted = api_key::mint(id, secret);
    let name = if new.name.is_empty() {
        format!("{}-{}", new.role, &minted.id[..6])
    } else {
        new.name
    };
    let row = sqlx::query(
        "INSERT INTO api_keys (id, tenant, name, role, agent, key_hash, created_at)
         VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING *",
    )
    .bind(&minted.id)
    .bind(&new.tenant)
    .bind(&name)
    .bind(new.role.as_str())
    .bind(new.agent)
    .bind(&minted.hash[..])
    .bind(now_ms())
    .fetch_one(&mut *conn)
    .await?;
    Ok((from_row(&row)?, minted.key))
}

#[tracing::instrument(name = "store.sqlite.create_api_key", skip_all, fields(tenant = %new.tenant))]
pub async fn create(pool: &SqlitePool, new: NewApiKey) -> Result<(ApiKeyRecord, String)> {
    let mut conn = pool.acquire().await?;
    insert(&mut conn, new).await
}

pub async fn find(pool: &SqlitePool, id: &str) -> Result<Option<ApiKeyRecord>> {
    sqlx::query("SELECT * FROM api_keys WHERE id = ?")
        .bind(id)
        .fetch_optional(pool)
        .await?
        .as_ref()
        .map(from_row)
        .transpose()
}

pub async fn list(pool: &SqlitePool, tenant: Option<&str>) -> Result<Vec<ApiKeyRecord>> {
    sqlx::query(
        "SELECT * FROM api_keys WHERE (?1 IS NULL OR tenant = ?1) ORDER BY tenant, created_at, id",
    )
    .bind(tenant)
    .fetch_all(pool)
    .await?
    .iter()
    .map(from_row)
    .collect()
}

pub async fn revoke(pool: &SqlitePool, id: &str) -> Result<ApiKeyRecord> {
    let row = sqlx::query(
        "UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ? RETURNING *",
    )
    .bind(now_ms())
    .bind(id)
    .fetch_optional(pool)
    .await?;
    match row {
        Some(row) => from_row(&row),
        None => Err(StoreError::NotFound(format!("API key `{id}`"))),
    }
}
