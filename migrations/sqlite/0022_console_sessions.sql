-- In step with migrations/postgres/0022_console_sessions.sql. The browser
-- console's sign-ins (services/api/src/console): one row per session, found
-- by the SHA-256 of the random token its cookie holds (never the token, never
-- the API key it was opened with). A session lasts until `expires_at` or its
-- revocation (sign out); it acts as `key_id`, whose own revocation ends it too.
CREATE TABLE console_sessions (
    token_hash  BLOB    PRIMARY KEY,
    tenant      TEXT    NOT NULL REFERENCES tenants (name),
    key_id      TEXT    NOT NULL REFERENCES api_keys (id),
    created_at  INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL,
    revoked_at  INTEGER
);

-- Opening a session drops the tenant's sessions that are past their expiry.
CREATE INDEX console_sessions_by_expiry ON console_sessions (tenant, expires_at);
