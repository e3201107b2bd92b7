-- In step with migrations/sqlite/0012_tenant_cursors.sql.
--
-- Each tenant's own event cursor, `tenant_cursor`: 1, 2, 3… over the tenant's
-- events, in commit order, counting no other tenant's. It is what the
-- tenant's watchers see, resume from and are heartbeated at, so a tenant
-- learns nothing of another's activity from them. The log-wide `cursor` stays
-- the order the fan-out reads every tenant's events in; no tenant sees it.
--
-- An event takes 1 + the greatest of: its tenant's newest committed event,
-- the tenant's pruned mark (its events may all have been pruned) and the
-- tenant's `numbered_after`. It is drawn where the log-wide cursor is, after
-- the event log's lock (0002, 0010), which is held until commit: at most one
-- uncommitted transaction holds cursors, so the newest committed event is the
-- newest there is, and a tenant's cursors are in commit order too, with no
-- gap (a rolled-back transaction's are drawn again). Writers only read the
-- horizons; the pruner alone writes them, so no row lock is taken under the
-- event log's lock.
ALTER TABLE events ADD COLUMN tenant_cursor BIGINT;

-- Per tenant: how far its events have been pruned (resuming before that is
-- OUT_OF_RANGE), and the cursor its numbering continues after.
CREATE TABLE tenant_event_horizons (
    tenant          TEXT    PRIMARY KEY,
    -- Every event of the tenant up to and including this cursor is pruned.
    pruned_through  BIGINT  NOT NULL DEFAULT 0,
    -- The tenant's events are numbered after this cursor.
    numbered_after  BIGINT  NOT NULL DEFAULT 0
);

-- The events already logged keep their log-wide cursor as the tenant's
-- cursor, and every tenant's numbering continues after the log's newest
-- cursor (its heartbeats named it): a cursor a watcher already holds still
-- resumes exactly where it left off. Tenants made from here on count from 1.
-- Filled in by the owner, with row-level security not forced for these
-- statements alone (the owner is not BYPASSRLS; see 0008).
ALTER TABLE events NO FORCE ROW LEVEL SECURITY;
ALTER TABLE event_retention NO FORCE ROW LEVEL SECURITY;
ALTER TABLE tenants NO FORCE ROW LEVEL SECURITY;
UPDATE events SET tenant_cursor = cursor;
INSERT INTO tenant_event_horizons (tenant, pruned_through, numbered_after)
SELECT t.name, r.pruned_through,
       GREATEST((SELECT MAX(cursor) FROM events), r.pruned_through)
FROM tenants AS t CROSS JOIN event_retention AS r WHERE r.id = 1;
ALTER TABLE tenants FORCE ROW LEVEL SECURITY;
ALTER TABLE event_retention FORCE ROW LEVEL SECURITY;
ALTER TABLE events FORCE ROW LEVEL SECURITY;
ALTER TABLE events ALTER COLUMN tenant_cursor SET NOT NULL;

-- A tenant's replay reads by it; it replaces the index by log-wide cursor.
CREATE UNIQUE INDEX events_by_tenant_cursor ON events (tenant, tenant_cursor);
DROP INDEX events_by_tenant;

-- Row-level security (see 0001): a tenant reads its own horizon (its
-- watchers' resume checks); the pruner, in the system scope, moves them all.
ALTER TABLE tenant_event_horizons ENABLE ROW LEVEL SECURITY;
ALTER TABLE tenant_event_horizons FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_reads ON tenant_event_horizons FOR SELECT
    USING (tenant = current_setting('app.tenant_id', true));
CREATE POLICY system_rows ON tenant_event_horizons
    USING (current_setting('app.scope', true) = 'system')
    WITH CHECK (current_setting('app.scope', true) = 'system');

CREATE OR REPLACE FUNCTION events_take_cursor() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM lock_event_log();
    NEW.cursor := nextval('events_cursor_seq');
    NEW.tenant_cursor := 1 + GREATEST(
        (SELECT MAX(e.tenant_cursor) FROM events AS e WHERE e.tenant = NEW.tenant),
        (SELECT GREATEST(h.pruned_through, h.numbered_after)
         FROM tenant_event_horizons AS h WHERE h.tenant = NEW.tenant),
        0);
    RETURN NEW;
END;
$$;
