-- In step with migrations/postgres/0012_tenant_cursors.sql.
--
-- Each tenant's own event cursor, `tenant_cursor`: 1, 2, 3… over the tenant's
-- events, in commit order, counting no other tenant's. It is what the
-- tenant's watchers see, resume from and are heartbeated at, so a tenant
-- learns nothing of another's activity from them. The log-wide `cursor` stays
-- the order the fan-out reads every tenant's events in; no tenant sees it.
--
-- An event takes its tenant's next cursor from `tenant_event_cursors`, by a
-- trigger, whoever inserts it, inside the writing transaction: the writer is
-- single, so cursors are handed out in commit order, and a rolled-back
-- transaction takes its cursors back (no gap). The counter, not the events,
-- holds a tenant's newest cursor, so pruning never brings a cursor back.
ALTER TABLE events ADD COLUMN tenant_cursor INTEGER;

-- Each tenant's newest cursor handed out.
CREATE TABLE tenant_event_cursors (
    tenant  TEXT    PRIMARY KEY NOT NULL,
    latest  INTEGER NOT NULL
) WITHOUT ROWID;

-- How far each tenant's events have been pruned, in its cursors: resuming
-- before that is OUT_OF_RANGE (`event_retention` is the log's own mark).
CREATE TABLE tenant_event_retention (
    tenant          TEXT    PRIMARY KEY NOT NULL,
    pruned_through  INTEGER NOT NULL
) WITHOUT ROWID;

-- The events already logged keep their log-wide cursor as the tenant's
-- cursor, and every tenant's numbering continues after the log's newest
-- cursor (its heartbeats named it): a cursor a watcher already holds still
-- resumes exactly where it left off, and one older than retention is still
-- refused. Tenants made from here on count from 1.
UPDATE events SET tenant_cursor = cursor;
INSERT INTO tenant_event_cursors (tenant, latest)
SELECT t.name, MAX(COALESCE((SELECT MAX(cursor) FROM events), 0),
                   COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0),
                   r.pruned_through)
FROM tenants AS t CROSS JOIN event_retention AS r WHERE r.id = 1;
INSERT INTO tenant_event_retention (tenant, pruned_through)
SELECT t.name, r.pruned_through
FROM tenants AS t CROSS JOIN event_retention AS r WHERE r.id = 1 AND r.pruned_through > 0;

-- A tenant's replay reads by it; it replaces the index by log-wide cursor.
CREATE UNIQUE INDEX events_by_tenant_cursor ON events (tenant, tenant_cursor);
DROP INDEX events_by_tenant;

CREATE TRIGGER events_take_tenant_cursor AFTER INSERT ON events
BEGIN
    INSERT INTO tenant_event_cursors (tenant, latest) VALUES (NEW.tenant, 1)
        ON CONFLICT (tenant) DO UPDATE SET latest = latest + 1;
    UPDATE events
    SET tenant_cursor = (SELECT latest FROM tenant_event_cursors WHERE tenant = NEW.tenant)
    WHERE cursor = NEW.cursor;
END;
