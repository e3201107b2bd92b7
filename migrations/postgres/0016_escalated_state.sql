-- In step with migrations/sqlite/0016_escalated_state.sql: proposals may be
-- ESCALATED (waiting for people after the gates), and that state change logs
-- an ESCALATED event (still written at commit, as 0010 made it).
ALTER TABLE proposals DROP CONSTRAINT proposals_state_check;
ALTER TABLE proposals ADD CONSTRAINT proposals_state_check CHECK (state IN
    ('pending', 'reviewing', 'approved', 'rejected', 'cancelled', 'timed_out', 'escalated'));

CREATE OR REPLACE FUNCTION proposals_state_changed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    scoped text := COALESCE(current_setting('app.tenant_id', true), '');
BEGIN
    PERFORM set_config('app.tenant_id', NEW.tenant, true);
    INSERT INTO events (tenant, proposal_id, kind, state, created_at)
        VALUES (NEW.tenant, NEW.id,
                CASE NEW.state
                    WHEN 'pending' THEN 'REQUEUED'
                    WHEN 'reviewing' THEN 'REVIEW_STARTED'
                    WHEN 'approved' THEN 'APPROVED'
                    WHEN 'rejected' THEN 'REJECTED'
                    WHEN 'cancelled' THEN 'CANCELLED'
                    WHEN 'timed_out' THEN 'TIMED_OUT'
                    WHEN 'escalated' THEN 'ESCALATED'
                END,
                NEW.state, NEW.updated_at);
    PERFORM set_config('app.tenant_id', scoped, true);
    RETURN NULL;
END;
$$;
