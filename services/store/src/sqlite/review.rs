//! The reviewer's side of the store: start a review, gather its facts, record
//! its decision exactly once.

use countersign_domain::{
    Decision, DecisionOutcome, GateResult, Millis, Proposal, ProposalState,
    gates::{OtherOperation, ReviewFacts},
};
use sqlx::{Row, SqliteConnection, SqlitePool, sqlite::SqliteRow};

use super::{events, proposals, reference, tenants};
use crate::{
    BeginReview, EventKind, OverdueReview, RecordOutcome, Result, StoreError, StoreEvent, now_ms,
};

fn corrupt(what: String) -> StoreError {
    StoreError::Corrupt(what)
}

pub fn decision_from_row(row: &SqliteRow) -> Result<Decision> {
    let id: String = row.try_get("proposal_id")?;
    let outcome: String = row.try_get("outcome")?;
    let gates: String = row.try_get("gates_json")?;
    let missing: String = row.try_get("missing_gates_json")?;
    let sop_version: Option<i64> = row.try_get("sop_version")?;
    let latency: i64 = row.try_get("review_latency_ms")?;
    Ok(Decision {
        outcome: outcome
            .parse()
            .map_err(|e| corrupt(format!("decision {id}: {e}")))?,
        reason: row.try_get("reason")?,
        agent_message: row.try_get("agent_message")?,
        sop_id: row.try_get("sop_id")?,
        sop_version: sop_version.map(|v| v as u32),
        rollback_path: row.try_get("rollback_path")?,
        gates: serde_json::from_str::<Vec<GateResult>>(&gates)
            .map_err(|e| corrupt(format!("decision {id} gates: {e}")))?,
        missing_gates: serde_json::from_str(&missing)
            .map_err(|e| corrupt(format!("decision {id} missing gates: {e}")))?,
        reviewer: row.try_get("reviewer")?,
        decided_at: row.try_get("decided_at")?,
        summary: row.try_get("summary")?,
        sequence: 0,
        digest: String::new(),
        review_latency_ms: latency.max(0) as u64,
    })
}

pub async fn decision_of(conn: &mut SqliteConnection, id: &str) -> Result<Option<Decision>> {
    sqlx::query("SELECT * FROM decisions WHERE proposal_id = ?")
        .bind(id)
        .fetch_optional(&mut *conn)
        .await?
        .as_ref()
        .map(decision_from_row)
        .transpose()
}

async fn state_of(
    conn: &mut SqliteConnection,
    tenant: &str,
    id: &str,
) -> Result<(ProposalState, Option<Millis>)> {
    let row: Option<(String, Option<Millis>)> = sqlx::query_as(
        "SELECT state, review_started_at FROM proposals WHERE tenant = ? AND id = ?",
    )
    .bind(tenant)
    .bind(id)
    .fetch_optional(&mut *conn)
    .await?;
    let (state, started) = row.ok_or_else(|| StoreError::NotFound(format!("proposal `{id}`")))?;
    let state = state
        .parse()
        .map_err(|e| corrupt(format!("proposal {id}: {e}")))?;
    Ok((state, started))
}

#[tracing::instrument(name = "store.sqlite.begin_review", skip(pool))]
pub async fn begin(
    pool: &SqlitePool,
    tenant: &str,
    id: &str,
    reviewer: &str,
) -> Result<(BeginReview, Option<StoreEvent>)> {
    let mut tx = pool.begin().await?;
    let (state, started) = state_of(&mut tx, tenant, id).await?;
    let (started_at, event) = match state {
        ProposalState::Pending => {
            let now = now_ms();
            sqlx::query(
                "UPDATE proposals SET state = 'reviewing', review_started_at = ?, updated_at = ?
                 WHERE tenant = ? AND id = ? AND state = 'pending'",
            )
            .bind(now)
            .bind(now)
            .bind(tenant)
            .bind(id)
            .execute(&mut *tx)
            .await?;
            let event = events::append(
                &mut tx,
                tenant,
                id,
                EventKind::ReviewStarted,
                ProposalState::Reviewing,
            )
            .await?;
            (now, Some(event))
        }
        ProposalState::Reviewing => (started.unwrap_or_else(now_ms), None),
        terminal => return Ok((BeginReview::Terminal(terminal), None)),
    };
    let proposal = proposals::fetch(&mut tx, tenant, id)
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("proposal `{id}`")))?;
    tx.commit().await?;
    Ok((
        BeginReview::Reviewing {
            proposal: Box::new(proposal),
            started_at,
        },
        event,
    ))
}

