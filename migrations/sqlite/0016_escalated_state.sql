-- In step with migrations/postgres/0016_escalated_state.sql: proposals may be
-- ESCALATED (waiting for people after the gates), and that state change logs
-- an ESCALATED event.
--
-- SQLite cannot alter a CHECK constraint, so the table is rebuilt with the
-- same columns, indexes and triggers and the wider CHECK. `decisions`
-- references proposals: dropping the old table counts its rows as deferred
-- foreign-key violations, and inserting the same ids into the new table
-- settles them before this migration's transaction commits.
PRAGMA defer_foreign_keys = ON;

CREATE TABLE proposals_0016 AS SELECT * FROM proposals;
DROP TABLE proposals;

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
        ('pending', 'reviewing', 'approved', 'rejected', 'cancelled', 'timed_out', 'escalated')),
    submitted_by        TEXT    NOT NULL,
    created_at          INTEGER NOT NULL,
    updated_at          INTEGER NOT NULL,
    cancel_reason       TEXT,
    suppressed_retries  INTEGER NOT NULL DEFAULT 0,
    review_started_at   INTEGER,
    decided_at          INTEGER,
    trace_parent        TEXT,
    submitted_key       TEXT
);

-- Copied before the triggers exist: no queue entry or event is written twice.
INSERT INTO proposals (
    id, tenant, action, class, target, blast_radius, operator, spec_json,
    spec_digest, idempotency_key, state, submitted_by, created_at, updated_at,
    cancel_reason, suppressed_retries, review_started_at, decided_at, trace_parent,
    submitted_key)
SELECT
    id, tenant, action, class, target, blast_radius, operator, spec_json,
    spec_digest, idempotency_key, state, submitted_by, created_at, updated_at,
    cancel_reason, suppressed_retries, review_started_at, decided_at, trace_parent,
    submitted_key
FROM proposals_0016;
DROP TABLE proposals_0016;

CREATE UNIQUE INDEX proposals_idempotency
    ON proposals (tenant, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX proposals_open ON proposals (tenant, state, decided_at);
CREATE INDEX proposals_reviewing ON proposals (state, review_started_at);
CREATE INDEX proposals_target_state ON proposals (tenant, target, state, decided_at);
CREATE INDEX proposals_radius_state ON proposals (tenant, blast_radius, state, decided_at);
CREATE INDEX proposals_operator_rejections ON proposals (tenant, operator, decided_at)
    WHERE state = 'rejected';

CREATE TRIGGER proposals_submitted AFTER INSERT ON proposals
BEGIN
    INSERT INTO queue_entries (tenant, proposal_id, enqueued_at, available_at)
        VALUES (NEW.tenant, NEW.id, NEW.created_at, NEW.created_at);
    INSERT INTO events (tenant, proposal_id, kind, state, created_at)
        VALUES (NEW.tenant, NEW.id, 'SUBMITTED', NEW.state, NEW.created_at);
END;

CREATE TRIGGER proposals_state_changed AFTER UPDATE OF state ON proposals
WHEN NEW.state <> OLD.state
BEGIN
    INSERT INTO events (tenant, proposal_id, kind, state, created_at)
        VALUES (NEW.tenant, NEW.id,
                CASE NEW.state
                    WHEN 'pending' THEN 'REQUEUED'
                    WHEN 'reviewing' THEN 'REVIEW_STARTED'
                    WHEN 'approved' THEN 'APPROVED'
                    WHEN 'rejected' THEN 'REJECTED'
                    WHEN 'cancelled' THEN 'CANCELLED'
                    WHEN 'timed_out' THEN 'TIMED_OUT'
                    WHEN 'escalated' THEN 'ESCALATED'
                END,
                NEW.state, NEW.updated_at);
END;
