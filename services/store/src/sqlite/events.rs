use async_trait::async_trait;
use countersign_domain::{Event, EventHorizon, Millis, ProposalState};
use rusqlite::{Connection, params};

use super::SqliteStore;
use tokio::sync::broadcast;

use crate::rows::{Columns, Named, NamedRows};
use crate::types::PickedHeads;
use crate::{Changes, EventLog, Pick, PickedPage, Result, StoreError, StoreEvent};

/// The signal for a change the database has just logged (by trigger).
pub fn signal(tenant: &str, proposal_id: &str, state: ProposalState) -> StoreEvent {
    StoreEvent::changed_to(tenant, proposal_id, state)
}

/// Every tenant's events past a log position (the fan-out).
const AFTER_ALL: &str = "SELECT e.cursor AS ev_position, e.tenant_cursor AS ev_cursor,
        e.kind AS ev_kind, e.state AS ev_state, e.created_at AS ev_at, p.*
     FROM events e CROSS JOIN proposals p ON p.id = e.proposal_id
     WHERE e.cursor > ? ORDER BY e.cursor LIMIT ?";
/// One tenant's events past its own cursor (a watcher's replay).
const AFTER_TENANT: &str = "SELECT e.cursor AS ev_position, e.tenant_cursor AS ev_cursor,
        e.kind AS ev_kind, e.state AS ev_state, e.created_at AS ev_at, p.*
     FROM events e CROSS JOIN proposals p ON p.id = e.proposal_id
     WHERE e.tenant = ? AND e.tenant_cursor > ? ORDER BY e.tenant_cursor LIMIT ?";

/// Every tenant's event heads past a log position (the fan-out's first look).
const HEADS_AFTER: &str = "SELECT cursor, tenant, proposal_id, kind FROM events
     WHERE cursor > ? ORDER BY cursor LIMIT ?";
/// The events at the log positions of a JSON array, whole.
const AT_POSITIONS: &str = "SELECT e.cursor AS ev_position, e.tenant_cursor AS ev_cursor,
        e.kind AS ev_kind, e.state AS ev_state, e.created_at AS ev_at, p.*
     FROM json_each(?) AS j CROSS JOIN events e ON e.cursor = j.value
     CROSS JOIN proposals p ON p.id = e.proposal_id
     ORDER BY e.cursor";

/// One event row ([`AFTER_ALL`], [`AFTER_TENANT`], [`AT_POSITIONS`]) with its proposal.
fn event_from_row(row: &Named<'_, '_>) -> Result<Event> {
    crate::rows::event_from_row(row, crate::rows::proposal_from_row(row)?)
}

/// With `tenant`, its events after its own cursor `after`; without, every
/// tenant's after log position `after`. One read transaction: the decisions
/// are those of the events' snapshot.
#[tracing::instrument(name = "store.sqlite.events_after", skip(conn))]
pub fn events_after(
    conn: &mut Connection,
    after: u64,
    tenant: Option<&str>,
    limit: u32,
) -> Result<Vec<Event>> {
    let tx = conn.transaction()?;
    let after = i64::try_from(after).unwrap_or(i64::MAX);
    let mut events = match tenant {
        Some(tenant) => tx
            .prepare_cached(AFTER_TENANT)?
            .named_rows(params![tenant, after, limit], event_from_row)?,
        None => tx
            .prepare_cached(AFTER_ALL)?
            .named_rows(params![after, limit], event_from_row)?,
    };
    with_decisions(&tx, &mut events)?;
    Ok(events)
}

/// Every tenant's next `limit` event heads after log position `after`, and
/// the events `pick` takes among them, whole; one read transaction.
#[tracing::instrument(name = "store.sqlite.events_picked", skip(conn, pick))]
pub fn events_picked(
    conn: &mut Connection,
    after: u64,
    limit: u32,
    pick: &Pick,
) -> Result<PickedPage> {
    let tx = conn.transaction()?;
    let heads = tx.prepare_cached(HEADS_AFTER)?.named_rows(
        params![i64::try_from(after).unwrap_or(i64::MAX), limit],
        |row| crate::rows::event_head_from_row(row),
    )?;
    let picked = PickedHeads::of(&heads, after, pick);
    let mut events = Vec::new();
    if !picked.positions.is_empty() {
        let positions = serde_json::to_string(&picked.positions)
            .map_err(|e| StoreError::Corrupt(e.to_string()))?;
        events = tx
            .prepare_cached(AT_POSITIONS)?
            .named_rows([positions], event_from_row)?;
        with_decisions(&tx, &mut events)?;
    }
    Ok(picked.page(events))
}

/// Gives each event of a decided proposal its decision, read by key.
fn with_decisions(tx: &rusqlite::Transaction<'_>, events: &mut [Event]) -> Result<()> {
    let ended: Vec<&str> = events
        .iter()
        .filter(|e| e.proposal.state.is_terminal())
        .map(|e| e.proposal.id.as_str())
        .collect();
    if !ended.is_empty() {
        let ids = serde_json::to_string(&ended).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        // json_each first (CROSS JOIN fixes the order): one primary-key
        // lookup per id, never a scan of the decisions.
        let decisions = tx
            .prepare_cached(
                "SELECT d.* FROM json_each(?) AS j CROSS JOIN decisions AS d
                 ON d.proposal_id = j.value",
            )?
            .named_rows([ids], |row| {
                Ok((
                    row.text("proposal_id")?,
                    crate::rows::decision_from_row(row)?,
                ))
            })?
            .into_iter()
            .collect::<std::collections::HashMap<_, _>>();
        for event in events.iter_mut().filter(|e| e.proposal.state.is_terminal()) {
            event.proposal.decision = decisions.get(&event.proposal.id).cloned();
        }
    }
    Ok(())
}

