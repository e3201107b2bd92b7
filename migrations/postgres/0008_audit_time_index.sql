-- In step with migrations/sqlite/0008_audit_time_index.sql. A time window is
-- found by sequence (services/domain/src/audit/time_index.rs): each entry also
-- stores the running maximum of decided_at through it, and the most any entry
-- so far trails that maximum. Both never go down, so a window's first and last
-- possible sequences are two seeks on one index. Derived columns, not part of
-- the hashed record; existing entries are filled in here, once, by the owner:
-- the append-only trigger is disabled and row-level security is not forced for
-- these statements alone, inside the migration's transaction (the owner is not
-- BYPASSRLS, so under FORCE it would see no tenant's rows). New columns of an existing table: the service
-- role's grants and the row-level-security policies already cover them.
ALTER TABLE audit_log ADD COLUMN decided_max BIGINT NOT NULL DEFAULT 0;
ALTER TABLE audit_log ADD COLUMN lateness_max BIGINT NOT NULL DEFAULT 0;

ALTER TABLE audit_log NO FORCE ROW LEVEL SECURITY;
ALTER TABLE audit_log DISABLE TRIGGER audit_log_is_append_only;
WITH running AS (
    SELECT tenant, sequence,
           max(decided_at) OVER (PARTITION BY tenant ORDER BY sequence) AS decided_max
    FROM audit_log
)
UPDATE audit_log SET decided_max = running.decided_max
FROM running WHERE running.tenant = audit_log.tenant AND running.sequence = audit_log.sequence;
WITH running AS (
    SELECT tenant, sequence,
           max(decided_max - decided_at) OVER (PARTITION BY tenant ORDER BY sequence) AS lateness_max
    FROM audit_log
)
UPDATE audit_log SET lateness_max = running.lateness_max
FROM running WHERE running.tenant = audit_log.tenant AND running.sequence = audit_log.sequence;
ALTER TABLE audit_log ENABLE TRIGGER audit_log_is_append_only;
ALTER TABLE audit_log FORCE ROW LEVEL SECURITY;

-- It replaces the index on decided_at, which only the old range scan used.
CREATE INDEX audit_by_decided_max ON audit_log (tenant, decided_max, sequence);

DROP INDEX audit_by_decided_at;
