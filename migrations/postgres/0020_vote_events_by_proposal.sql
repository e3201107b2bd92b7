-- In step with migrations/sqlite/0020_vote_events_by_proposal.sql.
--
-- A proposal's VOTE events in its tenant's cursor order. An ESCALATED or
-- VOTE event goes out on the review stream (live, and again in every
-- replay) with the votes as they stood at that event: the proposal's votes
-- less as many as it has VOTE events after it, counted here, one index
-- range per event. Partial: only VOTE events are indexed.
CREATE INDEX events_votes_by_proposal ON events (tenant, proposal_id, tenant_cursor)
    WHERE kind = 'VOTE';
