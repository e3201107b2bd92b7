use countersign_domain::ProposalState;
use sqlx::{Row, SqliteConnection, SqlitePool};

use crate::{EventKind, Result, StoreError, StoreEvent, now_ms};

/// Appends an event in the caller's transaction; publish it after commit.
pub async fn append(
    conn: &mut SqliteConnection,
    tenant: &str,
    proposal_id: &str,
    kind: EventKind,
    state: ProposalState,
) -> Result<StoreEvent> {
    let cursor: i64 = sqlx::query_scalar(
        "INSERT INTO events (tenant, proposal_id, kind, state, created_at)
         VALUES (?, ?, ?, ?, ?) RETURNING cursor",
    )
    .bind(tenant)
    .bind(proposal_id)
    .bind(kind.as_str())
    .bind(state.as_str())
    .bind(now_ms())
    .fetch_one(&mut *conn)
    .await?;
    Ok(StoreEvent {
        cursor,
        tenant: tenant.to_owned(),
        proposal_id: proposal_id.to_owned(),
        kind,
        state,
    })
}

pub async fn of_proposal(pool: &SqlitePool, tenant: &str, id: &str) -> Result<Vec<StoreEvent>> {
    let rows = sqlx::query(
        "SELECT cursor, tenant, proposal_id, kind, state FROM events
         WHERE tenant = ? AND proposal_id = ? ORDER BY cursor",
    )
    .bind(tenant)
    .bind(id)
    .fetch_all(pool)
    .await?;
    rows.iter()
        .map(|row| {
            let kind: String = row.try_get("kind")?;
            let state: String = row.try_get("state")?;
            Ok(StoreEvent {
                cursor: row.try_get("cursor")?,
                tenant: row.try_get("tenant")?,
                proposal_id: row.try_get("proposal_id")?,
                kind: kind
                    .parse()
                    .map_err(|e| StoreError::Corrupt(format!("events.kind: {e}")))?,
                state: state
                    .parse()
                    .map_err(|e| StoreError::Corrupt(format!("events.state: {e}")))?,
            })
        })
        .collect()
}