/// What `tenant`'s part of the log holds, in its own cursors (see
/// migrations/sqlite/0012), or the whole log's, in positions.
pub fn horizon(conn: &Connection, tenant: Option<&str>) -> Result<EventHorizon> {
    let row = |r: &rusqlite::Row<'_>| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?));
    let (pruned, latest) = match tenant {
        Some(tenant) => conn
            .prepare_cached(
                "SELECT COALESCE((SELECT pruned_through FROM tenant_event_retention
                                  WHERE tenant = ?1), 0),
                        COALESCE((SELECT latest FROM tenant_event_cursors WHERE tenant = ?1), 0)",
            )?
            .query_row([tenant], row)?,
        None => conn
            .prepare_cached(
                "SELECT (SELECT pruned_through FROM event_retention WHERE id = 1),
                        MAX(COALESCE((SELECT MAX(cursor) FROM events), 0),
                            COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0))",
            )?
            .query_row([], row)?,
    };
    Ok(EventHorizon {
        pruned_through: pruned.max(0) as u64,
        latest: latest.max(0) as u64,
    })
}

/// Events examined per prune (the pump prunes every minute).
const PRUNE_SLICE: i64 = 50_000;

/// Deletes the oldest events, up to the newest of them committed before
/// `created_before`, and moves the retention marks (the log's and each
/// tenant's) in one transaction, examining at most [`PRUNE_SLICE`] events;
/// returns how many it deleted. The caller runs each slice as a job of its
/// own, so the writer is never held for long.
#[tracing::instrument(name = "store.sqlite.prune_events", skip(conn))]
pub fn prune_slice(conn: &mut Connection, created_before: Millis) -> Result<u64> {
    let tx = conn.transaction()?;
    // From the head of the log (the oldest events, by cursor), in slices, so
    // no index on time is maintained for every event written.
    let through: Option<i64> = tx
        .prepare_cached(
            "SELECT MAX(cursor) FROM (SELECT cursor, created_at FROM events ORDER BY cursor
             LIMIT ?) WHERE created_at < ?",
        )?
        .query_row(params![PRUNE_SLICE, created_before], |r| r.get(0))?;
    let Some(through) = through else {
        return Ok(0);
    };
    tx.prepare_cached(MARK_PRUNED)?.execute([through])?;
    let deleted = tx
        .prepare_cached("DELETE FROM events WHERE cursor <= ?")?
        .execute([through])?;
    tx.prepare_cached(
        "UPDATE event_retention SET pruned_through = MAX(pruned_through, ?) WHERE id = 1",
    )?
    .execute([through])?;
    tx.commit()?;
    Ok(deleted as u64)
}

/// How many slices one prune takes at most.
pub const PRUNE_SLICES: usize = 100;

/// Moves each tenant's retention mark to its newest cursor among the events
/// up to a log position (`?`): the pruned part of the log is a prefix, so of
/// each tenant's too. NOT INDEXED: read by cursor, only those events; by the
/// tenant index (SQLite's choice for the grouping), the whole log.
const MARK_PRUNED: &str = "INSERT INTO tenant_event_retention (tenant, pruned_through)
     SELECT tenant, MAX(tenant_cursor) FROM events NOT INDEXED WHERE cursor <= ?
     GROUP BY tenant
     ON CONFLICT (tenant) DO UPDATE
     SET pruned_through = MAX(pruned_through, excluded.pruned_through)";

impl Changes for SqliteStore {
    fn subscribe(&self) -> broadcast::Receiver<StoreEvent> {
        self.events.subscribe()
    }
}

#[async_trait]
impl EventLog for SqliteStore {
    async fn events_after(
        &self,
        after: u64,
        tenant: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Event>> {
        let tenant = tenant.map(str::to_owned);
        self.read(move |conn| events_after(conn, after, tenant.as_deref(), limit))
            .await
    }

    async fn events_picked(&self, after: u64, limit: u32, pick: Pick) -> Result<PickedPage> {
        self.read(move |conn| events_picked(conn, after, limit, &pick))
            .await
    }

    async fn event_horizon(&self, tenant: Option<&str>) -> Result<EventHorizon> {
        let tenant = tenant.map(str::to_owned);
        self.read(move |conn| horizon(conn, tenant.as_deref()))
            .await
    }

    async fn prune_events(&self, created_before: Millis) -> Result<u64> {
        let mut total = 0;
        // A slice per job: other writes run between them.
        for _ in 0..PRUNE_SLICES {
            let deleted = self
                .write(move |conn| prune_slice(conn, created_before))
                .await?;
            total += deleted;
            if deleted == 0 {
                break;
            }
        }
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    use crate::sqlite::tests::plan_of;

    /// Each pruned slice's tenant marks read that slice, by cursor, never the
    /// whole log.
    #[tokio::test]
    async fn the_tenant_marks_of_a_pruned_slice_read_only_that_slice() {
        let steps = plan_of(super::MARK_PRUNED).await;
        let reads: Vec<&String> = steps.iter().filter(|s| s.contains("events")).collect();
        assert_eq!(
            reads,
            ["SEARCH events USING INTEGER PRIMARY KEY (rowid<?)"],
            "{steps:#?}"
        );
    }

    /// A watcher's replay seeks its tenant's cursor.
    #[tokio::test]
    async fn a_replay_seeks_its_tenants_cursor() {
        let steps = plan_of(super::AFTER_TENANT).await;
        assert!(
            steps.contains(
                &"SEARCH e USING INDEX events_by_tenant_cursor (tenant=? AND tenant_cursor>?)"
                    .to_owned()
            ),
            "{steps:#?}"
        );
    }
}
