-- Signed checkpoints and SOP versions are history, like decisions and the log:
-- a checkpoint pins what the log was, and a decision's (sop_id, sop_version)
-- names the SOP it was reviewed against. Neither is ever updated or deleted.
-- Keep in step with migrations/postgres/0011_append_only_checkpoints_and_sop_versions.sql.
CREATE TRIGGER audit_checkpoints_are_append_only_update BEFORE UPDATE ON audit_checkpoints
BEGIN
    SELECT RAISE(ABORT, 'audit checkpoints are append-only');
END;
CREATE TRIGGER audit_checkpoints_are_append_only_delete BEFORE DELETE ON audit_checkpoints
BEGIN
    SELECT RAISE(ABORT, 'audit checkpoints are append-only');
END;

CREATE TRIGGER sop_versions_are_append_only_update BEFORE UPDATE ON sop_versions
BEGIN
    SELECT RAISE(ABORT, 'SOP versions are append-only');
END;
CREATE TRIGGER sop_versions_are_append_only_delete BEFORE DELETE ON sop_versions
BEGIN
    SELECT RAISE(ABORT, 'SOP versions are append-only');
END;

-- The newest checkpoint of any tenant, one seek: `serve` checks at start that
-- it was signed by the configured key.
CREATE INDEX audit_checkpoints_by_time ON audit_checkpoints (signed_at);
-- Whether the log grew since a tenant's newest checkpoint (a refresh of an
-- unchanged log keeps no new one), one seek.
CREATE INDEX audit_checkpoints_by_size ON audit_checkpoints (tenant, size);
