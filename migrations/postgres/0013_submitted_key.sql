-- The id of the API key that submitted the proposal: a coordinator may cancel
-- only the proposals its own key submitted (on-call and admin may cancel any
-- of their tenant's). NULL for proposals submitted before the column existed:
-- only on-call and admin keys may cancel those. A new column of an existing
-- table: the service role's table-level grants and the row-level-security
-- policies of proposals already cover it; no grant or policy changes.
ALTER TABLE proposals ADD COLUMN submitted_key TEXT;
