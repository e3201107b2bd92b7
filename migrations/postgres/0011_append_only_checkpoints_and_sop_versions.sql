-- Signed checkpoints and SOP versions are history, like decisions and the log:
-- a checkpoint pins what the log was, and a decision's (sop_id, sop_version)
-- names the SOP it was reviewed against. Neither is ever updated, deleted or
-- truncated: triggers refuse it even to the owner, and the service role has
-- no UPDATE, DELETE or TRUNCATE on either (countersign_grant_service below).
-- Keep in step with migrations/sqlite/0011_append_only_checkpoints_and_sop_versions.sql.

CREATE FUNCTION audit_checkpoints_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit checkpoints are append-only';
END;
$$;
CREATE TRIGGER audit_checkpoints_are_append_only
    BEFORE UPDATE OR DELETE ON audit_checkpoints
    FOR EACH ROW EXECUTE FUNCTION audit_checkpoints_refuse_change();
CREATE TRIGGER audit_checkpoints_are_never_truncated
    BEFORE TRUNCATE ON audit_checkpoints
    FOR EACH STATEMENT EXECUTE FUNCTION audit_checkpoints_refuse_change();

CREATE FUNCTION sop_versions_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'SOP versions are append-only';
END;
$$;
CREATE TRIGGER sop_versions_are_append_only
    BEFORE UPDATE OR DELETE ON sop_versions
    FOR EACH ROW EXECUTE FUNCTION sop_versions_refuse_change();
CREATE TRIGGER sop_versions_are_never_truncated
    BEFORE TRUNCATE ON sop_versions
    FOR EACH STATEMENT EXECUTE FUNCTION sop_versions_refuse_change();

-- The newest checkpoint of any tenant, one seek: `serve` checks at start that
-- it was signed by the configured key.
CREATE INDEX audit_checkpoints_by_time ON audit_checkpoints (signed_at);
-- Whether the log grew since a tenant's newest checkpoint (a refresh of an
-- unchanged log keeps no new one), one seek.
CREATE INDEX audit_checkpoints_by_size ON audit_checkpoints (tenant, size);

-- As in 0005, and SOP versions are append-only for the service role as well.
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
    EXECUTE format('REVOKE ALL ON _sqlx_migrations FROM %I', service_role);
    EXECUTE format('GRANT SELECT ON _sqlx_migrations TO %I', service_role);
END;
$$;
REVOKE ALL ON FUNCTION countersign_grant_service(TEXT) FROM PUBLIC;
