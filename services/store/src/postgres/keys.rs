use async_trait::async_trait;
use sqlx::{PgConnection, Row, postgres::PgRow};

use super::{PostgresStore, scope};
use crate::{ApiKeyRecord, ApiKeys, NewApiKey, Result, StoreError, now_ms, role_from_db};

fn from_row(row: &PgRow) -> Result<ApiKeyRecord> {
    Ok(ApiKeyRecord {
        id: row.try_get("id")?,
        tenant: row.try_get("tenant")?,
        name: row.try_get("name")?,
        role: role_from_db(row.try_get("role")?)?,
        agent: row.try_get("agent")?,
        key_hash: row.try_get("key_hash")?,
        created_at: row.try_get("created_at")?,
        revoked_at: row.try_get("revoked_at")?,
        person: row.try_get("person")?,
    })
}

/// Mints a key of `new.tenant`; the transaction must be in that tenant's scope.
pub async fn insert(conn: &mut PgConnection, new: NewApiKey) -> Result<(ApiKeyRecord, String)> {
    let exists: Option<String> = sqlx::query_scalar("SELECT name FROM tenants WHERE name = $1")
        .bind(&new.tenant)
        .fetch_optional(&mut *conn)
        .await?;
    if exists.is_none() {
        return Err(StoreError::NotFound(format!("tenant `{}`", new.tenant)));
    }
    let (minted, name) = new.mint();
    let row = sqlx::query(
        "INSERT INTO api_keys (id, tenant, name, role, agent, key_hash, created_at, person)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING *",
    )
    .bind(&minted.id)
    .bind(&new.tenant)
    .bind(&name)
    .bind(new.role.as_str())
    .bind(new.agent)
    .bind(&minted.hash[..])
    .bind(now_ms())
    .bind(new.person())
    .fetch_one(&mut *conn)
    .await?;
    Ok((from_row(&row)?, minted.key))
}

#[async_trait]
impl ApiKeys for PostgresStore {
    #[tracing::instrument(name = "store.postgres.create_api_key", skip_all, fields(tenant = %new.tenant))]
    async fn create_api_key(&self, new: NewApiKey) -> Result<(ApiKeyRecord, String)> {
        let mut tx = scope::tenant(&self.pool, &new.tenant).await?;
        let created = insert(&mut tx, new).await?;
        tx.commit().await?;
        Ok(created)
    }

    /// By key id alone: authentication does not know the tenant yet (system scope).
    #[tracing::instrument(name = "store.postgres.find_api_key", skip(self))]
    async fn find_api_key(&self, id: &str) -> Result<Option<ApiKeyRecord>> {
        let mut tx = scope::system(&self.pool).await?;
        let row = sqlx::query("SELECT * FROM api_keys WHERE id = $1")
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?;
        tx.commit().await?;
        row.as_ref().map(from_row).transpose()
    }

    async fn list_api_keys(&self, tenant: Option<&str>) -> Result<Vec<ApiKeyRecord>> {
        let pool = &self.pool;
        let mut tx = match tenant {
            Some(tenant) => scope::tenant(pool, tenant).await?,
            None => scope::system(pool).await?,
        };
        let rows = sqlx::query(
            "SELECT * FROM api_keys WHERE ($1::text IS NULL OR tenant = $1)
             ORDER BY tenant, created_at, id",
        )
        .bind(tenant)
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        rows.iter().map(from_row).collect()
    }

    /// By key id: found in the system scope, revoked in its tenant's.
    #[tracing::instrument(name = "store.postgres.revoke_api_key", skip(self))]
    async fn revoke_api_key(&self, id: &str) -> Result<ApiKeyRecord> {
        let mut tx = scope::system(&self.pool).await?;
        let tenant: Option<String> =
            sqlx::query_scalar("SELECT tenant FROM api_keys WHERE id = $1")
                .bind(id)
                .fetch_optional(&mut *tx)
                .await?;
        let Some(tenant) = tenant else {
            return Err(StoreError::NotFound(format!("API key `{id}`")));
        };
        scope::enter_tenant(&mut tx, &tenant).await?;
        let row = sqlx::query(
            "UPDATE api_keys SET revoked_at = COALESCE(revoked_at, $1)
             WHERE tenant = $2 AND id = $3 RETURNING *",
        )
        .bind(now_ms())
        .bind(&tenant)
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?;
        tx.commit().await?;
        match row {
            Some(row) => from_row(&row),
            None => Err(StoreError::NotFound(format!("API key `{id}`"))),
        }
    }
}
