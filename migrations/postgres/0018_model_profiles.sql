-- In step with migrations/sqlite/0018_model_profiles.sql. The model
-- reviewer (services/domain/src/model.rs): the tenants' model profiles, and
-- the model's review beside the decision (or the escalation) it shaped.

-- Tenant policy: which proposals a language model reviews after the gates,
-- and on which of the server's configured endpoints (by the operator's name
-- for it: a profile never holds a URL). The match columns are the routes'
-- (0017), as `validate_profile` leaves them: deduplicated, in a fixed order.
CREATE TABLE model_profiles (
    tenant                TEXT    NOT NULL REFERENCES tenants (name),
    id                    TEXT    NOT NULL,
    actions_json          TEXT    NOT NULL,
    classes_json          TEXT    NOT NULL,
    blast_radii_json      TEXT    NOT NULL,
    target_selector_json  TEXT    NOT NULL,
    endpoint              TEXT    NOT NULL,
    on_unsure             TEXT    NOT NULL CHECK (on_unsure IN ('reject', 'escalate')),
    calls_per_minute      BIGINT  NOT NULL CHECK (calls_per_minute >= 0),
    updated_at            BIGINT  NOT NULL,
    PRIMARY KEY (tenant, id)
);

-- The model's review (domain::model::ModelReview as JSON: profile, endpoint,
-- model, verdict or failure, latency, tokens). NULL where no model reviewed
-- the proposal (every decision and escalation made before this column).
-- It is not part of the audit record; the `model` gate's result is. New
-- columns of existing tables: their grants and policies already cover them.
ALTER TABLE decisions ADD COLUMN model_json TEXT;
ALTER TABLE escalations ADD COLUMN model_json TEXT;

-- Row-level security (see 0001): a profile is one tenant's row. The service
-- role's grants cover the new table when `migrate` grants them (0017's
-- `countersign_grant_service`, on every table of the schema).
ALTER TABLE model_profiles ENABLE ROW LEVEL SECURITY;
ALTER TABLE model_profiles FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON model_profiles
    USING (tenant = current_setting('app.tenant_id', true))
    WITH CHECK (tenant = current_setting('app.tenant_id', true));
