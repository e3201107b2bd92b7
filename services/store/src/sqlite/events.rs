use countersign_domain::ProposalState;
use sqlx::{Row, SqlitePool};

use crate::{EventKind, Result, StoreError, StoreEvent};

/// The signal for a change the database has just logged (by trigger).
pub fn signal(tenant: &str, proposal_id: &str, state: ProposalState) -> StoreEvent {
    let kind = match state {
        ProposalState::Pending => EventKind::Submitted,
        ProposalState::Reviewing => EventKind::ReviewStarted,
        ProposalState::Approved => EventKind::Approved,
        ProposalState::Rejected => EventKind::Rejected,
        ProposalState::Cancelled => EventKind::Cancelled,
        ProposalState::TimedOut => EventKind::TimedOut,
    };
    StoreEvent {
        cursor: None,
        tenant: tenant.to_owned(),
        proposal_id: proposal_id.to_owned(),
        kind,
        state,
    }
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
                cursor: Some(row.try_get("cursor")?),
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
