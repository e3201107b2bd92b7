-- A submission may be reviewed inside its own transaction
-- (store/src/postgres/group_commit.rs): its row goes in under review and
-- takes its decision before the commit, so nothing is queued for it. Only a
-- PENDING proposal's insert writes its outbox row; every proposal still logs
-- its SUBMITTED event (proposals_submitted_event, unchanged).

DROP TRIGGER proposals_submitted ON proposals;
CREATE TRIGGER proposals_submitted AFTER INSERT ON proposals
    FOR EACH ROW WHEN (NEW.state = 'pending') EXECUTE FUNCTION proposals_submitted();
