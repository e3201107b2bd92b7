-- The event log's lock (0002, 0010) is taken by every event's cursor and
-- every decision's commit order, four times a decision: each a statement of
-- its own inside the trigger. It is re-entrant, so only the first does
-- anything; a transaction-local setting now says that it is held, and the
-- triggers after the first read it instead of asking again. The setting and
-- the lock live and die together: both end with the transaction, and both go
-- back when the savepoint that took them is rolled back.
--
-- A tenant's next cursor is an UPDATE of its row, which exists from its first
-- event on; the insert is for that first event only. Both run under the lock,
-- so no other transaction takes a cursor between them.
-- Whether this transaction holds the lock (a SQL function, inlined into the
-- triggers' conditions: no statement of its own).
CREATE FUNCTION event_log_held() RETURNS boolean LANGUAGE sql AS $$
    SELECT current_setting('countersign.event_log_held', true) IS NOT DISTINCT FROM 'on';
$$;

-- Takes the lock and says so; the triggers call it only when not held.
CREATE FUNCTION hold_event_log() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM lock_event_log();
    PERFORM set_config('countersign.event_log_held', 'on', true);
END;
$$;

CREATE OR REPLACE FUNCTION events_take_cursor() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT event_log_held() THEN
        PERFORM hold_event_log();
    END IF;
    NEW.cursor := nextval('events_cursor_seq');
    UPDATE tenant_event_cursors SET latest = latest + 1
        WHERE tenant = NEW.tenant
        RETURNING latest INTO NEW.tenant_cursor;
    IF NOT FOUND THEN
        INSERT INTO tenant_event_cursors AS c (tenant, latest) VALUES (NEW.tenant, 1)
            ON CONFLICT (tenant) DO UPDATE SET latest = c.latest + 1
            RETURNING c.latest INTO NEW.tenant_cursor;
    END IF;
    RETURN NEW;
END;
$$;

CREATE OR REPLACE FUNCTION decisions_take_commit_order() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT event_log_held() THEN
        PERFORM hold_event_log();
    END IF;
    NEW.commit_order := nextval('decisions_commit_order');
    RETURN NEW;
END;
$$;
