-- Tenants, API keys (hashes only) and proposals. Times are Unix milliseconds.
-- Keep in step with migrations/postgres/0001_foundation.sql.

CREATE TABLE tenants (
    name                        TEXT    PRIMARY KEY NOT NULL,
    created_at                  INTEGER NOT NULL,
    parallel_window_ms          INTEGER NOT NULL DEFAULT 600000,
    allow_force_approve_no_sop  INTEGER NOT NULL DEFAULT 0
);

CREATE TABLE api_keys (
    id          TEXT    PRIMARY KEY NOT NULL,
    tenant      TEXT    NOT NULL REFERENCES tenants (name),
    name        TEXT    NOT NULL,
    role        TEXT    NOT NULL CHECK (role IN ('coordinator', 'oncall', 'auditor', 'admin')),
    agent       INTEGER NOT NULL DEFAULT 0,
    key_hash    BLOB    NOT NULL,
    created_at  INTEGER NOT NULL,
    revoked_at  INTEGER
);

CREATE INDEX api_keys_by_tenant ON api_keys (tenant, created_at);

CREATE TABLE proposals (
    id                  TEXT    PRIMARY KEY NOT NULL,
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
    created_at          INTEGER NOT NULL,
    updated_at          INTEGER NOT NULL,
    cancel_reason       TEXT,
    suppressed_retries  INTEGER NOT NULL DEFAULT 0
);

CREATE UNIQUE INDEX proposals_idempotency
    ON proposals (tenant, idempotency_key) WHERE idempotency_key IS NOT NULL;
