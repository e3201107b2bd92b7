-- In step with migrations/sqlite/0023_lean_decision_path.sql.
--
-- Fewer writes per decision: every index a decision's rows pass through is
-- one a query needs, and holds only the rows that query can find. (An event
-- row is already written once here: `events_take_cursor`, 0012, sets its
-- cursors before the insert.)
--
-- The indexes a decision's rows touch, each with the query that needs it
-- (store/src/postgres/):
--   proposals_idempotency          Submit's idempotency key (find_idempotent), and its uniqueness
--   proposals_open                 the parallel-operation facts of a tenant-wide review (review.rs, candidates_query)
--   proposals_target_state         the same facts, by target (candidates_query)
--   proposals_radius_state         the same facts, the tenant's cluster-wide and tenant-wide operations (candidates_query)
--   proposals_reviewing            the janitor's overdue reviews (review.rs, overdue_reviews)
--   proposals_operator_rejections  the breaker's count at commit (suppression.rs)
--   proposals_undecided            the outbox sweeper's undecided proposals (outbox.rs, undecided_rows)
--   queue_unpublished              the outbox publisher's unpublished rows (outbox.rs, unpublished_rows)
--   queue_entries.proposal_id      one entry per proposal (UNIQUE); the publisher's mark and the sweeper's join
--   events_by_tenant_cursor        a tenant's replay from its cursor (events.rs), and its uniqueness
--   events_votes_by_proposal       the votes as they stood at an ESCALATED or VOTE event (0020; VOTE events only)
--   decisions_by_commit_order      the sequencer's next decisions (audit.rs), and its uniqueness
--   audit_log's eight filters      ListDecisions by each filter (audit.rs); audit_by_decided_max its time range
--   audit_log.proposal_id          GetDecision (audit.rs), and one entry per decision (UNIQUE)

-- No query reads decisions by tenant and time: the sequencer reads them in
-- commit order, every other read by proposal.
DROP INDEX decisions_by_tenant;

-- Leases live in Redis: no query here reads a row of the outbox by its lease
-- or its availability.
DROP INDEX queue_ready;

-- The janitor asks only for proposals under review: an entry exists while a
-- proposal is REVIEWING, not from its submission to forever.
DROP INDEX proposals_reviewing;
CREATE INDEX proposals_reviewing ON proposals (review_started_at) WHERE state = 'reviewing';

-- The facts' radius branches ask only for cluster-wide and tenant-wide
-- operations: a single-device proposal has no entry here.
DROP INDEX proposals_radius_state;
CREATE INDEX proposals_radius_state ON proposals (tenant, blast_radius, state, decided_at)
    WHERE blast_radius IN ('tenant_wide', 'cluster');
