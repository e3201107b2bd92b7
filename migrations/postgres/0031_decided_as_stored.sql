-- A submission decided in its own transaction (store/src/at_submission.rs)
-- goes in decided: no REVIEWING state written only to be overwritten, no
-- UPDATE of its row and of the indexes on its state. Its insert logs, at
-- commit, what the update logged: SUBMITTED (in the state it was reviewed
-- from), then its decision. Every other insert logs SUBMITTED alone, as
-- before.
CREATE OR REPLACE FUNCTION proposals_submitted_event() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    scoped text := COALESCE(current_setting('app.tenant_id', true), '');
BEGIN
    IF scoped <> NEW.tenant THEN
        PERFORM set_config('app.tenant_id', NEW.tenant, true);
    END IF;
    INSERT INTO events (tenant, proposal_id, kind, state, created_at)
        VALUES (NEW.tenant, NEW.id, 'SUBMITTED',
                CASE WHEN NEW.decided_at IS NULL THEN NEW.state ELSE 'reviewing' END,
                NEW.created_at);
    IF NEW.decided_at IS NOT NULL THEN
        INSERT INTO events (tenant, proposal_id, kind, state, created_at)
            VALUES (NEW.tenant, NEW.id,
                    CASE NEW.state WHEN 'approved' THEN 'APPROVED' WHEN 'rejected' THEN 'REJECTED' END,
                    NEW.state, NEW.updated_at);
    END IF;
    IF scoped <> NEW.tenant THEN
        PERFORM set_config('app.tenant_id', scoped, true);
    END IF;
    RETURN NULL;
END;
$$;
