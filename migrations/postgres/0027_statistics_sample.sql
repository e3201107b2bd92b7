-- The statistics refresh (0009) keeps a young table's row counts, and the
-- few columns its plans read, from going stale between autovacuum's runs.
-- At the default target its ANALYZE sampled 30,000 rows and built
-- histograms of every column, the decisions' and proposals' JSON among
-- them: 60, 41 and 39 ms for decisions, proposals and events at 11,000
-- decisions, taken several times while a table grows from empty. A target
-- of 10 samples 3,000 rows (11, 12 and 5 ms there), enough for a row count
-- and for the handful of values a tenant or state column holds.
-- Autovacuum's own ANALYZE keeps the server's target.
ALTER FUNCTION countersign_refresh_statistics() SET default_statistics_target = 10;
