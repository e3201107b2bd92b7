-- How far the event log has been pruned: a watcher resuming from an older
-- cursor is told so (OUT_OF_RANGE) instead of silently missing events.
CREATE TABLE event_retention (
    id              INTEGER PRIMARY KEY CHECK (id = 1),
    pruned_through  BIGINT  NOT NULL
);
INSERT INTO event_retention (id, pruned_through) VALUES (1, 0);
