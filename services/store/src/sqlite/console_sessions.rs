use async_trait::async_trait;
use countersign_domain::Millis;
use rusqlite::params;

use super::SqliteStore;
use crate::rows::{Named, NamedRows};
use crate::{ConsoleSession, ConsoleSessions, Result};

fn from_row(row: &Named<'_, '_>) -> Result<ConsoleSession> {
    Ok(ConsoleSession {
        token_hash: row.get("token_hash")?,
        tenant: row.get("tenant")?,
        key_id: row.get("key_id")?,
        created_at: row.get("created_at")?,
        expires_at: row.get("expires_at")?,
        revoked_at: row.get("revoked_at")?,
    })
}

#[async_trait]
impl ConsoleSessions for SqliteStore {
    async fn open_console_session(&self, session: ConsoleSession) -> Result<()> {
        self.write(move |conn| {
            conn.prepare_cached(
                "DELETE FROM console_sessions WHERE tenant = ? AND expires_at < ?",
            )?
            .execute(params![session.tenant, session.created_at])?;
            conn.prepare_cached(
                "INSERT INTO console_sessions
                     (token_hash, tenant, key_id, created_at, expires_at)
                 VALUES (?, ?, ?, ?, ?)",
            )?
            .execute(params![
                session.token_hash,
                session.tenant,
                session.key_id,
                session.created_at,
                session.expires_at,
            ])?;
            Ok(())
        })
        .await
    }

    async fn find_console_session(&self, token_hash: &[u8]) -> Result<Option<ConsoleSession>> {
        let token_hash = token_hash.to_vec();
        self.read(move |conn| {
            conn.prepare_cached("SELECT * FROM console_sessions WHERE token_hash = ?")?
                .named_row([token_hash], from_row)
        })
        .await
    }

    async fn revoke_console_session(
        &self,
        tenant: &str,
        token_hash: &[u8],
        at: Millis,
    ) -> Result<bool> {
        let (tenant, token_hash) = (tenant.to_owned(), token_hash.to_vec());
        self.write(move |conn| {
            let changed = conn
                .prepare_cached(
                    "UPDATE console_sessions SET revoked_at = COALESCE(revoked_at, ?)
                     WHERE tenant = ? AND token_hash = ?",
                )?
                .execute(params![at, tenant, token_hash])?;
            Ok(changed > 0)
        })
        .await
    }
}
