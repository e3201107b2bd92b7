-- In step with migrations/sqlite/0019_model_calls.sql. The model reviewer's
-- calls per minute, one cap per tenant across every process of a deployment:
-- each call a reviewer makes is a row, taken only while fewer than the
-- profile's `calls_per_minute` rows of the tenant are younger than a minute
-- (the store checks and inserts in one transaction holding the tenant's
-- advisory lock, so concurrent reviewers take them one at a time).
-- Rows a minute old are deleted as the tenant's next call is taken.
CREATE TABLE model_calls (
    tenant  TEXT    NOT NULL REFERENCES tenants (name),
    at      BIGINT  NOT NULL
);
CREATE INDEX model_calls_by_tenant ON model_calls (tenant, at);

-- From here on the model's review (decisions.model_json, 0018) is part of
-- the decision's audit record as well: the log's chain covers it, and
-- verification compares the column with the record.

-- Row-level security (see 0001): a call is one tenant's row. The service
-- role's grants cover the new table when `migrate` grants them (0017's
-- `countersign_grant_service`, on every table of the schema).
ALTER TABLE model_calls ENABLE ROW LEVEL SECURITY;
ALTER TABLE model_calls FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON model_calls
    USING (tenant = current_setting('app.tenant_id', true))
    WITH CHECK (tenant = current_setting('app.tenant_id', true));
