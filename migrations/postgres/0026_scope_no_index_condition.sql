-- The tenant scope of the tables a review batch reads by key is no index
-- condition.
--
-- PostgreSQL estimates `tenant = current_setting('app.tenant_id', true)` with
-- the setting's value when it plans: the tenant of the transaction that
-- plans. Statistics made before a tenant's first proposals give it none, so
-- the planner, in that tenant's scope, reads a batch by `tenant` alone (an
-- index range it thinks empty) instead of each proposal by key. A pooled
-- connection keeps that plan for every tenant while the new one grows: a
-- batch's REVIEWING took 0.25–8 s a few thousand proposals into
-- `bench noisy-neighbour --production`, whose flooding tenant starts after
-- the quiet one (test: postgres_plans, `a_new_tenants_review_batches_…`).
--
-- `IS NOT DISTINCT FROM` keeps the rule (tenant is never NULL, and an unset
-- scope matches no row) and is no index condition, so no plan of these
-- tables depends on which tenant planned it. A statement that reads a
-- tenant's range says so itself (`tenant = $1`); one that reads by key
-- compares the tenant the same way as here, so that the key's index is the
-- only one it can use.
ALTER POLICY tenant_rows ON proposals
    USING (tenant IS NOT DISTINCT FROM current_setting('app.tenant_id', true))
    WITH CHECK (tenant IS NOT DISTINCT FROM current_setting('app.tenant_id', true));
ALTER POLICY tenant_rows ON decisions
    USING (tenant IS NOT DISTINCT FROM current_setting('app.tenant_id', true))
    WITH CHECK (tenant IS NOT DISTINCT FROM current_setting('app.tenant_id', true));
ALTER POLICY tenant_rows ON events
    USING (tenant IS NOT DISTINCT FROM current_setting('app.tenant_id', true))
    WITH CHECK (tenant IS NOT DISTINCT FROM current_setting('app.tenant_id', true));
