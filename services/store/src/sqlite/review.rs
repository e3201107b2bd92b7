//! The reviewer's side of the store: start a review, gather its facts, record
//! its decision exactly once.

use countersign_domain::{
    Decision, DecisionOutcome, Millis, Proposal, ProposalState,
    gates::{OtherOperation, ReviewFacts},
};
use std::collections::HashMap;

use countersign_domain::{Sop, Target};
use sqlx::{Row, SqliteConnection, SqlitePool};

use super::{events, proposals, reference, tenants};
use crate::{
    BeginReview, OverdueReview, RecordOutcome, Result, ReviewKey, StoreError, StoreEvent, Tenant,
    now_ms,
};

fn corrupt(what: String) -> StoreError {
    StoreError::Corrupt(what)
}

pub async fn decision_of(conn: &mut SqliteConnection, id: &str) -> Result<Option<Decision>> {
    sqlx::query("SELECT * FROM decisions WHERE proposal_id = ?")
        .bind(id)
        .fetch_optional(&mut *conn)
        .await?
        .as_ref()
        .map(crate::rows::decision_from_row)
        .transpose()
}

async fn state_of(
    conn: &mut SqliteConnection,
    tenant: &str,
    id: &str,
) -> Result<(ProposalState, Option<Millis>, String)> {
    let row: Option<(String, Option<Millis>, String)> = sqlx::query_as(
        "SELECT state, review_started_at, target FROM proposals WHERE tenant = ? AND id = ?",
    )
    .bind(tenant)
    .bind(id)
    .fetch_optional(&mut *conn)
    .await?;
    let (state, started, target) =
        row.ok_or_else(|| StoreError::NotFound(format!("proposal `{id}`")))?;
    let state = state
        .parse()
        .map_err(|e| corrupt(format!("proposal {id}: {e}")))?;
    Ok((state, started, target))
}

/// A proposal of the batch that was not PENDING: redelivered while REVIEWING
/// (it keeps its first start time), or already terminal.
async fn resume_in(
    conn: &mut SqliteConnection,
    tenant: &str,
    id: &str,
    now: Millis,
) -> Result<BeginReview> {
    let (state, started, _) = state_of(conn, tenant, id).await?;
    if state != ProposalState::Reviewing {
        return Ok(BeginReview::Terminal(state));
    }
    let proposal = proposals::fetch(conn, tenant, id)
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("proposal `{id}`")))?;
    let trace_parent: Option<String> =
        sqlx::query_scalar("SELECT trace_parent FROM proposals WHERE tenant = ? AND id = ?")
            .bind(tenant)
            .bind(id)
            .fetch_one(&mut *conn)
            .await?;
    Ok(BeginReview::Reviewing {
        proposal: Box::new(proposal),
        started_at: started.unwrap_or(now),
        trace_parent,
    })
}

/// Moves the batch's PENDING proposals to REVIEWING. The unary `+` keeps the
/// planner on the primary key: left to itself it walked the state index
/// through every pending proposal (66 ms a batch with 8,000 pending).
const BEGIN: &str = "
UPDATE proposals SET state = 'reviewing', review_started_at = ?1, updated_at = ?1
FROM (SELECT json_extract(value, '$[0]') AS tenant, json_extract(value, '$[1]') AS id
      FROM json_each(?2)) AS batch
WHERE proposals.id = batch.id AND proposals.tenant = batch.tenant
  AND +proposals.state = 'pending'
RETURNING *";

