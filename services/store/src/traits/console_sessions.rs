use async_trait::async_trait;
use countersign_domain::Millis;

use crate::{ConsoleSession, Result};

/// The browser console's sessions, kept here so that every API replica
/// answers the same cookie. Rows hold the SHA-256 of a session's token, never
/// the token.
#[async_trait]
pub trait ConsoleSessions: Send + Sync + 'static {
    /// Records `session` (in its tenant's scope) and drops that tenant's
    /// sessions that expired before `session.created_at`.
    async fn open_console_session(&self, session: ConsoleSession) -> Result<()>;

    /// The session whose token hashes to `token_hash`, revoked or expired
    /// ones included (the caller decides): found before its tenant is known.
    async fn find_console_session(&self, token_hash: &[u8]) -> Result<Option<ConsoleSession>>;

    /// Revokes `tenant`'s session at `at` (sign out); false when there is no
    /// such session. An already revoked session keeps its first time.
    async fn revoke_console_session(
        &self,
        tenant: &str,
        token_hash: &[u8],
        at: Millis,
    ) -> Result<bool>;
}
