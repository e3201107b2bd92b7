-- SOPs, targets, the queue, decisions and events.
-- Keep in step with migrations/sqlite/0002_review.sql.

CREATE TABLE sops (
    tenant            TEXT    NOT NULL REFERENCES tenants (name),
    id                TEXT    NOT NULL,
    version           BIGINT  NOT NULL,
    action            TEXT    NOT NULL,
    title             TEXT    NOT NULL,
    covers            TEXT    NOT NULL,
    rollback_path     TEXT    NOT NULL,
    max_blast_radius  TEXT    NOT NULL,
    selector_json     TEXT    NOT NULL,
    retired           BOOLEAN NOT NULL DEFAULT FALSE,
    updated_at        BIGINT  NOT NULL,
    PRIMARY KEY (tenant, id)
);
CREATE INDEX sops_by_action ON sops (tenant, action);

-- Every version ever put, so a decision's (sop_id, sop_version) can be read back.
CREATE TABLE sop_versions (
    tenant            TEXT    NOT NULL,
    id                TEXT    NOT NULL,
    version           BIGINT  NOT NULL,
    action            TEXT    NOT NULL,
    title             TEXT    NOT NULL,
    covers            TEXT    NOT NULL,
    rollback_path     TEXT    NOT NULL,
    max_blast_radius  TEXT    NOT NULL,
    selector_json     TEXT    NOT NULL,
    retired           BOOLEAN NOT NULL,
    updated_at        BIGINT  NOT NULL,
    PRIMARY KEY (tenant, id, version)
);

CREATE TABLE targets (
    tenant       TEXT    NOT NULL REFERENCES tenants (name),
    id           TEXT    NOT NULL,
    status       TEXT    NOT NULL CHECK (status IN ('online', 'offline', 'restart_loop', 'maintenance')),
    labels_json  TEXT    NOT NULL,
    cluster      TEXT,
    updated_at   BIGINT  NOT NULL,
    PRIMARY KEY (tenant, id)
);
CREATE INDEX targets_by_cluster ON targets (tenant, cluster);

ALTER TABLE proposals ADD COLUMN review_started_at BIGINT;
ALTER TABLE proposals ADD COLUMN decided_at BIGINT;
CREATE INDEX proposals_open ON proposals (tenant, state, decided_at);
CREATE INDEX proposals_reviewing ON proposals (state, review_started_at);
-- The parallel-operation gate looks operations up by target and by blast radius.
CREATE INDEX proposals_target_state ON proposals (tenant, target, state, decided_at);
CREATE INDEX proposals_radius_state ON proposals (tenant, blast_radius, state, decided_at);

-- The embedded queue. A row is written in the same transaction as its proposal.
CREATE TABLE queue_entries (
    id                BIGSERIAL PRIMARY KEY,
    tenant            TEXT    NOT NULL,
    proposal_id       TEXT    NOT NULL UNIQUE,
    enqueued_at       BIGINT  NOT NULL,
    available_at      BIGINT  NOT NULL,
    attempts          BIGINT  NOT NULL DEFAULT 0,
    lease_owner       TEXT,
    lease_token       TEXT,
    lease_expires_at  BIGINT,
    dead_at           BIGINT,
    dead_reason       TEXT
);
CREATE INDEX queue_ready ON queue_entries (dead_at, lease_expires_at, available_at);

-- Exactly one decision per proposal; rows are never updated or deleted.
CREATE TABLE decisions (
    proposal_id         TEXT    PRIMARY KEY REFERENCES proposals (id),
    tenant              TEXT    NOT NULL,
    outcome             TEXT    NOT NULL CHECK (outcome IN ('approve', 'reject', 'timed_out')),
    reason              TEXT    NOT NULL,
    agent_message       TEXT    NOT NULL,
    sop_id              TEXT,
    sop_version         BIGINT,
    rollback_path       TEXT,
    gates_json          TEXT    NOT NULL,
    missing_gates_json  TEXT    NOT NULL,
    reviewer            TEXT    NOT NULL,
    decided_at          BIGINT  NOT NULL,
    summary             TEXT    NOT NULL,
    review_latency_ms   BIGINT  NOT NULL
);
CREATE INDEX decisions_by_tenant ON decisions (tenant, decided_at);

CREATE FUNCTION decisions_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'decisions are append-only';
END;
$$;
CREATE TRIGGER decisions_are_append_only
    BEFORE UPDATE OR DELETE ON decisions
    FOR EACH ROW EXECUTE FUNCTION decisions_refuse_change();
CREATE TRIGGER decisions_are_never_truncated
    BEFORE TRUNCATE ON decisions
    FOR EACH STATEMENT EXECUTE FUNCTION decisions_refuse_change();

