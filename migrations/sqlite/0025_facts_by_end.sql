-- In step with migrations/postgres/0029_facts_by_end.sql.
--
-- A proposal's `decided_at` is when it left the open states (PENDING,
-- REVIEWING, ESCALATED): its decision, or its cancel. It is NULL exactly
-- while the proposal is open. The parallel-operation facts find the open
-- operations as `decided_at IS NULL` and the approvals of the window as
-- `decided_at >= start` with the row's state, so their indexes carry no
-- `state`: the review's start (PENDING -> REVIEWING) and an escalation
-- (REVIEWING -> ESCALATED) leave every entry of them where it is, and only a
-- proposal's end moves its entries.
--
--   proposals_by_end      the tenant-wide branches of the facts (review.rs, candidates_query)
--   proposals_target_end  the same facts, by target
--   proposals_radius_end  the same facts, the tenant's cluster-wide and tenant-wide operations

UPDATE proposals SET decided_at = updated_at WHERE state = 'cancelled' AND decided_at IS NULL;

DROP INDEX proposals_open;
DROP INDEX proposals_target_state;
DROP INDEX proposals_radius_state;
CREATE INDEX proposals_by_end ON proposals (tenant, decided_at);
CREATE INDEX proposals_target_end ON proposals (tenant, target, decided_at);
CREATE INDEX proposals_radius_end ON proposals (tenant, blast_radius, decided_at)
    WHERE blast_radius IN ('tenant_wide', 'cluster');
