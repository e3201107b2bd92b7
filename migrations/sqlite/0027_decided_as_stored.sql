-- A submission decided in its own transaction (store/src/at_submission.rs)
-- goes in decided: no REVIEWING state written only to be overwritten, no
-- UPDATE of its row and of the indexes on its state. Its insert logs what
-- the update logged: SUBMITTED (in the state it was reviewed from), then its
-- decision, in that order, each with a tenant cursor of its own. Every other
-- insert logs SUBMITTED alone, as before.

DROP TRIGGER proposals_submitted;
CREATE TRIGGER proposals_submitted AFTER INSERT ON proposals
BEGIN
    INSERT INTO tenant_event_cursors (tenant, latest) VALUES (NEW.tenant, 1)
        ON CONFLICT (tenant) DO UPDATE SET latest = latest + 1;
    INSERT INTO events (tenant, proposal_id, kind, state, created_at, tenant_cursor)
        VALUES (NEW.tenant, NEW.id, 'SUBMITTED',
                CASE WHEN NEW.decided_at IS NULL THEN NEW.state ELSE 'reviewing' END,
                NEW.created_at,
                (SELECT latest FROM tenant_event_cursors WHERE tenant = NEW.tenant));
    INSERT INTO tenant_event_cursors (tenant, latest)
        SELECT NEW.tenant, 1 WHERE NEW.decided_at IS NOT NULL
        ON CONFLICT (tenant) DO UPDATE SET latest = latest + 1;
    INSERT INTO events (tenant, proposal_id, kind, state, created_at, tenant_cursor)
        SELECT NEW.tenant, NEW.id,
               CASE NEW.state WHEN 'approved' THEN 'APPROVED' WHEN 'rejected' THEN 'REJECTED' END,
               NEW.state, NEW.updated_at,
               (SELECT latest FROM tenant_event_cursors WHERE tenant = NEW.tenant)
        WHERE NEW.decided_at IS NOT NULL;
END;
