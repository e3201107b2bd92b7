-- In step with migrations/postgres/0006_outbox.sql. The embedded queue is this
-- table itself, so nothing is ever published from it: the column stays NULL.
ALTER TABLE queue_entries ADD COLUMN published_at INTEGER;
