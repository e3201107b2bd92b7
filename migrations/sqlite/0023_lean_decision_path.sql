-- In step with migrations/postgres/0023_lean_decision_path.sql.
--
-- Fewer writes per decision: every index a decision's rows pass through is
-- one a query needs, and holds only the rows that query can find; an event
-- row is written once, with its tenant's cursor.
--
-- The indexes a decision's rows touch, each with the query that needs it
-- (store/src/sqlite/):
--   proposals_idempotency          Submit's idempotency key (find_idempotent), and its uniqueness
--   proposals_open                 the parallel-operation facts of a tenant-wide review (review.rs, candidates_query)
--   proposals_target_state         the same facts, by target (candidates_query)
--   proposals_radius_state         the same facts, the tenant's cluster-wide and tenant-wide operations (candidates_query)
--   proposals_reviewing            the janitor's overdue reviews (review.rs, overdue)
--   proposals_operator_rejections  the breaker's count at commit (suppression.rs, log_trips)
--   queue_by_tenant                the fair fetch's tenants and their oldest entries (queue.rs, FETCH)
--   queue_leased                   the janitor's reclaim of expired leases (queue.rs, reclaim_expired)
--   queue_entries.proposal_id      one entry per proposal (UNIQUE)
--   events_by_tenant_cursor        a tenant's replay from its cursor (events.rs), and its uniqueness
--   events_votes_by_proposal       the votes as they stood at an ESCALATED or VOTE event (0020; VOTE events only)
--   decisions.proposal_id          exactly one decision per proposal (primary key); every read of a decision
--   audit_log's eight filters      ListDecisions by each filter (audit.rs, list); audit_by_decided_max its time range
--   audit_log.proposal_id          GetDecision (audit.rs, get), and one entry per decision (UNIQUE)

-- No query reads decisions by tenant and time: the sequencer reads them in
-- commit order (rowid), every other read by proposal.
DROP INDEX decisions_by_tenant;

-- The janitor asks only for proposals under review: an entry exists while a
-- proposal is REVIEWING, not from its submission to forever.
DROP INDEX proposals_reviewing;
CREATE INDEX proposals_reviewing ON proposals (review_started_at) WHERE state = 'reviewing';

-- The facts' radius branches ask only for cluster-wide and tenant-wide
-- operations: a single-device proposal has no entry here.
DROP INDEX proposals_radius_state;
CREATE INDEX proposals_radius_state ON proposals (tenant, blast_radius, state, decided_at)
    WHERE blast_radius IN ('tenant_wide', 'cluster');

-- The reclaim asks only for leased entries: an entry exists while an entry is
-- leased (the depth counts read `queue_by_tenant`).
DROP INDEX queue_ready;
CREATE INDEX queue_leased ON queue_entries (lease_expires_at)
    WHERE dead_at IS NULL AND lease_expires_at IS NOT NULL;

-- The triggers that log a proposal's events take the tenant's next cursor
-- before they insert the event, and insert it with it: one write of the
-- event row, not an insert and an update. `events_take_tenant_cursor` stays
-- for every other writer of events (a breaker's trip), which inserts none.
DROP TRIGGER events_take_tenant_cursor;
CREATE TRIGGER events_take_tenant_cursor AFTER INSERT ON events
WHEN NEW.tenant_cursor IS NULL
BEGIN
    INSERT INTO tenant_event_cursors (tenant, latest) VALUES (NEW.tenant, 1)
        ON CONFLICT (tenant) DO UPDATE SET latest = latest + 1;
    UPDATE events
    SET tenant_cursor = (SELECT latest FROM tenant_event_cursors WHERE tenant = NEW.tenant)
    WHERE cursor = NEW.cursor;
END;

DROP TRIGGER proposals_submitted;
CREATE TRIGGER proposals_submitted AFTER INSERT ON proposals
BEGIN
    INSERT INTO queue_entries (tenant, proposal_id, enqueued_at, available_at)
        VALUES (NEW.tenant, NEW.id, NEW.created_at, NEW.created_at);
    INSERT INTO tenant_event_cursors (tenant, latest) VALUES (NEW.tenant, 1)
        ON CONFLICT (tenant) DO UPDATE SET latest = latest + 1;
    INSERT INTO events (tenant, proposal_id, kind, state, created_at, tenant_cursor)
        VALUES (NEW.tenant, NEW.id, 'SUBMITTED', NEW.state, NEW.created_at,
                (SELECT latest FROM tenant_event_cursors WHERE tenant = NEW.tenant));
END;

DROP TRIGGER proposals_state_changed;
CREATE TRIGGER proposals_state_changed AFTER UPDATE OF state ON proposals
WHEN NEW.state <> OLD.state
BEGIN
    INSERT INTO tenant_event_cursors (tenant, latest) VALUES (NEW.tenant, 1)
        ON CONFLICT (tenant) DO UPDATE SET latest = latest + 1;
    INSERT INTO events (tenant, proposal_id, kind, state, created_at, tenant_cursor)
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
                NEW.state, NEW.updated_at,
                (SELECT latest FROM tenant_event_cursors WHERE tenant = NEW.tenant));
END;

DROP TRIGGER votes_logged;
CREATE TRIGGER votes_logged AFTER INSERT ON votes
BEGIN
    INSERT INTO tenant_event_cursors (tenant, latest) VALUES (NEW.tenant, 1)
        ON CONFLICT (tenant) DO UPDATE SET latest = latest + 1;
    INSERT INTO events (tenant, proposal_id, kind, state, created_at, tenant_cursor)
        VALUES (NEW.tenant, NEW.proposal_id, 'VOTE', 'escalated', NEW.at,
                (SELECT latest FROM tenant_event_cursors WHERE tenant = NEW.tenant));
END;
