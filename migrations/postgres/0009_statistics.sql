-- Planner statistics the service can ask for, on the tables it writes fastest.
--
-- PostgreSQL plans by its statistics, and autovacuum refreshes them on its own
-- clock (a minute by default). A young table outgrows them in seconds: made on
-- an empty database, the statistics say "a handful of rows per tenant", and
-- the planner then reads a batch of proposals by `tenant` alone rather than
-- by key, a pass over the tenant's every row, inside transactions that hold
-- the event log's lock (measured on `bench submit-decide --production`: a
-- decision batch's update 12-15 ms at 6,000 proposals, growing with them).
--
-- Only a table's owner may ANALYZE it, and the service role is not the owner
-- (row-level security). So the owner provides this function, which runs with
-- its rights and does one thing: ANALYZE those of the tables whose plans went
-- wrong (proposals, and the events and decisions read joined to them) that
-- changed by more than 1,000 rows plus 20% since their last analysis (about
-- autovacuum's rule, run when the service asks, every few seconds; a looser
-- one than its 50 + 10%: at 400 decisions/s a rule of 500 + 10% over five
-- tables spent 6% of PostgreSQL's statement time in ANALYZE). One caller at
-- a time; others return at once. Returns how many it analysed.
CREATE FUNCTION countersign_refresh_statistics() RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    stale record;
    analysed integer := 0;
BEGIN
    IF NOT pg_try_advisory_xact_lock(7310291346331863) THEN
        RETURN 0;
    END IF;
    FOR stale IN
        SELECT s.relname FROM pg_stat_user_tables s
        WHERE s.schemaname = current_schema()
          AND s.relname IN ('proposals', 'events', 'decisions')
          AND s.n_mod_since_analyze > 1000 + 0.2 * GREATEST(s.n_live_tup, 0)
        ORDER BY s.relname
    LOOP
        EXECUTE format('ANALYZE %I', stale.relname);
        analysed := analysed + 1;
    END LOOP;
    RETURN analysed;
END;
$$;
