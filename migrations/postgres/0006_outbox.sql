-- The outbox. A proposal's queue_entries row (written by its insert trigger,
-- in the same transaction) is the marker that it must reach the Redis review
-- queue; the publisher sets published_at once the entry is in Redis. The
-- sweeper finds undecided proposals whose Redis entry was lost through the
-- partial index on proposals.
ALTER TABLE queue_entries ADD COLUMN published_at BIGINT;
CREATE INDEX queue_unpublished ON queue_entries (id) WHERE published_at IS NULL;
CREATE INDEX proposals_undecided ON proposals (id) WHERE state IN ('pending', 'reviewing');

-- The publisher marks rows of every tenant: its own, narrow system policy.
CREATE POLICY system_publishes ON queue_entries FOR UPDATE
    USING (current_setting('app.scope', true) = 'system')
    WITH CHECK (current_setting('app.scope', true) = 'system');
