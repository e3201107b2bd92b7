-- The operator breaker: K rejections within a window (per tenant) refuse that
-- operator's further submissions until the window passes or an admin resets it.
ALTER TABLE tenants ADD COLUMN breaker_threshold  BIGINT NOT NULL DEFAULT 3;
ALTER TABLE tenants ADD COLUMN breaker_window_ms  BIGINT NOT NULL DEFAULT 300000;

CREATE TABLE breaker_resets (
    tenant    TEXT    NOT NULL REFERENCES tenants (name),
    operator  TEXT    NOT NULL,
    reset_at  BIGINT  NOT NULL,
    PRIMARY KEY (tenant, operator)
);
CREATE INDEX breaker_resets_by_time ON breaker_resets (reset_at);

-- An operator's recent rejections, counted when a rejection is recorded (only
-- rejected rows are in it, so other state changes do not maintain it).
CREATE INDEX proposals_operator_rejections ON proposals (tenant, operator, decided_at)
    WHERE state = 'rejected';

-- Row-level security (see 0001); the breakers are rebuilt at start from every
-- tenant's resets.
ALTER TABLE breaker_resets ENABLE ROW LEVEL SECURITY;
ALTER TABLE breaker_resets FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON breaker_resets
    USING (tenant = current_setting('app.tenant_id', true))
    WITH CHECK (tenant = current_setting('app.tenant_id', true));
CREATE POLICY system_reads ON breaker_resets FOR SELECT
    USING (current_setting('app.scope', true) = 'system');