/// Starts the reviews of `items` in one transaction; answers in order.
#[tracing::instrument(name = "store.sqlite.begin_reviews", level = "debug", skip_all, fields(n = items.len()))]
pub async fn begin_many(
    pool: &SqlitePool,
    items: &[ReviewKey],
) -> Result<(Vec<BeginReview>, Vec<StoreEvent>)> {
    let mut tx = pool.begin().await?;
    let now = now_ms();
    // The common case in one statement: every PENDING proposal of the batch.
    let keys: Vec<[&str; 2]> = items
        .iter()
        .map(|k| [k.tenant.as_str(), k.id.as_str()])
        .collect();
    let rows = sqlx::query(BEGIN)
        .bind(now)
        .bind(serde_json::to_string(&keys).expect("keys serialize"))
        .fetch_all(&mut *tx)
        .await?;
    let mut started = std::collections::HashMap::new();
    for row in &rows {
        let proposal = proposals::from_row(row)?;
        let trace_parent: Option<String> = row.try_get("trace_parent")?;
        started.insert(
            (proposal.tenant.clone(), proposal.id.clone()),
            (proposal, trace_parent),
        );
    }
    let mut events = Vec::new();
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        match started.remove(&(item.tenant.clone(), item.id.clone())) {
            Some((proposal, trace_parent)) => {
                events.push(events::signal(
                    &item.tenant,
                    &item.id,
                    ProposalState::Reviewing,
                ));
                out.push(BeginReview::Reviewing {
                    proposal: Box::new(proposal),
                    started_at: now,
                    trace_parent,
                });
            }
            None => out.push(resume_in(&mut tx, &item.tenant, &item.id, now).await?),
        }
    }
    tx.commit().await?;
    Ok((out, events))
}

/// What a batch's proposals share: each tenant, SOP set and target is read once.
#[derive(Default)]
struct SharedFacts {
    tenants: HashMap<String, Tenant>,
    sops: HashMap<(String, String), Vec<Sop>>,
    targets: HashMap<(String, String), Option<Target>>,
}

/// The facts of each proposal, in order, from one read transaction (one
/// snapshot): the outer error is the transaction's, each inner one a proposal's.
#[tracing::instrument(name = "store.sqlite.review_facts", skip_all, fields(n = proposals.len()))]
pub async fn facts_many(
    pool: &SqlitePool,
    proposals: &[Proposal],
) -> Result<Vec<Result<ReviewFacts>>> {
    let mut tx = pool.begin().await?;
    let now = now_ms();
    let mut shared = SharedFacts::default();
    read_targets(&mut tx, proposals, &mut shared).await?;
    let mut out = Vec::with_capacity(proposals.len());
    for proposal in proposals {
        out.push(facts_in(&mut tx, proposal, now, &mut shared).await);
    }
    tx.commit().await?;
    Ok(out)
}

/// Every target of the batch in one statement (a read per proposal was a
/// tenth of the embedded server's statements). A row that does not map is
/// left out: that proposal's own read of it then fails only its review.
async fn read_targets(
    conn: &mut SqliteConnection,
    proposals: &[Proposal],
    shared: &mut SharedFacts,
) -> Result<()> {
    let keys: Vec<[&str; 2]> = proposals
        .iter()
        .map(|p| [p.tenant.as_str(), p.spec.target.as_str()])
        .collect();
    let rows = sqlx::query(
        "SELECT t.* FROM json_each(?1) AS j CROSS JOIN targets AS t
           ON t.tenant = json_extract(j.value, '$[0]') AND t.id = json_extract(j.value, '$[1]')",
    )
    .bind(serde_json::to_string(&keys).expect("keys serialize"))
    .fetch_all(&mut *conn)
    .await?;
    for [tenant, target] in &keys {
        shared
            .targets
            .insert(((*tenant).to_owned(), (*target).to_owned()), None);
    }
    for row in &rows {
        let tenant: String = row.try_get("tenant")?;
        let id: String = row.try_get("id")?;
        match reference::target_from_row(row) {
            Ok(target) => shared.targets.insert((tenant, id), Some(target)),
            Err(_) => shared.targets.remove(&(tenant, id)),
        };
    }
    Ok(())
}

