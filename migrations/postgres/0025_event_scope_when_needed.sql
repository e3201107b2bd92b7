-- Each event is written in its own tenant's scope (0010: a deferred trigger
-- may fire after its transaction moved on to another tenant's rows), and the
-- triggers switched to that scope and back for every row: two statements a
-- row, six of a decision's twelve. A transaction is nearly always in the
-- event's tenant already (a batch of one tenant, a submission, a vote), so
-- the scope is now switched, and put back, only when it differs.
CREATE OR REPLACE FUNCTION proposals_submitted_event() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    scoped text := COALESCE(current_setting('app.tenant_id', true), '');
BEGIN
    IF scoped <> NEW.tenant THEN
        PERFORM set_config('app.tenant_id', NEW.tenant, true);
    END IF;
    INSERT INTO events (tenant, proposal_id, kind, state, created_at)
        VALUES (NEW.tenant, NEW.id, 'SUBMITTED', NEW.state, NEW.created_at);
    IF scoped <> NEW.tenant THEN
        PERFORM set_config('app.tenant_id', scoped, true);
    END IF;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE FUNCTION proposals_state_changed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    scoped text := COALESCE(current_setting('app.tenant_id', true), '');
BEGIN
    IF scoped <> NEW.tenant THEN
        PERFORM set_config('app.tenant_id', NEW.tenant, true);
    END IF;
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
    IF scoped <> NEW.tenant THEN
        PERFORM set_config('app.tenant_id', scoped, true);
    END IF;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE FUNCTION votes_logged() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    scoped text := COALESCE(current_setting('app.tenant_id', true), '');
BEGIN
    IF scoped <> NEW.tenant THEN
        PERFORM set_config('app.tenant_id', NEW.tenant, true);
    END IF;
    INSERT INTO events (tenant, proposal_id, kind, state, created_at)
        VALUES (NEW.tenant, NEW.proposal_id, 'VOTE', 'escalated', NEW.at);
    IF scoped <> NEW.tenant THEN
        PERFORM set_config('app.tenant_id', scoped, true);
    END IF;
    RETURN NULL;
END;
$$;
