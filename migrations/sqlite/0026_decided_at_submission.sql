-- A submission may be reviewed inside its own transaction
-- (store/src/sqlite/proposals.rs, insert_group): its row goes in under review
-- and takes its decision before the commit, so it has no queue entry. Only a
-- PENDING proposal is queued for the reviewers; every proposal still logs its
-- SUBMITTED event. PostgreSQL queues every submission (its outbox trigger is
-- unchanged): see PostgresStore::submit_reviewed.

DROP TRIGGER proposals_submitted;
CREATE TRIGGER proposals_submitted AFTER INSERT ON proposals
BEGIN
    INSERT INTO tenant_event_cursors (tenant, latest) VALUES (NEW.tenant, 1)
        ON CONFLICT (tenant) DO UPDATE SET latest = latest + 1;
    INSERT INTO events (tenant, proposal_id, kind, state, created_at, tenant_cursor)
        VALUES (NEW.tenant, NEW.id, 'SUBMITTED', NEW.state, NEW.created_at,
                (SELECT latest FROM tenant_event_cursors WHERE tenant = NEW.tenant));
END;

CREATE TRIGGER proposals_queued AFTER INSERT ON proposals
WHEN NEW.state = 'pending'
BEGIN
    INSERT INTO queue_entries (tenant, proposal_id, enqueued_at, available_at)
        VALUES (NEW.tenant, NEW.id, NEW.created_at, NEW.created_at);
END;
