-- The W3C `traceparent` of the Submit call that created the proposal (NULL when
-- the call carried no trace), so the reviewer's span continues the caller's
-- trace across the queue. A new column of an existing table: the service role's
-- table-level grants and the row-level-security policies of proposals already
-- cover it; no grant or policy changes.
ALTER TABLE proposals ADD COLUMN trace_parent TEXT;
