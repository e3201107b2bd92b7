-- In step with migrations/sqlite/0012_tenant_cursors.sql.
--
-- Each tenant's own event cursor, `tenant_cursor`: 1, 2, 3… over the tenant's
-- events, in commit order, counting no other tenant's. It is what the
-- tenant's watchers see, resume from and are heartbeated at, so a tenant
-- learns nothing of another's activity from them. The log-wide `cursor` stays
-- the order the fan-out reads every tenant's events in; no tenant sees it.
--
-- An event takes its tenant's next cursor from `tenant_event_cursors` where
-- the log-wide cursor is drawn, after the event log's lock (0002, 0010),
-- which is held until commit: at most one uncommitted transaction holds
-- cursors, so a tenant's cursors are in commit order too, and a rolled-back
-- transaction takes its cursors back (no gap). The counter is reached through
-- its key by the upsert itself (no plan to go wrong on a young table), and
-- its rows are locked only under the event log's lock, so they add no
-- deadlock. The counter, not the events, holds a tenant's newest cursor, so
-- pruning never brings a cursor back; the pruner writes only
-- `tenant_event_retention`.
ALTER TABLE events ADD COLUMN tenant_cursor BIGINT;

-- Each tenant's newest cursor handed out.
CREATE TABLE tenant_event_cursors (
    tenant  TEXT    PRIMARY KEY,
    latest  BIGINT  NOT NULL
);

-- How far each tenant's events have been pruned, in its cursors: resuming
-- before that is OUT_OF_RANGE (`event_retention` is the log's own mark).
CREATE TABLE tenant_event_retention (
    tenant          TEXT    PRIMARY KEY,
    pruned_through  BIGINT  NOT NULL
);

-- The events already logged keep their log-wide cursor as the tenant's
-- cursor, and every tenant's numbering continues after the log's newest
-- cursor (its heartbeats named it): a cursor a watcher already holds still
-- resumes exactly where it left off, and one older than retention is still
-- refused. Tenants made from here on count from 1. Filled in by the owner,
-- with row-level security not forced for these statements alone (the owner
-- is not BYPASSRLS; see 0008).
ALTER TABLE events NO FORCE ROW LEVEL SECURITY;
ALTER TABLE event_retention NO FORCE ROW LEVEL SECURITY;
ALTER TABLE tenants NO FORCE ROW LEVEL SECURITY;
UPDATE events SET tenant_cursor = cursor;
INSERT INTO tenant_event_cursors (tenant, latest)
SELECT t.name, GREATEST((SELECT MAX(cursor) FROM events), r.pruned_through)
FROM tenants AS t CROSS JOIN event_retention AS r WHERE r.id = 1;
INSERT INTO tenant_event_retention (tenant, pruned_through)
SELECT t.name, r.pruned_through
FROM tenants AS t CROSS JOIN event_retention AS r WHERE r.id = 1 AND r.pruned_through > 0;
ALTER TABLE tenants FORCE ROW LEVEL SECURITY;
ALTER TABLE event_retention FORCE ROW LEVEL SECURITY;
ALTER TABLE events FORCE ROW LEVEL SECURITY;
ALTER TABLE events ALTER COLUMN tenant_cursor SET NOT NULL;

-- A tenant's replay reads by it; it replaces the index by log-wide cursor.
CREATE UNIQUE INDEX events_by_tenant_cursor ON events (tenant, tenant_cursor);
DROP INDEX events_by_tenant;

-- Row-level security (see 0001). The counters are written in the scope of
-- the tenant whose event takes a cursor; each tenant reads its retention
-- mark (its watchers' resume checks), and the pruner, in the system scope,
-- moves them all.
ALTER TABLE tenant_event_cursors ENABLE ROW LEVEL SECURITY;
ALTER TABLE tenant_event_cursors FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON tenant_event_cursors
    USING (tenant = current_setting('app.tenant_id', true))
    WITH CHECK (tenant = current_setting('app.tenant_id', true));

ALTER TABLE tenant_event_retention ENABLE ROW LEVEL SECURITY;
ALTER TABLE tenant_event_retention FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_reads ON tenant_event_retention FOR SELECT
    USING (tenant = current_setting('app.tenant_id', true));
CREATE POLICY system_rows ON tenant_event_retention
    USING (current_setting('app.scope', true) = 'system')
    WITH CHECK (current_setting('app.scope', true) = 'system');

CREATE OR REPLACE FUNCTION events_take_cursor() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM lock_event_log();
    NEW.cursor := nextval('events_cursor_seq');
    INSERT INTO tenant_event_cursors AS c (tenant, latest) VALUES (NEW.tenant, 1)
        ON CONFLICT (tenant) DO UPDATE SET latest = c.latest + 1
        RETURNING c.latest INTO NEW.tenant_cursor;
    RETURN NEW;
END;
$$;
