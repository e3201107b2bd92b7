-- In step with migrations/postgres/0012_tenant_cursors.sql.
--
-- Each tenant's own event cursor, `tenant_cursor`: 1, 2, 3… over the tenant's
-- events, in commit order, counting no other tenant's. It is what the
-- tenant's watchers see, resume from and are heartbeated at, so a tenant
-- learns nothing of another's activity from them. The log-wide `cursor` stays
-- the order the fan-out reads every tenant's events in; no tenant sees it.
--
-- An event takes 1 + the greatest of: its tenant's newest event, the tenant's
-- pruned mark (its events may all have been pruned) and the tenant's
-- `numbered_after`. The writer is single and the trigger runs inside the
-- writing transaction, so cursors are handed out in commit order and a
-- rolled-back transaction leaves no gap.
ALTER TABLE events ADD COLUMN tenant_cursor INTEGER;

-- Per tenant: how far its events have been pruned (resuming before that is
-- OUT_OF_RANGE), and the cursor its numbering continues after.
CREATE TABLE tenant_event_horizons (
    tenant          TEXT    PRIMARY KEY NOT NULL,
    -- Every event of the tenant up to and including this cursor is pruned.
    pruned_through  INTEGER NOT NULL DEFAULT 0,
    -- The tenant's events are numbered after this cursor.
    numbered_after  INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;

-- The events already logged keep their log-wide cursor as the tenant's
-- cursor, and every tenant's numbering continues after the log's newest
-- cursor (its heartbeats named it): a cursor a watcher already holds still
-- resumes exactly where it left off. Tenants made from here on count from 1.
UPDATE events SET tenant_cursor = cursor;
INSERT INTO tenant_event_horizons (tenant, pruned_through, numbered_after)
SELECT t.name, r.pruned_through,
       MAX(COALESCE((SELECT MAX(cursor) FROM events), 0),
           COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0),
           r.pruned_through)
FROM tenants AS t CROSS JOIN event_retention AS r WHERE r.id = 1;

-- A tenant's replay reads by it; it replaces the index by log-wide cursor.
CREATE UNIQUE INDEX events_by_tenant_cursor ON events (tenant, tenant_cursor);
DROP INDEX events_by_tenant;

CREATE TRIGGER events_take_tenant_cursor AFTER INSERT ON events
BEGIN
    UPDATE events SET tenant_cursor = 1 + MAX(
        COALESCE((SELECT MAX(e.tenant_cursor) FROM events AS e WHERE e.tenant = NEW.tenant), 0),
        COALESCE((SELECT MAX(h.pruned_through, h.numbered_after)
                  FROM tenant_event_horizons AS h WHERE h.tenant = NEW.tenant), 0))
    WHERE cursor = NEW.cursor;
END;