async fn facts_in(
    conn: &mut SqliteConnection,
    proposal: &Proposal,
    now: Millis,
    shared: &mut SharedFacts,
) -> Result<ReviewFacts> {
    let tenant = match shared.tenants.get(&proposal.tenant) {
        Some(tenant) => tenant.clone(),
        None => {
            let tenant = tenants::get(&mut *conn, &proposal.tenant)
                .await?
                .ok_or_else(|| StoreError::NotFound(format!("tenant `{}`", proposal.tenant)))?;
            shared
                .tenants
                .insert(proposal.tenant.clone(), tenant.clone());
            tenant
        }
    };
    let sop_key = (proposal.tenant.clone(), proposal.spec.action.clone());
    let sops = match shared.sops.get(&sop_key) {
        Some(sops) => sops.clone(),
        None => {
            let sops =
                sqlx::query("SELECT * FROM sops WHERE tenant = ? AND action = ? ORDER BY id")
                    .bind(&proposal.tenant)
                    .bind(&proposal.spec.action)
                    .fetch_all(&mut *conn)
                    .await?
                    .iter()
                    .map(reference::sop_from_row)
                    .collect::<Result<Vec<_>>>()?;
            shared.sops.insert(sop_key, sops.clone());
            sops
        }
    };
    let target_key = (proposal.tenant.clone(), proposal.spec.target.clone());
    let target = match shared.targets.get(&target_key) {
        Some(target) => target.clone(),
        None => {
            let target =
                reference::get_target(&mut *conn, &proposal.tenant, &proposal.spec.target).await?;
            shared.targets.insert(target_key, target.clone());
            target
        }
    };
    let cluster = target.as_ref().and_then(|t| t.cluster()).map(str::to_owned);
    // Each branch is one index range; the outer filter is the exact rule
    // (the domain's `blocks` checks it once more).
    let rows = sqlx::query(
        "WITH candidates (rid) AS (
               SELECT rowid FROM proposals WHERE tenant = ?1 AND target = ?6
                   AND state IN ('pending', 'reviewing')
               UNION SELECT rowid FROM proposals WHERE tenant = ?1 AND target = ?6
                   AND state = 'approved' AND decided_at >= ?4
               UNION SELECT rowid FROM proposals WHERE tenant = ?1
                   AND blast_radius IN ('tenant_wide', 'cluster') AND state IN ('pending', 'reviewing')
               UNION SELECT rowid FROM proposals WHERE tenant = ?1
                   AND blast_radius IN ('tenant_wide', 'cluster') AND state = 'approved'
                   AND decided_at >= ?4
               UNION SELECT rowid FROM proposals WHERE ?5 = 'tenant_wide' AND tenant = ?1
                   AND state IN ('pending', 'reviewing')
               UNION SELECT rowid FROM proposals WHERE ?5 = 'tenant_wide' AND tenant = ?1
                   AND state = 'approved' AND decided_at >= ?4
               UNION SELECT p2.rowid FROM targets t2 CROSS JOIN proposals p2
                   ON p2.tenant = t2.tenant AND p2.target = t2.id
                   WHERE ?5 = 'cluster' AND ?7 IS NOT NULL AND t2.tenant = ?1 AND t2.cluster = ?7
                   AND (p2.state IN ('pending', 'reviewing')
                        OR (p2.state = 'approved' AND p2.decided_at >= ?4)))
         SELECT p.id, p.action, p.target, p.blast_radius, p.state, p.created_at, p.decided_at,
                t.cluster
         FROM candidates c CROSS JOIN proposals p ON p.rowid = c.rid
         LEFT JOIN targets t ON t.tenant = p.tenant AND t.id = p.target
         WHERE p.id <> ?2
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
    .fetch_all(&mut *conn)
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

/// Whether an approval's facts still hold at commit: the cited SOP at the same
/// version and active (`sop` is `version:retired` as stored), the target still
/// ONLINE. `None` when they do.
fn stale_because(
    decision: &Decision,
    target: &str,
    sop: Option<&str>,
    status: Option<&str>,
) -> Option<String> {
    let sop_id = decision.sop_id.as_deref().unwrap_or_default();
    if let Some(version) = decision.sop_version {
        match sop.and_then(|s| s.split_once(':')) {
            Some((v, "0")) if v == version.to_string() => {}
            Some((_, "1")) => return Some(format!("{sop_id} was retired during the review")),
            Some((v, _)) => {
                return Some(format!(
                    "{sop_id} changed during the review (v{version} → v{v})"
                ));
            }
            None => return Some(format!("{sop_id} vanished during the review")),
        }
    }
    match status {
        Some("online") => None,
        Some(other) => Some(format!("target {target} became {other} during the review")),
        None => Some(format!("target {target} vanished during the review")),
    }
}

/// Records many decisions in one transaction, in a handful of statements
/// whatever the batch size; answers in order. Each proposal must still be open
/// (else the late result is logged and dropped); approvals are re-checked
/// against the SOP and target as they are now.
#[tracing::instrument(name = "store.sqlite.insert_decision", level = "debug", skip_all, fields(n = items.len()))]
pub async fn record_many(
    pool: &SqlitePool,
    items: Vec<(ReviewKey, Decision)>,
) -> Result<(Vec<RecordOutcome>, Vec<StoreEvent>)> {
    let mut tx = pool.begin().await?;
    let now = now_ms();
    let keys: Vec<[&str; 2]> = items
        .iter()
        .map(|(k, _)| [k.tenant.as_str(), k.id.as_str()])
        .collect();
    let rows: Vec<(String, String, String, String)> = sqlx::query_as(
        "SELECT p.tenant, p.id, p.state, p.target
         FROM json_each(?1) AS j CROSS JOIN proposals AS p
           ON p.id = json_extract(j.value, '$[1]') AND p.tenant = json_extract(j.value, '$[0]')",
    )
    .bind(serde_json::to_string(&keys).expect("keys serialize"))
    .fetch_all(&mut *tx)
    .await?;
    let mut current = std::collections::HashMap::new();
    for (tenant, id, state, target) in rows {
        let state: ProposalState = state
            .parse()
            .map_err(|e| corrupt(format!("proposal {id}: {e}")))?;
        current.insert((tenant, id), (state, target));
    }

    // Approvals: the SOP and target as they are at commit, in one statement.
    let approvals: Vec<[String; 4]> = items
        .iter()
        .filter(|(_, d)| d.outcome == DecisionOutcome::Approve)
        .filter_map(|(k, d)| {
            let (_, target) = current.get(&(k.tenant.clone(), k.id.clone()))?;
            Some([
                k.tenant.clone(),
                k.id.clone(),
                d.sop_id.clone().unwrap_or_default(),
                target.clone(),
            ])
        })
        .collect();
    let mut facts_now = std::collections::HashMap::new();
    if !approvals.is_empty() {
        let rows: Vec<(String, String, Option<String>, Option<String>)> = sqlx::query_as(
            "SELECT json_extract(j.value, '$[0]'), json_extract(j.value, '$[1]'),
                    (SELECT version || ':' || retired FROM sops
                     WHERE tenant = json_extract(j.value, '$[0]') AND id = json_extract(j.value, '$[2]')),
                    (SELECT status FROM targets
                     WHERE tenant = json_extract(j.value, '$[0]') AND id = json_extract(j.value, '$[3]'))
             FROM json_each(?1) AS j",
        )
        .bind(serde_json::to_string(&approvals).expect("rows serialize"))
        .fetch_all(&mut *tx)
        .await?;
        for (tenant, id, sop, status) in rows {
            facts_now.insert((tenant, id), (sop, status));
        }
    }

    let mut out = Vec::with_capacity(items.len());
    let mut writes = Vec::new();
    let mut changes = Vec::new();
    let mut events = Vec::new();
    for (key, decision) in &items {
        let id = (key.tenant.clone(), key.id.clone());
        let Some((state, target)) = current.get(&id) else {
            return Err(StoreError::NotFound(format!("proposal `{}`", key.id)));
        };
        let next = match decision.outcome {
            DecisionOutcome::Approve => ProposalState::Approved,
            DecisionOutcome::Reject => ProposalState::Rejected,
            DecisionOutcome::TimedOut => ProposalState::TimedOut,
        };
        if state.is_terminal() {
            sqlx::query(
                "INSERT INTO discarded_results (tenant, proposal_id, outcome, state_found, reviewer, at)
                 VALUES (?, ?, ?, ?, ?, ?)",
            )
            .bind(&key.tenant)
            .bind(&key.id)
            .bind(decision.outcome.as_str())
            .bind(state.as_str())
            .bind(&decision.reviewer)
            .bind(now)
            .execute(&mut *tx)
            .await?;
            out.push(RecordOutcome::Discarded(*state));
            continue;
        }
        if !state.can_become(next) {
            out.push(RecordOutcome::Stale(format!(
                "proposal {} is {state}; it cannot become {next}",
                key.id
            )));
            continue;
        }
        if decision.outcome == DecisionOutcome::Approve {
            let (sop, status) = facts_now.get(&id).cloned().unwrap_or_default();
            if let Some(why) = stale_because(decision, target, sop.as_deref(), status.as_deref()) {
                out.push(RecordOutcome::Stale(why));
                continue;
            }
        }
        writes.push(serde_json::json!({
            "proposal_id": key.id,
            "tenant": key.tenant,
            "outcome": decision.outcome.as_str(),
            "reason": decision.reason,
            "agent_message": decision.agent_message,
            "sop_id": decision.sop_id,
            "sop_version": decision.sop_version,
            "rollback_path": decision.rollback_path,
            "gates_json": serde_json::to_string(&decision.gates).expect("gates serialize"),
            "missing_gates_json": serde_json::to_string(&decision.missing_gates).expect("names serialize"),
            "reviewer": decision.reviewer,
            "decided_at": decision.decided_at,
            "summary": decision.summary,
            "review_latency_ms": decision.review_latency_ms,
        }));
        changes.push(serde_json::json!([
            key.tenant,
            key.id,
            state.as_str(),
            next.as_str(),
            decision.decided_at
        ]));
        events.push(events::signal(&key.tenant, &key.id, next));
        out.push(RecordOutcome::Recorded);
    }

    if !writes.is_empty() {
        sqlx::query(
            "INSERT INTO decisions (proposal_id, tenant, outcome, reason, agent_message, sop_id,
                 sop_version, rollback_path, gates_json, missing_gates_json, reviewer, decided_at,
                 summary, review_latency_ms)
             SELECT json_extract(value, '$.proposal_id'), json_extract(value, '$.tenant'),
                    json_extract(value, '$.outcome'), json_extract(value, '$.reason'),
                    json_extract(value, '$.agent_message'), json_extract(value, '$.sop_id'),
                    json_extract(value, '$.sop_version'), json_extract(value, '$.rollback_path'),
                    json_extract(value, '$.gates_json'), json_extract(value, '$.missing_gates_json'),
                    json_extract(value, '$.reviewer'), json_extract(value, '$.decided_at'),
                    json_extract(value, '$.summary'), json_extract(value, '$.review_latency_ms')
             FROM json_each(?1)",
        )
        .bind(serde_json::Value::Array(writes).to_string())
        .execute(&mut *tx)
        .await?;
        let expected = changes.len() as u64;
        let updated = sqlx::query(
            "UPDATE proposals SET state = batch.next, decided_at = batch.decided_at, updated_at = ?1
             FROM (SELECT json_extract(value, '$[0]') AS tenant, json_extract(value, '$[1]') AS id,
                          json_extract(value, '$[2]') AS prev, json_extract(value, '$[3]') AS next,
                          json_extract(value, '$[4]') AS decided_at
                   FROM json_each(?2)) AS batch
             WHERE proposals.id = batch.id AND proposals.tenant = batch.tenant
               AND proposals.state = batch.prev",
        )
        .bind(now)
        .bind(serde_json::Value::Array(changes).to_string())
        .execute(&mut *tx)
        .await?;
        if updated.rows_affected() != expected {
            // Something moved under us: write nothing, let the reviews retry.
            return Err(StoreError::FailedPrecondition(
                "proposals changed under their decisions".into(),
            ));
        }
        let rejected: Vec<[&str; 2]> = items
            .iter()
            .zip(&out)
            .filter(|((_, d), o)| {
                d.outcome == DecisionOutcome::Reject && matches!(o, RecordOutcome::Recorded)
            })
            .map(|((k, _), _)| [k.tenant.as_str(), k.id.as_str()])
            .collect();
        super::suppression::log_trips(&mut tx, &rejected, now).await?;
    }
    tx.commit().await?;
    Ok((out, events))
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

#[cfg(test)]
mod tests {
    use crate::{SqliteStore, Store};

    /// Beginning a batch looks its proposals up by primary key, whatever the
    /// number of pending proposals.
    #[tokio::test]
    async fn beginning_a_batch_seeks_each_proposal_by_its_id() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("s.db").display());
        let store = SqliteStore::connect(&url).await.unwrap();
        store.migrate().await.unwrap();
        let plan: Vec<(i64, i64, i64, String)> =
            sqlx::query_as(&format!("EXPLAIN QUERY PLAN {}", super::BEGIN))
                .fetch_all(&store.writer_pool())
                .await
                .unwrap();
        let steps: Vec<&str> = plan.iter().map(|(_, _, _, s)| s.as_str()).collect();
        let reads: Vec<&&str> = steps.iter().filter(|s| s.contains("proposals")).collect();
        assert_eq!(
            reads,
            [&"SEARCH proposals USING INDEX sqlite_autoindex_proposals_1 (id=?)"],
            "{steps:#?}"
        );
    }
}
