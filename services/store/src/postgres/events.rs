//! The event log: read by log position or by a tenant's own cursor (both
//! commit-ordered; see migrations/postgres/0002_review.sql and
//! 0012_tenant_cursors.sql), its horizons, and its retention.

use async_trait::async_trait;
use countersign_domain::{Event, EventHorizon, Millis};
use sqlx::{PgPool, Row, postgres::PgRow};

use super::{PostgresStore, scope};
use crate::types::PickedHeads;
use crate::{
    EventLog, Pick, PickedPage, Result,
    rows::{Prefixed, decision_from_row},
};

/// Events past `$1`: every tenant's past a log position (the fan-out, in
/// system scope), or one tenant's (`$2`) past its own cursor (a watcher's
/// replay, in its scope). The limit
/// is written into the text (callers use a fixed page size): planned for an
/// unknown limit, PostgreSQL expects a tenth of the table and, once the tables
/// are large, prefers hashing all of `proposals` to reading it by key. One
/// tenant's replay is planned per run (`scope::CUSTOM_PLANS`): without the
/// tenant the planner cannot tell a small one from a large one, and walked
/// every tenant's log past the cursor (`postgres_plans` test). The page of
/// events is read first, then each event's proposal by its key (a subquery
/// with a limit is not merged into a join, and the tenant is compared with
/// `IS NOT DISTINCT FROM`, which no index answers, so only the key can serve
/// it): joined, a young table's guesses (ten pages, a handful of proposals
/// under the row-level-security filter) made PostgreSQL walk every proposal
/// and probe the log for each, with a plan cached while the table was tiny.
/// A decided proposal's decision comes the same way, by key, its columns
/// prefixed `d_` (see [`DECISION_COLUMNS`]).
#[doc(hidden)]
pub fn events_after_query(one_tenant: bool, limit: u32) -> String {
    let (tenant, order) = if one_tenant {
        ("e.tenant = $2 AND ", "tenant_cursor")
    } else {
        ("", "cursor")
    };
    events_query(
        &format!(
            "SELECT * FROM events e WHERE {tenant}e.{order} > $1 ORDER BY e.{order} LIMIT {limit}"
        ),
        order,
    )
}

/// Every tenant's event heads past log position `$1` (the fan-out's first
/// look; system scope), the limit written into the text as above.
fn heads_after_query(limit: u32) -> String {
    format!(
        "SELECT cursor, tenant, proposal_id, kind FROM events WHERE cursor > $1
         ORDER BY cursor LIMIT {limit}"
    )
}

/// The events at the log positions `$1`, whole, read as [`events_after_query`]
/// reads a page.
#[doc(hidden)]
pub fn events_at_query() -> String {
    events_query("SELECT * FROM events e WHERE e.cursor = ANY($1)", "cursor")
}

/// The events `window` selects (as `e`), each with its proposal and decision
/// by key, in `order`.
fn events_query(window: &str, order: &str) -> String {
    let decision = DECISION_COLUMNS
        .iter()
        .map(|c| format!("d.{c} AS d_{c}"))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "SELECT e.cursor AS ev_position, e.tenant_cursor AS ev_cursor, e.kind AS ev_kind,
                e.state AS ev_state, e.created_at AS ev_at, p.*, d.*
         FROM ({window}) AS e
         CROSS JOIN LATERAL (SELECT * FROM proposals p WHERE p.id = e.proposal_id
                             AND p.tenant IS NOT DISTINCT FROM e.tenant LIMIT 1) AS p
         LEFT JOIN LATERAL (SELECT {decision} FROM decisions d WHERE d.proposal_id = p.id
                            AND d.tenant IS NOT DISTINCT FROM p.tenant LIMIT 1) AS d ON true
         ORDER BY e.{order}"
    )
}

/// Each row of [`events_query`] as its event, the decision on a decided proposal.
fn events_from_rows(rows: &[PgRow]) -> Result<Vec<Event>> {
    let mut events = Vec::with_capacity(rows.len());
    for row in rows {
        let mut proposal = crate::rows::proposal_from_row(row)?;
        let decided: Option<String> = row.try_get("d_proposal_id")?;
        if proposal.state.is_terminal() && decided.is_some() {
            proposal.decision = Some(decision_from_row(&Prefixed(row, "d_"))?);
        }
        events.push(crate::rows::event_from_row(row, proposal)?);
    }
    Ok(events)
}

/// The `decisions` columns a decision is read from.
const DECISION_COLUMNS: [&str; 16] = [
    "proposal_id",
    "outcome",
    "reason",
    "agent_message",
    "sop_id",
    "sop_version",
    "rollback_path",
    "gates_json",
    "missing_gates_json",
    "reviewer",
    "decided_at",
    "summary",
    "review_latency_ms",
    "route_id",
    "votes_json",
    "model_json",
];

/// Events examined per prune (the pump prunes every minute).
const PRUNE_SLICE: i64 = 50_000;

