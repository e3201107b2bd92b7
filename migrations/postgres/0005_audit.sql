-- The tamper-evident decision log (services/domain/src/audit.rs): each tenant's
-- decisions as a hash chain, sequence 1, 2, 3… `record` holds the canonical
-- JSON that is hashed; the other columns are copies of it for filtering.
-- Entries are appended by the sequencer in batches, after their decisions
-- commit, so recording a decision never waits on a chain's head.
-- Keep in step with migrations/sqlite/0005_audit.sql.

-- Commit order for the sequencer: decisions are inserted under the event-log
-- lock (lock_event_log, 0002), so a value drawn at insert is in commit order.
CREATE SEQUENCE decisions_commit_order;
ALTER TABLE decisions ADD COLUMN commit_order BIGINT NOT NULL
    DEFAULT nextval('decisions_commit_order');
CREATE UNIQUE INDEX decisions_by_commit_order ON decisions (commit_order);

CREATE TABLE audit_log (
    tenant        TEXT    NOT NULL REFERENCES tenants (name),
    sequence      BIGINT  NOT NULL,
    proposal_id   TEXT    NOT NULL UNIQUE,
    decided_at    BIGINT  NOT NULL,
    action        TEXT    NOT NULL,
    target        TEXT    NOT NULL,
    operator      TEXT    NOT NULL,
    submitted_by  TEXT    NOT NULL,
    outcome       TEXT    NOT NULL,
    blast_radius  TEXT    NOT NULL,
    sop_id        TEXT,
    record        TEXT    NOT NULL,
    digest        TEXT    NOT NULL,
    PRIMARY KEY (tenant, sequence)
);
CREATE INDEX audit_by_action       ON audit_log (tenant, action, sequence);
CREATE INDEX audit_by_target       ON audit_log (tenant, target, sequence);
CREATE INDEX audit_by_operator     ON audit_log (tenant, operator, sequence);
CREATE INDEX audit_by_submitter    ON audit_log (tenant, submitted_by, sequence);
CREATE INDEX audit_by_outcome      ON audit_log (tenant, outcome, sequence);
CREATE INDEX audit_by_sop          ON audit_log (tenant, sop_id, sequence);
CREATE INDEX audit_by_radius       ON audit_log (tenant, blast_radius, sequence);
CREATE INDEX audit_by_decided_at   ON audit_log (tenant, decided_at, sequence);

CREATE FUNCTION audit_log_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the audit log is append-only';
END;
$$;
CREATE TRIGGER audit_log_is_append_only
    BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_log_refuse_change();
CREATE TRIGGER audit_log_is_never_truncated
    BEFORE TRUNCATE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION audit_log_refuse_change();

-- How far the sequencer has read the decisions (their commit_order). Not
-- tenant data; one row, locked by the sequencer (FOR UPDATE) so that two
-- sequencers take turns.
CREATE TABLE audit_progress (
    id       INTEGER PRIMARY KEY CHECK (id = 1),
    through  BIGINT  NOT NULL
);
INSERT INTO audit_progress (id, through) VALUES (1, 0);

-- Signed checkpoints, newest last.
CREATE TABLE audit_checkpoints (
    tenant        TEXT    NOT NULL REFERENCES tenants (name),
    size          BIGINT  NOT NULL,
    head_digest   TEXT    NOT NULL,
    signed_at     BIGINT  NOT NULL,
    public_key    TEXT    NOT NULL,
    signature     TEXT    NOT NULL,
    PRIMARY KEY (tenant, signed_at, size)
);

ALTER TABLE audit_log ENABLE ROW LEVEL SECURITY;
ALTER TABLE audit_log FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON audit_log
    USING (tenant = current_setting('app.tenant_id', true))
    WITH CHECK (tenant = current_setting('app.tenant_id', true));

ALTER TABLE audit_checkpoints ENABLE ROW LEVEL SECURITY;
ALTER TABLE audit_checkpoints FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON audit_checkpoints
    USING (tenant = current_setting('app.tenant_id', true))
    WITH CHECK (tenant = current_setting('app.tenant_id', true));
CREATE POLICY system_reads ON audit_checkpoints FOR SELECT
    USING (current_setting('app.scope', true) = 'system');

-- As in 0001, and the log is append-only for the service role as well.
CREATE OR REPLACE FUNCTION countersign_grant_service(service_role TEXT) RETURNS void
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
    EXECUTE format('REVOKE UPDATE, DELETE, TRUNCATE ON audit_log FROM %I', service_role);
    EXECUTE format('REVOKE UPDATE, DELETE, TRUNCATE ON audit_checkpoints FROM %I', service_role);
    EXECUTE format('REVOKE ALL ON _sqlx_migrations FROM %I', service_role);
    EXECUTE format('GRANT SELECT ON _sqlx_migrations TO %I', service_role);
END;
$$;
REVOKE ALL ON FUNCTION countersign_grant_service(TEXT) FROM PUBLIC;
