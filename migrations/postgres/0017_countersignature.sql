-- In step with migrations/sqlite/0017_countersignature.sql. Human
-- countersignature (services/domain/src/escalation.rs): the people behind
-- keys and proposals, the tenants' routes, escalations and their votes.

-- The person a key belongs to (for an agent key, the person the agent acts
-- for). NULL: the key names no person (every key made before this column):
-- it may submit and watch, never resolve an escalation. New columns of
-- existing tables: the grants and the row-level-security policies of their
-- tables already cover them.
ALTER TABLE api_keys ADD COLUMN person TEXT;
-- The submitting key's person, recorded at submit (NULL: none).
ALTER TABLE proposals ADD COLUMN submitted_by_person TEXT;

-- A decision people reached names the route that sent the proposal to them
-- and carries their votes as JSON (both NULL for a decision of a proposal
-- that was never escalated, and the votes NULL when there were none).
ALTER TABLE decisions ADD COLUMN route_id TEXT;
ALTER TABLE decisions ADD COLUMN votes_json TEXT;

-- Tenant policy: which proposals wait for people after the gates. Lists are
-- JSON arrays of names (a selector a JSON object), as `validate_route` leaves
-- them: deduplicated, in a fixed order.
CREATE TABLE routes (
    tenant                TEXT    NOT NULL REFERENCES tenants (name),
    id                    TEXT    NOT NULL,
    actions_json          TEXT    NOT NULL,
    classes_json          TEXT    NOT NULL,
    blast_radii_json      TEXT    NOT NULL,
    target_selector_json  TEXT    NOT NULL,
    approvals_required    BIGINT  NOT NULL CHECK (approvals_required >= 1),
    approver_roles_json   TEXT    NOT NULL,
    expires_after_ms      BIGINT  NOT NULL CHECK (expires_after_ms > 0),
    escalate_on_json      TEXT    NOT NULL,
    updated_at            BIGINT  NOT NULL,
    PRIMARY KEY (tenant, id)
);

-- One per escalated proposal: the route's terms copied when it opened (a
-- later change or deletion of the route does not move them) and what the
-- review found. `closed_at` is set, by the trigger below, when the proposal
-- leaves ESCALATED whoever moves it (a vote, the expiry, a cancel): the open
-- ones are the rows without it, which the inbox pages and the janitor's
-- timer seek through partial indexes.
CREATE TABLE escalations (
    proposal_id          TEXT    PRIMARY KEY REFERENCES proposals (id),
    tenant               TEXT    NOT NULL REFERENCES tenants (name),
    route_id             TEXT    NOT NULL,
    approvals_required   BIGINT  NOT NULL CHECK (approvals_required >= 1),
    approver_roles_json  TEXT    NOT NULL,
    opened_at            BIGINT  NOT NULL,
    expires_at           BIGINT  NOT NULL,
    gates_json           TEXT    NOT NULL,
    sop_id               TEXT,
    sop_version          BIGINT,
    rollback_path        TEXT,
    reviewer             TEXT    NOT NULL,
    review_latency_ms    BIGINT  NOT NULL,
    closed_at            BIGINT
);
CREATE INDEX escalations_open ON escalations (tenant, opened_at, proposal_id COLLATE "C")
    WHERE closed_at IS NULL;
CREATE INDEX escalations_expiring ON escalations (expires_at) WHERE closed_at IS NULL;

