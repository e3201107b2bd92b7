-- Tenants, API keys (hashes only) and proposals. Times are Unix milliseconds.
-- Keep in step with migrations/sqlite/0001_foundation.sql.

CREATE TABLE tenants (
    name                        TEXT    PRIMARY KEY,
    created_at                  BIGINT  NOT NULL,
    parallel_window_ms          BIGINT  NOT NULL DEFAULT 600000,
    allow_force_approve_no_sop  BOOLEAN NOT NULL DEFAULT FALSE
);

CREATE TABLE api_keys (
    id          TEXT    PRIMARY KEY,
    tenant      TEXT    NOT NULL REFERENCES tenants (name),
    name        TEXT    NOT NULL,
    role        TEXT    NOT NULL CHECK (role IN ('coordinator', 'oncall', 'auditor', 'admin')),
    agent       BOOLEAN NOT NULL DEFAULT FALSE,
    key_hash    BYTEA   NOT NULL,
    created_at  BIGINT  NOT NULL,
    revoked_at  BIGINT
);

CREATE INDEX api_keys_by_tenant ON api_keys (tenant, created_at);

CREATE TABLE proposals (
    id                  TEXT    PRIMARY KEY,
    tenant              TEXT    NOT NULL REFERENCES tenants (name),
    action              TEXT    NOT NULL,
    class               TEXT    NOT NULL,
    target              TEXT    NOT NULL,
    blast_radius        TEXT    NOT NULL,
    operator            TEXT    NOT NULL,
    spec_json           TEXT    NOT NULL,
    spec_digest         TEXT    NOT NULL,
    idempotency_key     TEXT,
    state               TEXT    NOT NULL CHECK (state IN
        ('pending', 'reviewing', 'approved', 'rejected', 'cancelled', 'timed_out')),
    submitted_by        TEXT    NOT NULL,
    created_at          BIGINT  NOT NULL,
    updated_at          BIGINT  NOT NULL,
    cancel_reason       TEXT,
    suppressed_retries  BIGINT  NOT NULL DEFAULT 0
);

CREATE UNIQUE INDEX proposals_idempotency
    ON proposals (tenant, idempotency_key) WHERE idempotency_key IS NOT NULL;

-- ---------------------------------------------------------------------------
-- Tenant isolation, second line: row-level security.
--
-- The first line is the repository layer (every query names its tenant). This
-- one holds even if a query forgets to. Roles:
--   * the OWNER role runs these migrations and owns every table. It is not used
--     by the service at run time.
--   * the SERVICE role (`countersign serve`, `admin`) is not superuser, not
--     BYPASSRLS, owns nothing and cannot become a role that does: the store
--     refuses to connect otherwise. FORCE ROW LEVEL SECURITY makes the policies
--     bind even the owner.
--
-- Every transaction of the service names its scope with transaction-local
-- settings (`set_config(…, true)`), so nothing outlives the transaction on a
-- pooled connection:
--   * `app.tenant_id` = a tenant name: that tenant's rows can be read and
--     written, no other tenant's (the same expression is the USING and the WITH
--     CHECK, so a row cannot be moved to, or written for, another tenant).
--   * `app.scope` = 'system': READ-ONLY access across tenants, for the few
--     repository functions that genuinely have no tenant yet (see
--     services/store/src/postgres/scope.rs, the only place that sets it):
--     bootstrap's "is the database empty", the tenant list, the API-key lookup
--     by key id during authentication, the key list, the fan-out's read of every
--     tenant's events, the event horizon, the janitor's overdue reviews, and the
--     breaker rebuild at start (resets, recent rejections); `queue_entries`
--     is readable too, for an outbox sweeper. The one write it
--     allows is the event log's retention: deleting old events and moving
--     `event_retention`. A system-scope transaction that must then write a
--     tenant's row (revoking a key found by id; bootstrap) switches to that
--     tenant's scope first.
--   * neither set: every policy is false; queries see and write nothing.
--
-- Every new table with tenant data: ENABLE + FORCE ROW LEVEL SECURITY and a
-- `tenant_rows` policy like the ones below (plus `system_reads` if a
-- cross-tenant read is needed). `countersign_grant_service` grants the service
-- role what it needs on every table; `countersign migrate` calls it after the
-- migrations with the service role's name.
-- ---------------------------------------------------------------------------

ALTER TABLE tenants ENABLE ROW LEVEL SECURITY;
ALTER TABLE tenants FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON tenants
    USING (name = current_setting('app.tenant_id', true))
    WITH CHECK (name = current_setting('app.tenant_id', true));
CREATE POLICY system_reads ON tenants FOR SELECT
    USING (current_setting('app.scope', true) = 'system');

ALTER TABLE api_keys ENABLE ROW LEVEL SECURITY;
ALTER TABLE api_keys FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON api_keys
    USING (tenant = current_setting('app.tenant_id', true))
    WITH CHECK (tenant = current_setting('app.tenant_id', true));
CREATE POLICY system_reads ON api_keys FOR SELECT
    USING (current_setting('app.scope', true) = 'system');

ALTER TABLE proposals ENABLE ROW LEVEL SECURITY;
ALTER TABLE proposals FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON proposals
    USING (tenant = current_setting('app.tenant_id', true))
    WITH CHECK (tenant = current_setting('app.tenant_id', true));
CREATE POLICY system_reads ON proposals FOR SELECT
    USING (current_setting('app.scope', true) = 'system');

-- The service role's privileges, on every table that exists when it runs (so
-- it covers later migrations' tables too): rows only, never TRUNCATE (which
-- skips triggers and row security), never DDL. Decisions are append-only:
-- INSERT and SELECT, no UPDATE, no DELETE (a trigger refuses them as well).
-- The migration history is readable, so the service can tell an outdated
-- schema, and nothing else on it.
CREATE FUNCTION countersign_grant_service(service_role TEXT) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = service_role) THEN
        RAISE EXCEPTION 'the service role "%" does not exist', service_role;
    END IF;
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO %I', current_schema(), service_role);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA %I TO %I',
                   current_schema(), service_role);
    EXECUTE format('GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA %I TO %I',
                   current_schema(), service_role);
    EXECUTE format('REVOKE UPDATE, DELETE, TRUNCATE ON decisions FROM %I', service_role);
    EXECUTE format('REVOKE ALL ON _sqlx_migrations FROM %I', service_role);
    EXECUTE format('GRANT SELECT ON _sqlx_migrations TO %I', service_role);
END;
$$;
REVOKE ALL ON FUNCTION countersign_grant_service(TEXT) FROM PUBLIC;
