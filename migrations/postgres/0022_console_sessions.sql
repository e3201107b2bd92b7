-- In step with migrations/sqlite/0022_console_sessions.sql. The browser
-- console's sign-ins (services/api/src/console): one row per session, found
-- by the SHA-256 of the random token its cookie holds (never the token, never
-- the API key it was opened with), so every API replica shares them. A session
-- lasts until `expires_at` or its revocation (sign out); it acts as `key_id`,
-- whose own revocation ends it too.
CREATE TABLE console_sessions (
    token_hash  BYTEA   PRIMARY KEY,
    tenant      TEXT    NOT NULL REFERENCES tenants (name),
    key_id      TEXT    NOT NULL REFERENCES api_keys (id),
    created_at  BIGINT  NOT NULL,
    expires_at  BIGINT  NOT NULL,
    revoked_at  BIGINT
);

-- Opening a session drops the tenant's sessions that are past their expiry.
CREATE INDEX console_sessions_by_expiry ON console_sessions (tenant, expires_at);

-- Row-level security (see 0001): a session is one tenant's row, written in
-- its tenant's scope; found by its token's hash before the tenant is known,
-- in the read-only system scope (as a key is found by its id). The service
-- role's grants cover the new table when `migrate` grants them (0017).
ALTER TABLE console_sessions ENABLE ROW LEVEL SECURITY;
ALTER TABLE console_sessions FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON console_sessions
    USING (tenant = current_setting('app.tenant_id', true))
    WITH CHECK (tenant = current_setting('app.tenant_id', true));
CREATE POLICY system_reads ON console_sessions FOR SELECT
    USING (current_setting('app.scope', true) = 'system');