-- Immediate, in the scope of the transaction that moves the proposal (its
-- own tenant's): the row it closes is locked after the proposal's own, in
-- the order every writer of an escalated proposal takes them.
CREATE FUNCTION escalations_close() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE escalations SET closed_at = NEW.updated_at
    WHERE proposal_id = NEW.id AND tenant = NEW.tenant AND closed_at IS NULL;
    RETURN NULL;
END;
$$;
CREATE TRIGGER escalations_close AFTER UPDATE OF state ON proposals
    FOR EACH ROW WHEN (OLD.state = 'escalated' AND NEW.state IS DISTINCT FROM 'escalated')
    EXECUTE FUNCTION escalations_close();

-- People's votes, in the order cast (`id`: a proposal's votes are written
-- one at a time, under its row lock). `person_key` is the person as compared
-- (domain::escalation::normalize_person: trimmed, ASCII lower-case): one vote
-- per person per proposal, whatever two writers race. Rows are never updated,
-- deleted or truncated; each insert logs a VOTE event.
CREATE TABLE votes (
    id           BIGSERIAL PRIMARY KEY,
    tenant       TEXT    NOT NULL REFERENCES tenants (name),
    proposal_id  TEXT    NOT NULL REFERENCES escalations (proposal_id),
    person       TEXT    NOT NULL,
    person_key   TEXT    NOT NULL CHECK (person_key <> ''),
    key_id       TEXT    NOT NULL,
    verdict      TEXT    NOT NULL CHECK (verdict IN ('approve', 'reject')),
    comment      TEXT    NOT NULL,
    at           BIGINT  NOT NULL
);
CREATE UNIQUE INDEX votes_one_per_person ON votes (proposal_id, person_key);

CREATE FUNCTION votes_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'votes are append-only';
END;
$$;
CREATE TRIGGER votes_are_append_only
    BEFORE UPDATE OR DELETE ON votes
    FOR EACH ROW EXECUTE FUNCTION votes_refuse_change();
CREATE TRIGGER votes_are_never_truncated
    BEFORE TRUNCATE ON votes
    FOR EACH STATEMENT EXECUTE FUNCTION votes_refuse_change();

-- The VOTE event, written at commit like every other event (0010: deferred,
-- so the event log's lock is taken by the commit alone), in the vote's
-- tenant's scope; a vote that decides logs its VOTE before the decision's
-- state change, which it precedes.
CREATE FUNCTION votes_logged() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    scoped text := COALESCE(current_setting('app.tenant_id', true), '');
BEGIN
    PERFORM set_config('app.tenant_id', NEW.tenant, true);
    INSERT INTO events (tenant, proposal_id, kind, state, created_at)
        VALUES (NEW.tenant, NEW.proposal_id, 'VOTE', 'escalated', NEW.at);
    PERFORM set_config('app.tenant_id', scoped, true);
    RETURN NULL;
END;
$$;
CREATE CONSTRAINT TRIGGER votes_logged AFTER INSERT ON votes
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION votes_logged();

-- Row-level security (see 0001). Routes and votes are one tenant's rows.
-- The janitor finds what expired, and the gauge counts open escalations,
-- across tenants: escalations are readable in the system scope (each expiry
-- is then written in its tenant's).
ALTER TABLE routes ENABLE ROW LEVEL SECURITY;
ALTER TABLE routes FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON routes
    USING (tenant = current_setting('app.tenant_id', true))
    WITH CHECK (tenant = current_setting('app.tenant_id', true));

ALTER TABLE escalations ENABLE ROW LEVEL SECURITY;
ALTER TABLE escalations FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON escalations
    USING (tenant = current_setting('app.tenant_id', true))
    WITH CHECK (tenant = current_setting('app.tenant_id', true));
CREATE POLICY system_reads ON escalations FOR SELECT
    USING (current_setting('app.scope', true) = 'system');

ALTER TABLE votes ENABLE ROW LEVEL SECURITY;
ALTER TABLE votes FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON votes
    USING (tenant = current_setting('app.tenant_id', true))
    WITH CHECK (tenant = current_setting('app.tenant_id', true));

-- As in 0011, and votes are append-only for the service role as well.
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
    EXECUTE format('REVOKE UPDATE, DELETE, TRUNCATE ON sop_versions FROM %I', service_role);
    EXECUTE format('REVOKE UPDATE, DELETE, TRUNCATE ON votes FROM %I', service_role);
    EXECUTE format('REVOKE ALL ON _sqlx_migrations FROM %I', service_role);
    EXECUTE format('GRANT SELECT ON _sqlx_migrations TO %I', service_role);
END;
$$;
REVOKE ALL ON FUNCTION countersign_grant_service(TEXT) FROM PUBLIC;