async fn prune_slice(pool: &PgPool, created_before: Millis) -> Result<u64> {
    let mut tx = scope::system(pool).await?;
    // From the head of the log (the oldest events, by cursor). The head starts
    // past what was pruned: the index keeps the deleted entries until vacuum
    // reaches them, and walking them made each slice slower than the last
    // (300 ms a slice while a million expired events went).
    let through: Option<i64> = sqlx::query_scalar(
        "SELECT MAX(cursor) FROM (
             SELECT cursor, created_at FROM events
             WHERE cursor > (SELECT pruned_through FROM event_retention WHERE id = 1)
             ORDER BY cursor LIMIT $1) s
         WHERE created_at < $2",
    )
    .bind(PRUNE_SLICE)
    .bind(created_before)
    .fetch_one(&mut *tx)
    .await?;
    let Some(through) = through else {
        return Ok(0);
    };
    // Each tenant's mark: its newest cursor among the events going (the
    // pruned part of the log is a prefix, so of each tenant's too). Marks are
    // moved in tenant order, so pruners of two processes never deadlock.
    let deleted: i64 = sqlx::query_scalar(
        "WITH gone AS (DELETE FROM events WHERE cursor <= $1 RETURNING tenant, tenant_cursor),
              marked AS (
                  INSERT INTO tenant_event_retention AS h (tenant, pruned_through)
                  SELECT tenant, MAX(tenant_cursor) FROM gone GROUP BY tenant ORDER BY tenant
                  ON CONFLICT (tenant) DO UPDATE
                  SET pruned_through = GREATEST(h.pruned_through, EXCLUDED.pruned_through))
         SELECT COUNT(*) FROM gone",
    )
    .bind(through)
    .fetch_one(&mut *tx)
    .await?;
    sqlx::query(
        "UPDATE event_retention SET pruned_through = GREATEST(pruned_through, $1) WHERE id = 1",
    )
    .bind(through)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(deleted as u64)
}

#[async_trait]
impl EventLog for PostgresStore {
    /// With `tenant`, its events after its own cursor `after`; without, every
    /// tenant's after log position `after`.
    #[tracing::instrument(name = "store.postgres.events_after", skip(self))]
    async fn events_after(
        &self,
        after: u64,
        tenant: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Event>> {
        let pool = &self.pool;
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        let mut tx = match tenant {
            Some(tenant) => scope::tenant_planned_per_run(pool, tenant).await?,
            None => scope::system_planned_once(pool).await?,
        };
        let sql = events_after_query(tenant.is_some(), limit);
        let rows = sqlx::query(&sql)
            .bind(after)
            .bind(tenant)
            .fetch_all(&mut *tx)
            .await?;
        tx.commit().await?;
        events_from_rows(&rows)
    }

    /// The heads and the picked events in one transaction (system scope).
    #[tracing::instrument(name = "store.postgres.events_picked", skip(self, pick))]
    async fn events_picked(&self, after: u64, limit: u32, pick: Pick) -> Result<PickedPage> {
        let mut tx = scope::system_planned_once(&self.pool).await?;
        let rows = sqlx::query(&heads_after_query(limit))
            .bind(i64::try_from(after).unwrap_or(i64::MAX))
            .fetch_all(&mut *tx)
            .await?;
        let heads = rows
            .iter()
            .map(crate::rows::event_head_from_row)
            .collect::<Result<Vec<_>>>()?;
        let picked = PickedHeads::of(&heads, after, &pick);
        let mut events = Vec::new();
        if !picked.positions.is_empty() {
            let positions: Vec<i64> = picked.positions.iter().map(|&p| p as i64).collect();
            let rows = sqlx::query(&events_at_query())
                .bind(&positions)
                .fetch_all(&mut *tx)
                .await?;
            events = events_from_rows(&rows)?;
        }
        tx.commit().await?;
        Ok(picked.page(events))
    }

    /// The newest committed cursor (kept by the retention mark once every event
    /// has been pruned) and the mark itself: `tenant`'s, in its own cursors, in
    /// its scope (see migrations/postgres/0012), or the whole log's, in positions.
    async fn event_horizon(&self, tenant: Option<&str>) -> Result<EventHorizon> {
        let pool = &self.pool;
        let (pruned, newest): (i64, i64) = match tenant {
            Some(tenant) => {
                let mut tx = scope::tenant(pool, tenant).await?;
                let horizon = sqlx::query_as(
                    "SELECT COALESCE((SELECT pruned_through FROM tenant_event_retention
                                      WHERE tenant = $1), 0),
                            COALESCE((SELECT latest FROM tenant_event_cursors WHERE tenant = $1), 0)",
                )
                .bind(tenant)
                .fetch_one(&mut *tx)
                .await?;
                tx.commit().await?;
                horizon
            }
            None => {
                let mut tx = scope::system(pool).await?;
                let horizon = sqlx::query_as(
                    "SELECT (SELECT pruned_through FROM event_retention WHERE id = 1),
                            COALESCE((SELECT MAX(cursor) FROM events), 0)",
                )
                .fetch_one(&mut *tx)
                .await?;
                tx.commit().await?;
                horizon
            }
        };
        Ok(EventHorizon {
            pruned_through: pruned.max(0) as u64,
            latest: newest.max(pruned).max(0) as u64,
        })
    }

    /// Deletes the oldest events, up to the newest of them committed before
    /// `created_before`, and moves the retention marks (the log's and each
    /// tenant's), a slice per transaction.
    #[tracing::instrument(name = "store.postgres.prune_events", skip(self))]
    async fn prune_events(&self, created_before: Millis) -> Result<u64> {
        let mut total = 0;
        for _ in 0..100 {
            let deleted = prune_slice(&self.pool, created_before).await?;
            total += deleted;
            if deleted == 0 {
                break;
            }
        }
        Ok(total)
    }
}
