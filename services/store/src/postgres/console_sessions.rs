use async_trait::async_trait;
use countersign_domain::Millis;
use sqlx::{Row, postgres::PgRow};

use super::{PostgresStore, scope};
use crate::{ConsoleSession, ConsoleSessions, Result};

fn from_row(row: &PgRow) -> Result<ConsoleSession> {
    Ok(ConsoleSession {
        token_hash: row.try_get("token_hash")?,
        tenant: row.try_get("tenant")?,
        key_id: row.try_get("key_id")?,
        created_at: row.try_get("created_at")?,
        expires_at: row.try_get("expires_at")?,
        revoked_at: row.try_get("revoked_at")?,
    })
}

#[async_trait]
impl ConsoleSessions for PostgresStore {
    #[tracing::instrument(name = "store.postgres.open_console_session", skip_all, fields(tenant = %session.tenant))]
    async fn open_console_session(&self, session: ConsoleSession) -> Result<()> {
        let mut tx = scope::tenant(&self.pool, &session.tenant).await?;
        sqlx::query("DELETE FROM console_sessions WHERE tenant = $1 AND expires_at < $2")
            .bind(&session.tenant)
            .bind(session.created_at)
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "INSERT INTO console_sessions (token_hash, tenant, key_id, created_at, expires_at)
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(&session.token_hash)
        .bind(&session.tenant)
        .bind(&session.key_id)
        .bind(session.created_at)
        .bind(session.expires_at)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// By the token's hash alone: the tenant is not known yet (system scope).
    async fn find_console_session(&self, token_hash: &[u8]) -> Result<Option<ConsoleSession>> {
        let mut tx = scope::system(&self.pool).await?;
        let row = sqlx::query("SELECT * FROM console_sessions WHERE token_hash = $1")
            .bind(token_hash)
            .fetch_optional(&mut *tx)
            .await?;
        tx.commit().await?;
        row.as_ref().map(from_row).transpose()
    }

    async fn revoke_console_session(
        &self,
        tenant: &str,
        token_hash: &[u8],
        at: Millis,
    ) -> Result<bool> {
        let mut tx = scope::tenant(&self.pool, tenant).await?;
        let changed = sqlx::query(
            "UPDATE console_sessions SET revoked_at = COALESCE(revoked_at, $1)
             WHERE tenant = $2 AND token_hash = $3",
        )
        .bind(at)
        .bind(tenant)
        .bind(token_hash)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        tx.commit().await?;
        Ok(changed > 0)
    }
}
