-- The embedded queue's fair fetch seeks each tenant's oldest live entries
-- instead of ranking every ready entry: with a backlog of 20,000 the ranking
-- took 28 ms per fetch, the seeks 0.3 ms.
CREATE INDEX queue_by_tenant ON queue_entries (tenant, id) WHERE dead_at IS NULL;
