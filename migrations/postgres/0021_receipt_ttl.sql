-- How long an approval's signed receipt lets the operation run after the
-- decision: tenant policy, 15 minutes unless an admin sets it.
ALTER TABLE tenants ADD COLUMN receipt_ttl_ms BIGINT NOT NULL DEFAULT 900000;
