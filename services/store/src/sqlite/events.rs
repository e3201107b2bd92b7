use countersign_domain::{Event, EventHorizon, Millis, ProposalState};
use sqlx::{Row, SqlitePool};

use super::proposals;
use crate::{EventKind, Result, StoreError, StoreEvent};

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

/// With `tenant`, its events after its own cursor `after`; without, every
/// tenant's after log position `after`.
#[tracing::instrument(name = "store.sqlite.events_after", skip(pool))]
pub async fn after(
    pool: &SqlitePool,
    after: u64,
    tenant: Option<&str>,
    limit: u32,
) -> Result<Vec<Event>> {
    let mut conn = pool.acquire().await?;
    let after = i64::try_from(after).unwrap_or(i64::MAX);
    let rows = match tenant {
        Some(tenant) => {
            sqlx::query(AFTER_TENANT)
                .bind(tenant)
                .bind(after)
                .bind(limit)
                .fetch_all(&mut *conn)
                .await?
        }
        None => {
            sqlx::query(AFTER_ALL)
                .bind(after)
                .bind(limit)
                .fetch_all(&mut *conn)
                .await?
        }
    };
    let mut events = Vec::with_capacity(rows.len());
    for row in &rows {
        let position: i64 = row.try_get("ev_position")?;
        let cursor: i64 = row.try_get("ev_cursor")?;
        let kind: String = row.try_get("ev_kind")?;
        let state: String = row.try_get("ev_state")?;
        let kind: EventKind = kind
            .parse()
            .map_err(|e| StoreError::Corrupt(format!("event {position}: {e}")))?;
        let state: ProposalState = state
            .parse()
            .map_err(|e| StoreError::Corrupt(format!("event {position}: {e}")))?;
        let proposal = proposals::from_row(row)?;
        events.push(Event::at(
            position as u64,
            cursor as u64,
            kind,
            state,
            row.try_get("ev_at")?,
            proposal,
        ));
    }
    let ended: Vec<&str> = events
        .iter()
        .filter(|e| e.proposal.state.is_terminal())
        .map(|e| e.proposal.id.as_str())
        .collect();
    if !ended.is_empty() {
        let ids = serde_json::to_string(&ended).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let rows = sqlx::query(
            // json_each first (CROSS JOIN fixes the order): one primary-key
            // lookup per id, never a scan of the decisions.
            "SELECT d.* FROM json_each(?) AS j CROSS JOIN decisions AS d ON d.proposal_id = j.value",
        )
        .bind(ids)
        .fetch_all(&mut *conn)
        .await?;
        let mut decisions = std::collections::HashMap::with_capacity(rows.len());
        for row in &rows {
            let id: String = row.try_get("proposal_id")?;
            decisions.insert(id, crate::rows::decision_from_row(row)?);
        }
        for event in events.iter_mut().filter(|e| e.proposal.state.is_terminal()) {
            event.proposal.decision = decisions.get(&event.proposal.id).cloned();
        }
    }
    Ok(events)
}

/// What `tenant`'s part of the log holds, in its own cursors (see
/// migrations/sqlite/0012), or the whole log's, in positions.
pub async fn horizon(pool: &SqlitePool, tenant: Option<&str>) -> Result<EventHorizon> {
    let query = match tenant {
        Some(tenant) => sqlx::query_as(
            "SELECT COALESCE((SELECT pruned_through FROM tenant_event_retention
                              WHERE tenant = ?1), 0),
                    COALESCE((SELECT latest FROM tenant_event_cursors WHERE tenant = ?1), 0)",
        )
        .bind(tenant),
        None => sqlx::query_as(
            "SELECT (SELECT pruned_through FROM event_retention WHERE id = 1),
                    MAX(COALESCE((SELECT MAX(cursor) FROM events), 0),
                        COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0))",
        ),
    };
    let (pruned, latest): (i64, i64) = query.fetch_one(pool).await?;
    Ok(EventHorizon {
        pruned_through: pruned.max(0) as u64,
        latest: latest.max(0) as u64,
    })
}

/// Events examined per prune (the pump prunes every minute).
const PRUNE_SLICE: i64 = 50_000;

/// Deletes the oldest events, up to the newest of them committed before
/// `created_before`, and moves the retention marks (the log's and each
/// tenant's), a slice per transaction.
#[tracing::instrument(name = "store.sqlite.prune_events", skip(writer))]
pub async fn prune(writer: &SqlitePool, created_before: Millis) -> Result<u64> {
    let mut total = 0;
    // A slice per transaction, so the writer is never held for long.
    for _ in 0..100 {
        let deleted = prune_slice(writer, created_before).await?;
        total += deleted;
        if deleted == 0 {
            break;
        }
    }
    Ok(total)
}

/// Moves each tenant's retention mark to its newest cursor among the events
/// up to a log position (`?`): the pruned part of the log is a prefix, so of
/// each tenant's too. NOT INDEXED: read by cursor, only those events; by the
/// tenant index (SQLite's choice for the grouping), the whole log.
const MARK_PRUNED: &str = "INSERT INTO tenant_event_retention (tenant, pruned_through)
     SELECT tenant, MAX(tenant_cursor) FROM events NOT INDEXED WHERE cursor <= ?
     GROUP BY tenant
     ON CONFLICT (tenant) DO UPDATE
     SET pruned_through = MAX(pruned_through, excluded.pruned_through)";

async fn prune_slice(writer: &SqlitePool, created_before: Millis) -> Result<u64> {
    let mut tx = writer.begin().await?;
    // From the head of the log (the oldest events, by cursor), in slices, so
    // no index on time is maintained for every event written.
    let through: Option<i64> = sqlx::query_scalar(
        "SELECT MAX(cursor) FROM (SELECT cursor, created_at FROM events ORDER BY cursor LIMIT ?)
         WHERE created_at < ?",
    )
    .bind(PRUNE_SLICE)
    .bind(created_before)
    .fetch_one(&mut *tx)
    .await?;
    let Some(through) = through else {
        return Ok(0);
    };
    sqlx::query(MARK_PRUNED)
        .bind(through)
        .execute(&mut *tx)
        .await?;
    let deleted = sqlx::query("DELETE FROM events WHERE cursor <= ?")
        .bind(through)
        .execute(&mut *tx)
        .await?
        .rows_affected();
    sqlx::query("UPDATE event_retention SET pruned_through = MAX(pruned_through, ?) WHERE id = 1")
        .bind(through)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use crate::{SqliteStore, Store};

    /// The steps of `query`'s plan on a freshly migrated database.
    async fn plan_of(query: &str) -> Vec<String> {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("s.db").display());
        let store = SqliteStore::connect(&url).await.unwrap();
        store.migrate().await.unwrap();
        let plan: Vec<(i64, i64, i64, String)> =
            sqlx::query_as(&format!("EXPLAIN QUERY PLAN {query}"))
                .fetch_all(&store.writer_pool())
                .await
                .unwrap();
        plan.into_iter().map(|(_, _, _, step)| step).collect()
    }

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
