-- In step with migrations/postgres/0017_countersignature.sql. Human
-- countersignature (services/domain/src/escalation.rs): the people behind
-- keys and proposals, the tenants' routes, escalations and their votes.

-- The person a key belongs to (for an agent key, the person the agent acts
-- for). NULL: the key names no person (every key made before this column):
-- it may submit and watch, never resolve an escalation.
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
    approvals_required    INTEGER NOT NULL CHECK (approvals_required >= 1),
    approver_roles_json   TEXT    NOT NULL,
    expires_after_ms      INTEGER NOT NULL CHECK (expires_after_ms > 0),
    escalate_on_json      TEXT    NOT NULL,
    updated_at            INTEGER NOT NULL,
    PRIMARY KEY (tenant, id)
);

-- One per escalated proposal: the route's terms copied when it opened (a
-- later change or deletion of the route does not move them) and what the
-- review found. `closed_at` is set, by the trigger below, when the proposal
-- leaves ESCALATED whoever moves it (a vote, the expiry, a cancel): the open
-- ones are the rows without it, which the inbox pages and the janitor's
-- timer seek through partial indexes.
CREATE TABLE escalations (
    proposal_id          TEXT    PRIMARY KEY NOT NULL REFERENCES proposals (id),
    tenant               TEXT    NOT NULL,
    route_id             TEXT    NOT NULL,
    approvals_required   INTEGER NOT NULL CHECK (approvals_required >= 1),
    approver_roles_json  TEXT    NOT NULL,
    opened_at            INTEGER NOT NULL,
    expires_at           INTEGER NOT NULL,
    gates_json           TEXT    NOT NULL,
    sop_id               TEXT,
    sop_version          INTEGER,
    rollback_path        TEXT,
    reviewer             TEXT    NOT NULL,
    review_latency_ms    INTEGER NOT NULL,
    closed_at            INTEGER
);
CREATE INDEX escalations_open ON escalations (tenant, opened_at, proposal_id)
    WHERE closed_at IS NULL;
CREATE INDEX escalations_expiring ON escalations (expires_at) WHERE closed_at IS NULL;

CREATE TRIGGER escalations_close AFTER UPDATE OF state ON proposals
WHEN OLD.state = 'escalated' AND NEW.state <> 'escalated'
BEGIN
    UPDATE escalations SET closed_at = NEW.updated_at
    WHERE proposal_id = NEW.id AND closed_at IS NULL;
END;

-- People's votes, in the order cast (`id`). `person_key` is the person as
-- compared (domain::escalation::normalize_person: trimmed, ASCII lower-case):
-- one vote per person per proposal, whatever two writers race. Rows are
-- never updated or deleted; each insert logs a VOTE event.
CREATE TABLE votes (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant       TEXT    NOT NULL,
    proposal_id  TEXT    NOT NULL REFERENCES escalations (proposal_id),
    person       TEXT    NOT NULL,
    person_key   TEXT    NOT NULL CHECK (person_key <> ''),
    key_id       TEXT    NOT NULL,
    verdict      TEXT    NOT NULL CHECK (verdict IN ('approve', 'reject')),
    comment      TEXT    NOT NULL,
    at           INTEGER NOT NULL
);
CREATE UNIQUE INDEX votes_one_per_person ON votes (proposal_id, person_key);

CREATE TRIGGER votes_are_append_only_update BEFORE UPDATE ON votes
BEGIN
    SELECT RAISE(ABORT, 'votes are append-only');
END;
CREATE TRIGGER votes_are_append_only_delete BEFORE DELETE ON votes
BEGIN
    SELECT RAISE(ABORT, 'votes are append-only');
END;

CREATE TRIGGER votes_logged AFTER INSERT ON votes
BEGIN
    INSERT INTO events (tenant, proposal_id, kind, state, created_at)
        VALUES (NEW.tenant, NEW.proposal_id, 'VOTE', 'escalated', NEW.at);
END;