-- Every state change of a proposal, in commit order (the cursor).
--
-- Commit order, not just allocation order: a watcher reads `cursor > N`, so if
-- a transaction holding cursor 10 committed after one holding 11, a reader that
-- had already seen 11 would skip 10 forever. So cursors are handed out under a
-- transaction-level advisory lock (`lock_event_log()`), held from the first
-- event a transaction appends until it commits or rolls back: at most one
-- uncommitted transaction ever holds cursors, and the next one allocates only
-- after it is visible (a commit becomes visible before its locks are
-- released). The visible log is therefore always a gap-free prefix in cursor
-- order (gaps left by rolled-back transactions are never filled, and no reader
-- waits for them). The cursor is assigned by a BEFORE INSERT trigger after it
-- takes the lock, whoever inserts the event.
--
-- The cost: writers that append events are serialised from their first event
-- to their commit. The store takes the lock as the first statement of every
-- transaction that will append events, so the lock is always taken before any
-- row lock (no deadlock between the lock and rows) and held for a handful of
-- statements.
CREATE SEQUENCE events_cursor_seq AS BIGINT;
CREATE TABLE events (
    cursor       BIGINT  PRIMARY KEY,
    tenant       TEXT    NOT NULL,
    proposal_id  TEXT    NOT NULL,
    kind         TEXT    NOT NULL,
    state        TEXT    NOT NULL,
    created_at   BIGINT  NOT NULL
);
ALTER SEQUENCE events_cursor_seq OWNED BY events.cursor;
CREATE INDEX events_by_tenant ON events (tenant, cursor);

-- The one lock that orders the event log (a constant key, per database).
CREATE FUNCTION lock_event_log() RETURNS void LANGUAGE sql AS $$
    SELECT pg_advisory_xact_lock(7310291346331861);
$$;

CREATE FUNCTION events_take_cursor() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM lock_event_log();
    NEW.cursor := nextval('events_cursor_seq');
    RETURN NEW;
END;
$$;
CREATE TRIGGER events_take_cursor BEFORE INSERT ON events
    FOR EACH ROW EXECUTE FUNCTION events_take_cursor();

-- Every state change writes its event in the same transaction, whoever makes
-- it: the database holds that invariant, not each caller.
CREATE FUNCTION proposals_submitted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO queue_entries (tenant, proposal_id, enqueued_at, available_at)
        VALUES (NEW.tenant, NEW.id, NEW.created_at, NEW.created_at);
    INSERT INTO events (tenant, proposal_id, kind, state, created_at)
        VALUES (NEW.tenant, NEW.id, 'SUBMITTED', NEW.state, NEW.created_at);
    RETURN NULL;
END;
$$;
CREATE TRIGGER proposals_submitted AFTER INSERT ON proposals
    FOR EACH ROW EXECUTE FUNCTION proposals_submitted();

CREATE FUNCTION proposals_state_changed() RETURNS trigger LANGUAGE plpgsql AS $$
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
                END,
                NEW.state, NEW.updated_at);
    RETURN NULL;
END;
$$;
CREATE TRIGGER proposals_state_changed AFTER UPDATE OF state ON proposals
    FOR EACH ROW WHEN (NEW.state IS DISTINCT FROM OLD.state)
    EXECUTE FUNCTION proposals_state_changed();

-- Results that arrived after their proposal was already terminal, counted not applied.
CREATE TABLE discarded_results (
    id           BIGSERIAL PRIMARY KEY,
    tenant       TEXT    NOT NULL,
    proposal_id  TEXT    NOT NULL,
    outcome      TEXT    NOT NULL,
    state_found  TEXT    NOT NULL,
    reviewer     TEXT    NOT NULL,
    at           BIGINT  NOT NULL
);

-- Row-level security (see 0001): every table here holds one tenant's rows.
ALTER TABLE sops ENABLE ROW LEVEL SECURITY;
ALTER TABLE sops FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON sops
    USING (tenant = current_setting('app.tenant_id', true))
    WITH CHECK (tenant = current_setting('app.tenant_id', true));

ALTER TABLE sop_versions ENABLE ROW LEVEL SECURITY;
ALTER TABLE sop_versions FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON sop_versions
    USING (tenant = current_setting('app.tenant_id', true))
    WITH CHECK (tenant = current_setting('app.tenant_id', true));

ALTER TABLE targets ENABLE ROW LEVEL SECURITY;
ALTER TABLE targets FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON targets
    USING (tenant = current_setting('app.tenant_id', true))
    WITH CHECK (tenant = current_setting('app.tenant_id', true));

-- The outbox: written with its proposal; read across tenants by a sweeper.
ALTER TABLE queue_entries ENABLE ROW LEVEL SECURITY;
ALTER TABLE queue_entries FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON queue_entries
    USING (tenant = current_setting('app.tenant_id', true))
    WITH CHECK (tenant = current_setting('app.tenant_id', true));
CREATE POLICY system_reads ON queue_entries FOR SELECT
    USING (current_setting('app.scope', true) = 'system');

ALTER TABLE decisions ENABLE ROW LEVEL SECURITY;
ALTER TABLE decisions FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON decisions
    USING (tenant = current_setting('app.tenant_id', true))
    WITH CHECK (tenant = current_setting('app.tenant_id', true));
CREATE POLICY system_reads ON decisions FOR SELECT
    USING (current_setting('app.scope', true) = 'system');

ALTER TABLE events ENABLE ROW LEVEL SECURITY;
ALTER TABLE events FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON events
    USING (tenant = current_setting('app.tenant_id', true))
    WITH CHECK (tenant = current_setting('app.tenant_id', true));
CREATE POLICY system_reads ON events FOR SELECT
    USING (current_setting('app.scope', true) = 'system');
-- Retention: the pruner deletes old events of every tenant.
CREATE POLICY system_prunes ON events FOR DELETE
    USING (current_setting('app.scope', true) = 'system');

ALTER TABLE discarded_results ENABLE ROW LEVEL SECURITY;
ALTER TABLE discarded_results FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON discarded_results
    USING (tenant = current_setting('app.tenant_id', true))
    WITH CHECK (tenant = current_setting('app.tenant_id', true));
