-- In step with migrations/postgres/0007_trace_parent.sql: the W3C `traceparent`
-- of the Submit call that created the proposal (NULL without a trace).
ALTER TABLE proposals ADD COLUMN trace_parent TEXT;