#[tracing::instrument(name = "store.sqlite.review_facts", skip_all, fields(proposal = %proposal.id))]
pub async fn facts(pool: &SqlitePool, proposal: &Proposal) -> Result<ReviewFacts> {
    let tenant = tenants::get(pool, &proposal.tenant)
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("tenant `{}`", proposal.tenant)))?;
    let sops = sqlx::query("SELECT * FROM sops WHERE tenant = ? AND action = ? ORDER BY id")
        .bind(&proposal.tenant)
        .bind(&proposal.spec.action)
        .fetch_all(pool)
        .await?
        .iter()
        .map(reference::sop_from_row)
        .collect::<Result<Vec<_>>>()?;
    let target = reference::get_target(pool, &proposal.tenant, &proposal.spec.target).await?;
    let now = now_ms();
    let cluster = target.as_ref().and_then(|t| t.cluster()).map(str::to_owned);
    let rows = sqlx::query(
        "SELECT p.id, p.action, p.target, p.blast_radius, p.state, p.created_at, p.decided_at,
                t.cluster
         FROM proposals p LEFT JOIN targets t ON t.tenant = p.tenant AND t.id = p.target
         WHERE p.tenant = ?1 AND p.id <> ?2
           AND ((p.state IN ('pending', 'reviewing')
                 AND (p.created_at < ?3 OR (p.created_at = ?3 AND p.id < ?2)))
                OR (p.state = 'approved' AND p.decided_at >= ?4))
           AND (?5 = 'tenant_wide' OR p.blast_radius = 'tenant_wide' OR p.target = ?6
                OR (?7 IS NOT NULL AND t.cluster = ?7
                    AND (?5 = 'cluster' OR p.blast_radius = 'cluster')))
         ORDER BY p.created_at, p.id
         LIMIT 16",
    )
    .bind(&proposal.tenant)
    .bind(&proposal.id)
    .bind(proposal.created_at)
    .bind(now - tenant.policy.parallel_window_ms)
    .bind(proposal.spec.blast_radius.as_str())
    .bind(&proposal.spec.target)
    .bind(&cluster)
    .fetch_all(pool)
    .await?;
    let others = rows
        .iter()
        .map(|row| {
            let id: String = row.try_get("id")?;
            let radius: String = row.try_get("blast_radius")?;
            let state: String = row.try_get("state")?;
            Ok(OtherOperation {
                action: row.try_get("action")?,
                target: row.try_get("target")?,
                target_cluster: row.try_get("cluster")?,
                blast_radius: radius
                    .parse()
                    .map_err(|e| corrupt(format!("proposal {id}: {e}")))?,
                state: state
                    .parse()
                    .map_err(|e| corrupt(format!("proposal {id}: {e}")))?,
                created_at: row.try_get("created_at")?,
                decided_at: row.try_get("decided_at")?,
                id,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(ReviewFacts {
        proposal_id: proposal.id.clone(),
        spec: proposal.spec.clone(),
        created_at: proposal.created_at,
        policy: tenant.policy,
        sops,
        target,
        others,
        now,
    })
}

/// Whether an approval's facts still hold at commit.
async fn recheck(
    conn: &mut SqliteConnection,
    tenant: &str,
    proposal: &Proposal,
    decision: &Decision,
) -> Result<Option<String>> {
    if let (Some(sop_id), Some(version)) = (&decision.sop_id, decision.sop_version) {
        let row: Option<(i64, bool)> =
            sqlx::query_as("SELECT version, retired FROM sops WHERE tenant = ? AND id = ?")
                .bind(tenant)
                .bind(sop_id)
                .fetch_optional(&mut *conn)
                .await?;
        match row {
            Some((v, false)) if v == i64::from(version) => {}
            Some((_, true)) => return Ok(Some(format!("{sop_id} was retired during the review"))),
            Some((v, false)) => {
                return Ok(Some(format!(
                    "{sop_id} changed during the review (v{version} → v{v})"
                )));
            }
            None => return Ok(Some(format!("{sop_id} vanished during the review"))),
        }
    }
    let status: Option<String> =
        sqlx::query_scalar("SELECT status FROM targets WHERE tenant = ? AND id = ?")
            .bind(tenant)
            .bind(&proposal.spec.target)
            .fetch_optional(&mut *conn)
            .await?;
    match status.as_deref() {
        Some("online") => Ok(None),
        Some(other) => Ok(Some(format!(
            "target {} became {other} during the review",
            proposal.spec.target
        ))),
        None => Ok(Some(format!(
            "target {} vanished during the review",
            proposal.spec.target
        ))),
    }
}

#[tracing::instrument(name = "store.sqlite.insert_decision", skip(pool, decision), fields(outcome = %decision.outcome))]
pub async fn record(
    pool: &SqlitePool,
    tenant: &str,
    id: &str,
    decision: Decision,
) -> Result<(RecordOutcome, Option<StoreEvent>)> {
    let mut tx = pool.begin().await?;
    let (state, _) = state_of(&mut tx, tenant, id).await?;
    let (next, kind) = match decision.outcome {
        DecisionOutcome::Approve => (ProposalState::Approved, EventKind::Approved),
        DecisionOutcome::Reject => (ProposalState::Rejected, EventKind::Rejected),
        DecisionOutcome::TimedOut => (ProposalState::TimedOut, EventKind::TimedOut),
    };
    if state.is_terminal() {
        sqlx::query(
            "INSERT INTO discarded_results (tenant, proposal_id, outcome, state_found, reviewer, at)
             VALUES (?, ?, ?, ?, ?, ?)",
        )
        .bind(tenant)
        .bind(id)
        .bind(decision.outcome.as_str())
        .bind(state.as_str())
        .bind(&decision.reviewer)
        .bind(now_ms())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        return Ok((RecordOutcome::Discarded(state), None));
    }
    if !state.can_become(next) {
        return Err(StoreError::FailedPrecondition(format!(
            "proposal {id} is {state}; it cannot become {next}"
        )));
    }
    let proposal = proposals::fetch(&mut tx, tenant, id)
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("proposal `{id}`")))?;
    if decision.outcome == DecisionOutcome::Approve
        && let Some(why) = recheck(&mut tx, tenant, &proposal, &decision).await?
    {
        return Ok((RecordOutcome::Stale(why), None));
    }
    sqlx::query(
        "INSERT INTO decisions (proposal_id, tenant, outcome, reason, agent_message, sop_id,
             sop_version, rollback_path, gates_json, missing_gates_json, reviewer, decided_at,
             summary, review_latency_ms)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    )
    .bind(id)
    .bind(tenant)
    .bind(decision.outcome.as_str())
    .bind(&decision.reason)
    .bind(&decision.agent_message)
    .bind(&decision.sop_id)
    .bind(decision.sop_version.map(i64::from))
    .bind(&decision.rollback_path)
    .bind(serde_json::to_string(&decision.gates).expect("gates serialize"))
    .bind(serde_json::to_string(&decision.missing_gates).expect("names serialize"))
    .bind(&decision.reviewer)
    .bind(decision.decided_at)
    .bind(&decision.summary)
    .bind(decision.review_latency_ms as i64)
    .execute(&mut *tx)
    .await?;
    let updated = sqlx::query(
        "UPDATE proposals SET state = ?, decided_at = ?, updated_at = ?
         WHERE tenant = ? AND id = ? AND state = ?",
    )
    .bind(next.as_str())
    .bind(decision.decided_at)
    .bind(now_ms())
    .bind(tenant)
    .bind(id)
    .bind(state.as_str())
    .execute(&mut *tx)
    .await?;
    if updated.rows_affected() != 1 {
        return Err(StoreError::FailedPrecondition(format!(
            "proposal {id} changed under the decision"
        )));
    }
    let event = events::append(&mut tx, tenant, id, kind, next).await?;
    let proposal = proposals::fetch(&mut tx, tenant, id)
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("proposal `{id}`")))?;
    tx.commit().await?;
    Ok((RecordOutcome::Recorded(Box::new(proposal)), Some(event)))
}

pub async fn overdue(
    pool: &SqlitePool,
    started_before: Millis,
    limit: u32,
) -> Result<Vec<OverdueReview>> {
    let rows: Vec<(String, String, Millis)> = sqlx::query_as(
        "SELECT tenant, id, review_started_at FROM proposals
         WHERE state = 'reviewing' AND review_started_at < ? ORDER BY review_started_at LIMIT ?",
    )
    .bind(started_before)
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(tenant, proposal_id, started_at)| OverdueReview {
            tenant,
            proposal_id,
            started_at,
        })
        .collect())
}

pub async fn discarded(pool: &SqlitePool, tenant: &str, id: &str) -> Result<u64> {
    let n: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM discarded_results WHERE tenant = ? AND proposal_id = ?",
    )
    .bind(tenant)
    .bind(id)
    .fetch_one(pool)
    .await?;
    Ok(n.max(0) as u64)
}
