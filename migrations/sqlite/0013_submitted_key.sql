-- In step with migrations/postgres/0013_submitted_key.sql: the id of the API
-- key that submitted the proposal (a coordinator may cancel only the
-- proposals its own key submitted). NULL for proposals submitted before the
-- column existed: only on-call and admin keys may cancel those.
ALTER TABLE proposals ADD COLUMN submitted_key TEXT;
