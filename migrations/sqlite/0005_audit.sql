-- The tamper-evident decision log (services/domain/src/audit.rs): each tenant's
-- decisions as a hash chain, sequence 1, 2, 3… `record` holds the canonical
-- JSON that is hashed; the other columns are copies of it for filtering.
-- Entries are appended by the sequencer in batches, after their decisions
-- commit, so recording a decision never waits on the chain's head.
CREATE TABLE audit_log (
    tenant        TEXT    NOT NULL,
    sequence      INTEGER NOT NULL,
    proposal_id   TEXT    NOT NULL UNIQUE,
    decided_at    INTEGER NOT NULL,
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
-- Newest first under each filter: one index range per filter.
CREATE INDEX audit_by_action       ON audit_log (tenant, action, sequence);
CREATE INDEX audit_by_target       ON audit_log (tenant, target, sequence);
CREATE INDEX audit_by_operator     ON audit_log (tenant, operator, sequence);
CREATE INDEX audit_by_submitter    ON audit_log (tenant, submitted_by, sequence);
CREATE INDEX audit_by_outcome      ON audit_log (tenant, outcome, sequence);
CREATE INDEX audit_by_sop          ON audit_log (tenant, sop_id, sequence);
CREATE INDEX audit_by_radius       ON audit_log (tenant, blast_radius, sequence);
CREATE INDEX audit_by_decided_at   ON audit_log (tenant, decided_at, sequence);

CREATE TRIGGER audit_log_is_append_only_update BEFORE UPDATE ON audit_log
BEGIN
    SELECT RAISE(ABORT, 'the audit log is append-only');
END;
CREATE TRIGGER audit_log_is_append_only_delete BEFORE DELETE ON audit_log
BEGIN
    SELECT RAISE(ABORT, 'the audit log is append-only');
END;

-- How far the sequencer has read the decisions (their rowids, in commit order:
-- SQLite has one writer).
CREATE TABLE audit_progress (
    id       INTEGER PRIMARY KEY CHECK (id = 1),
    through  INTEGER NOT NULL
);
INSERT INTO audit_progress (id, through) VALUES (1, 0);

-- Signed checkpoints, newest last.
CREATE TABLE audit_checkpoints (
    tenant        TEXT    NOT NULL,
    size          INTEGER NOT NULL,
    head_digest   TEXT    NOT NULL,
    signed_at     INTEGER NOT NULL,
    public_key    TEXT    NOT NULL,
    signature     TEXT    NOT NULL,
    PRIMARY KEY (tenant, signed_at, size)
);
