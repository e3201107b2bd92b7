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
