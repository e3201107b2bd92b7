-- The event log's lock, held for the commit only.
--
-- 0002 hands out cursors under one lock, held from a transaction's first
-- event until it commits, and the store took it as the first statement of
-- every transaction that appends events (so that it came before any row lock).
-- Every writer was therefore serialised for its whole length: a decision
-- batch's seven round trips, a submission group's four. Measured on `bench
-- submit-decide --production`: 871 waits of 15 ms or more for the lock in a
-- run of 10,000 proposals, the submissions' p99 95 ms.
--
-- Now a state change's event is written when its transaction commits: the
-- triggers that write them are deferred constraint triggers, fired at COMMIT
-- in the order their changes were made. The lock is taken by the first of
-- them and held through the commit alone, by a transaction that already holds
-- every row lock it will take. That last point is what keeps this free of
-- deadlocks, and the store keeps it for what it appends itself under the lock
-- (the SUPPRESSED and BREAKER_TRIPPED events, and decisions, below): it
-- appends them only after its last row lock, firing the deferred events first
-- (`SET CONSTRAINTS ALL IMMEDIATE`) so that a rejection's event still comes
-- before the trip it causes. Writers take their row locks in one order
-- (tenants by name, rows by id), so they do not deadlock on rows either.
--
-- What 0002 promised holds unchanged: cursors are handed out under the lock,
-- at most one uncommitted transaction holds cursors, the visible log is a
-- gap-free prefix in commit order, and a state change and its event commit
-- together or not at all.
CREATE OR REPLACE FUNCTION proposals_submitted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO queue_entries (tenant, proposal_id, enqueued_at, available_at)
        VALUES (NEW.tenant, NEW.id, NEW.created_at, NEW.created_at);
    RETURN NULL;
END;
$$;

-- Fired at commit, a transaction's events may be written after it moved on
-- to another tenant's rows (a batch spans tenants): each is written in its own
-- proposal's tenant scope, which the change itself passed when it was made,
-- and the transaction's scope is put back.
CREATE FUNCTION proposals_submitted_event() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    scoped text := COALESCE(current_setting('app.tenant_id', true), '');
BEGIN
    PERFORM set_config('app.tenant_id', NEW.tenant, true);
    INSERT INTO events (tenant, proposal_id, kind, state, created_at)
        VALUES (NEW.tenant, NEW.id, 'SUBMITTED', NEW.state, NEW.created_at);
    PERFORM set_config('app.tenant_id', scoped, true);
    RETURN NULL;
END;
$$;
CREATE CONSTRAINT TRIGGER proposals_submitted_event AFTER INSERT ON proposals
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION proposals_submitted_event();

-- NEW is the row as that update left it, however the transaction changes it
-- afterwards: each change keeps its own event.
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
                END,
                NEW.state, NEW.updated_at);
    PERFORM set_config('app.tenant_id', scoped, true);
    RETURN NULL;
END;
$$;
DROP TRIGGER proposals_state_changed ON proposals;
CREATE CONSTRAINT TRIGGER proposals_state_changed AFTER UPDATE OF state ON proposals
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.state IS DISTINCT FROM OLD.state)
    EXECUTE FUNCTION proposals_state_changed();

-- Decisions draw their commit order (0005: the audit sequencer's order) under
-- the same lock. 0005 relied on the store taking the lock before inserting
-- them; now the database takes it, whoever inserts, and draws the value after
-- it (a column default would be drawn before the trigger, outside the lock).
-- The store inserts a batch's decisions only once it holds every row lock.
CREATE FUNCTION decisions_take_commit_order() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM lock_event_log();
    NEW.commit_order := nextval('decisions_commit_order');
    RETURN NEW;
END;
$$;
ALTER TABLE decisions ALTER COLUMN commit_order DROP DEFAULT;
CREATE TRIGGER decisions_take_commit_order BEFORE INSERT ON decisions
    FOR EACH ROW EXECUTE FUNCTION decisions_take_commit_order();
