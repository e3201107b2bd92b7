-- In step with migrations/sqlite/0024_audit_filters_covered.sql.
--
-- A page of ListDecisions under a selective filter (action, target, operator,
-- submitter, SOP) with a coarse one beside it (outcome, blast radius) walks
-- the selective filter's index newest first and keeps the entries the coarse
-- one allows. Each selective index carries the coarse columns after the
-- sequence: the order of its walk is unchanged, and whether an entry matches
-- is read from the index itself, not from its row, which over a long log is a
-- page read for every entry the coarse filter turns away. That is the
-- embedded store's gain (its page query walks the index for rowids first);
-- here the page's scan reads each entry's row for its record either way, and
-- the indexes carry the same columns so that both schemas stay in step.
DROP INDEX audit_by_action;
DROP INDEX audit_by_target;
DROP INDEX audit_by_operator;
DROP INDEX audit_by_submitter;
DROP INDEX audit_by_sop;
CREATE INDEX audit_by_action    ON audit_log (tenant, action, sequence, outcome, blast_radius);
CREATE INDEX audit_by_target    ON audit_log (tenant, target, sequence, outcome, blast_radius);
CREATE INDEX audit_by_operator  ON audit_log (tenant, operator, sequence, outcome, blast_radius);
CREATE INDEX audit_by_submitter ON audit_log (tenant, submitted_by, sequence, outcome, blast_radius);
CREATE INDEX audit_by_sop       ON audit_log (tenant, sop_id, sequence, outcome, blast_radius);
