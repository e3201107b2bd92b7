-- How far the event log has been pruned: a watcher resuming from an older
-- cursor is told so (OUT_OF_RANGE) instead of silently missing events.
CREATE TABLE event_retention (
    id              INTEGER PRIMARY KEY CHECK (id = 1),
    pruned_through  BIGINT  NOT NULL
);
INSERT INTO event_retention (id, pruned_through) VALUES (1, 0);

-- Row-level security (see 0001): no tenant's data; only the system scope (the
-- pruner, the event horizon) reads or moves it.
ALTER TABLE event_retention ENABLE ROW LEVEL SECURITY;
ALTER TABLE event_retention FORCE ROW LEVEL SECURITY;
CREATE POLICY system_rows ON event_retention
    USING (current_setting('app.scope', true) = 'system')
    WITH CHECK (current_setting('app.scope', true) = 'system');
