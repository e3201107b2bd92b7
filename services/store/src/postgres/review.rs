//! The reviewer's side of the store: start a review, gather its facts, record
//! its decision exactly once. Batches may span tenants: one transaction, and
//! the scope switches per tenant group.

use std::collections::HashMap;

use async_trait::async_trait;
use countersign_domain::{
    Decision, DecisionOutcome, Millis, Proposal, ProposalState, escalation::Route,
    gates::ReviewFacts, model::ModelProfile,
};
use sqlx::{PgConnection, Row};

use super::{PostgresStore, proposals, scope, suppression, tenants};
use crate::{
    BeginReview, OverdueReview, RecordOutcome, Result, ReviewKey, Reviews, StoreError, StoreEvent,
    facts, now_ms,
    recording::{self, Found, Write},
};

fn corrupt(what: String) -> StoreError {
    StoreError::Corrupt(what)
}

pub async fn decision_of(
    conn: &mut PgConnection,
    tenant: &str,
    id: &str,
) -> Result<Option<Decision>> {
    sqlx::query("SELECT * FROM decisions WHERE proposal_id = $2 AND tenant IS NOT DISTINCT FROM $1")
        .bind(tenant)
        .bind(id)
        .fetch_optional(&mut *conn)
        .await?
        .as_ref()
        .map(crate::rows::decision_from_row)
        .transpose()
}

/// The row [`BEGIN_REVIEWS`] returns, as the review it begins.
fn began(row: &sqlx::postgres::PgRow, now: Millis) -> Result<BeginReview> {
    Ok(BeginReview::Reviewing {
        proposal: Box::new(crate::rows::proposal_from_row(row)?),
        started_at: now,
        trace_parent: row.try_get("trace_parent")?,
    })
}

/// A proposal of the batch that [`BEGIN_REVIEWS`] did not move: redelivered
/// while REVIEWING (it keeps its first start time), already terminal, or
/// PENDING still. The last is a row that another transaction changed while
/// the statement waited for its lock, and left PENDING: the statement locked
/// its new version, which is not in the statement's snapshot, so the update
/// did not see it. It is begun now, in a statement of its own (`true`: it
/// entered REVIEWING here).
async fn resume_in(
    conn: &mut PgConnection,
    tenant: &str,
    id: &str,
    now: Millis,
) -> Result<(BeginReview, bool)> {
    let row: Option<(String, Option<Millis>, Option<String>)> = sqlx::query_as(
        "SELECT state, review_started_at, trace_parent FROM proposals
         WHERE id = $2 AND tenant IS NOT DISTINCT FROM $1",
    )
    .bind(tenant)
    .bind(id)
    .fetch_optional(&mut *conn)
    .await?;
    let (state, started, trace_parent) =
        row.ok_or_else(|| StoreError::NotFound(format!("proposal `{id}`")))?;
    let state: ProposalState = state
        .parse()
        .map_err(|e| corrupt(format!("proposal {id}: {e}")))?;
    if state == ProposalState::Pending {
        let row = sqlx::query(BEGIN_REVIEWS)
            .bind(now)
            .bind(tenant)
            .bind([id])
            .fetch_optional(&mut *conn)
            .await?;
        if let Some(row) = row {
            return Ok((began(&row, now)?, true));
        }
    }
    if state != ProposalState::Reviewing {
        return Ok((BeginReview::Terminal(state), false));
    }
    let proposal = proposals::fetch(conn, tenant, id)
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("proposal `{id}`")))?;
    let review = BeginReview::Reviewing {
        proposal: Box::new(proposal),
        started_at: started.unwrap_or(now),
        trace_parent,
    };
    Ok((review, false))
}

/// Moves a batch's PENDING proposals (ids `$3`, of tenant `$2`, in id order)
/// to REVIEWING at `$1`, in one statement, each locked in turn in the order
/// given (every writer locks rows in id order) and returned. Each is found by
/// key alone, through a lateral lookup per id whose tenant and state are
/// compared with `IS NOT DISTINCT FROM` (no index answers it), and then
/// updated by its row's address (`ctid`): the one plan a connection caches for
/// it (`scope::GENERIC_PLANS`) reads the primary key and no other index,
/// whatever the table's statistics say. A plain `id = ANY($3)` is planned on
/// guesses: on a young table the row-level-security predicate's tenant index
/// ties with the key, and the batch then reads every row of the tenant.
#[doc(hidden)]
pub const BEGIN_REVIEWS: &str =
    "UPDATE proposals SET state = 'reviewing', review_started_at = $1, updated_at = $1
     FROM (SELECT p.ctid AS row_at FROM unnest($3::text[]) AS b(id)
           CROSS JOIN LATERAL (SELECT ctid FROM proposals
               WHERE id = b.id AND (tenant, state) IS NOT DISTINCT FROM ($2, 'pending')
               LIMIT 1 FOR UPDATE) p) locked
     WHERE proposals.ctid = locked.row_at
     RETURNING proposals.*";

/// Every operation that may block one of a batch's proposals (the
/// parallel-operation gate), in one tenant: open or recently approved, on one
/// of the batch's targets, or of a wide blast radius, or anywhere in the
/// tenant when the batch holds a tenant-wide proposal, or in the clusters of
/// its cluster-wide ones. Each branch is one index range and reads the columns
/// itself: the proposals table is never joined as a whole, so no estimate can
/// turn the query into a pass over every proposal of the tenant per candidate
/// (on a young table, whose statistics say it is empty, the planner did just
/// that: 150–400 ms a batch after 6,000 proposals). A proposal found by two
/// branches comes twice; `blocks` (domain) then picks each proposal's own and
/// the caller drops repeats. Each candidate's cluster is one lookup by the
/// target's key: joined as a table, a young `targets` (statistics of a handful
/// of rows) was read whole and compared with every candidate. One query per
/// batch and tenant, not one per proposal: planning it for its parameters
/// (`scope::CUSTOM_PLANS`) costs about 2 ms.
#[doc(hidden)]
pub fn candidates_query(tenant_wide: bool, clusters: bool) -> String {
    const COLUMNS: &str = "id, action, target, blast_radius, state, created_at, decided_at";
    // What may overlap: the open operations, and the window's approvals. Each
    // scope below is read once for each, a range of its index. No table
    // joined with `proposals` has a `decided_at` or a `state`.
    const ENDS: [&str; 2] = [
        "decided_at IS NULL AND state IN ('pending', 'reviewing', 'escalated')",
        "decided_at >= $3 AND state = 'approved'",
    ];
    let mut scopes = vec![
        format!("SELECT {COLUMNS} FROM proposals WHERE tenant = $1 AND target = ANY($2)"),
        format!(
            "SELECT {COLUMNS} FROM proposals WHERE tenant = $1
             AND blast_radius IN ('tenant_wide', 'cluster')"
        ),
    ];
    if tenant_wide {
        scopes.push(format!("SELECT {COLUMNS} FROM proposals WHERE tenant = $1"));
    }
    if clusters {
        scopes.push(
            "SELECT p2.id, p2.action, p2.target, p2.blast_radius, p2.state, p2.created_at,
                    p2.decided_at
                 FROM targets t2 JOIN proposals p2 ON p2.tenant = t2.tenant AND p2.target = t2.id
                 WHERE t2.tenant = $1 AND t2.cluster = ANY($4)"
                .to_owned(),
        );
    }
    let branches: Vec<String> = scopes
        .iter()
        .flat_map(|scope| ENDS.map(|end| format!("{scope} AND {end}")))
        .collect();
    format!(
        "SELECT p.id, p.action, p.target, p.blast_radius, p.state, p.created_at, p.decided_at,
                t.cluster
         FROM ({}) p
         LEFT JOIN LATERAL (SELECT cluster FROM targets WHERE tenant = $1 AND id = p.target
                            LIMIT 1) t ON true",
        branches.join("\n         UNION ALL ")
    )
}

/// An approved proposal's id, its cited SOP's version and retired flag, and
/// its target's status, as they are at commit.
type ApprovalFacts = (String, Option<i64>, Option<bool>, Option<String>);

/// Locks a proposal (`$2`, of tenant `$1`) for its decision: by key alone,
/// for the reason [`BEGIN_REVIEWS`] gives.
#[doc(hidden)]
pub const LOCK_FOR_DECISION: &str = "SELECT id, state, target, operator FROM proposals
     WHERE id = $2 AND tenant IS NOT DISTINCT FROM $1 FOR UPDATE";

/// [`LOCK_FOR_DECISION`] for a batch (ids `$2`, in id order), in one
/// statement: a lateral lookup by key per id, each row locked in turn.
#[doc(hidden)]
pub const LOCK_FOR_DECISIONS: &str = "SELECT p.id, p.state, p.target, p.operator
     FROM unnest($2::text[]) AS b(id)
     CROSS JOIN LATERAL (SELECT id, state, target, operator FROM proposals
         WHERE id = b.id AND tenant IS NOT DISTINCT FROM $1 LIMIT 1 FOR UPDATE) p";

/// The first phase of one tenant's part of [`record_many`], in its scope:
/// locks the proposals (in id order) and reads, for the approvals, the SOPs
/// and targets they rest on as they are now.
async fn lock_tenant(
    conn: &mut PgConnection,
    tenant: &str,
    items: &[&(ReviewKey, Decision)],
) -> Result<HashMap<String, Found>> {
    let mut ids: Vec<&str> = items.iter().map(|(k, _)| k.id.as_str()).collect();
    // In id order (see `scope::by_tenant`).
    ids.sort_unstable();
    ids.dedup();
    let rows: Vec<(String, String, String, String)> = sqlx::query_as(LOCK_FOR_DECISIONS)
        .bind(tenant)
        .bind(&ids)
        .fetch_all(&mut *conn)
        .await?;

    // Approvals: the SOP and target as they are at commit, in one statement.
    let targets: HashMap<&str, &str> = rows
        .iter()
        .map(|(id, _, target, _)| (id.as_str(), target.as_str()))
        .collect();
    let (approved, (sops, targets)): (Vec<&str>, (Vec<String>, Vec<String>)) = items
        .iter()
        .filter(|(_, d)| d.outcome == DecisionOutcome::Approve)
        .filter_map(|(k, d)| {
            let target = targets.get(k.id.as_str())?;
            Some((
                k.id.as_str(),
                (d.sop_id.clone().unwrap_or_default(), (*target).to_owned()),
            ))
        })
        .unzip();
    let mut approvals = HashMap::new();
    if !approved.is_empty() {
        let facts: Vec<ApprovalFacts> = sqlx::query_as(
            "SELECT b.id, s.version, s.retired, t.status
             FROM unnest($2::text[], $3::text[], $4::text[]) AS b(id, sop, target)
             LEFT JOIN sops s ON s.tenant = $1 AND s.id = b.sop
             LEFT JOIN targets t ON t.tenant = $1 AND t.id = b.target",
        )
        .bind(tenant)
        .bind(&approved)
        .bind(&sops)
        .bind(&targets)
        .fetch_all(&mut *conn)
        .await?;
        for (id, version, retired, status) in facts {
            approvals.insert(id, (version, retired, status));
        }
    }

    let mut found = HashMap::with_capacity(rows.len());
    for (id, state, target, operator) in rows {
        let approval = approvals.get(&id).cloned();
        let proposal = Found::parse(&id, &state, target, operator, approval)?;
        found.insert(id, proposal);
    }
    Ok(found)
}

/// Logs one tenant's late results (their proposals were already terminal).
async fn log_discarded(
    conn: &mut PgConnection,
    tenant: &str,
    plan: &recording::Plan<'_>,
    now: Millis,
) -> Result<()> {
    for (key, decision, state) in &plan.discarded {
        sqlx::query(
            "INSERT INTO discarded_results (tenant, proposal_id, outcome, state_found, reviewer, at)
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(tenant)
        .bind(&key.id)
        .bind(decision.outcome.as_str())
        .bind(state.as_str())
        .bind(&decision.reviewer)
        .bind(now)
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

/// The reviews started before `$1`, oldest first, at most `$2`: a range of
/// `proposals_reviewing`, which holds the proposals under review only.
pub const OVERDUE: &str = "SELECT tenant, id, review_started_at FROM proposals
WHERE state = 'reviewing' AND review_started_at < $1
ORDER BY review_started_at LIMIT $2";

/// A batch's proposals (ids `$3`, of tenant `$1`) take their decided states
/// (`$4`, at `$5`, `updated_at` `$2`) if each is still in its state of `$6`,
/// in one statement: each found by key and updated by its row's address, for
/// the reason [`BEGIN_REVIEWS`] gives (the rows are locked already, by
/// [`LOCK_FOR_DECISIONS`]). Before per-proposal statements the batch was one
/// `jsonb_to_recordset` joined to `proposals`, which PostgreSQL guesses at 100
/// rows: it hashed the whole table for every batch (a fresh deployment's first
/// tens of thousands; 5 ms a batch at 10,000).
#[doc(hidden)]
pub const DECIDED_STATES: &str =
    "UPDATE proposals SET state = decided.next, decided_at = decided.at, updated_at = $2
     FROM (SELECT p.ctid AS row_at, b.next, b.at
           FROM unnest($3::text[], $4::text[], $5::bigint[], $6::text[]) AS b(id, next, at, prev)
           CROSS JOIN LATERAL (SELECT ctid FROM proposals
               WHERE id = b.id AND (tenant, state) IS NOT DISTINCT FROM ($1, b.prev)
               LIMIT 1) p) decided
     WHERE proposals.ctid = decided.row_at";

/// The second phase, first half: one tenant's proposals take their decided
/// states (their events are written at commit).
async fn change_states(
    conn: &mut PgConnection,
    tenant: &str,
    writes: &[&Write<'_>],
    now: Millis,
) -> Result<()> {
    let expected = writes.len() as u64;
    let updated = sqlx::query(DECIDED_STATES)
        .bind(tenant)
        .bind(now)
        .bind(writes.iter().map(|w| w.key.id.as_str()).collect::<Vec<_>>())
        .bind(writes.iter().map(|w| w.next.as_str()).collect::<Vec<_>>())
        .bind(
            writes
                .iter()
                .map(|w| w.decision.decided_at)
                .collect::<Vec<_>>(),
        )
        .bind(writes.iter().map(|w| w.prev.as_str()).collect::<Vec<_>>())
        .execute(&mut *conn)
        .await?
        .rows_affected();
    if updated != expected {
        // Something moved under us: write nothing, let the reviews retry.
        return Err(StoreError::FailedPrecondition(
            "proposals changed under their decisions".into(),
        ));
    }
    Ok(())
}

/// The second phase, second half: one tenant's decisions. The first takes the
/// event log's lock (migration 0010), to draw its commit order: after this the
/// transaction only appends under that lock, and commits.
async fn insert_decisions(conn: &mut PgConnection, writes: &[Write<'_>]) -> Result<()> {
    let rows: Vec<serde_json::Value> = writes.iter().map(Write::row).collect();
    sqlx::query(
        "INSERT INTO decisions (proposal_id, tenant, outcome, reason, agent_message, sop_id,
             sop_version, rollback_path, gates_json, missing_gates_json, reviewer, decided_at,
             summary, review_latency_ms, route_id, votes_json, model_json)
         SELECT proposal_id, tenant, outcome, reason, agent_message, sop_id, sop_version,
                rollback_path, gates_json, missing_gates_json, reviewer, decided_at, summary,
                review_latency_ms, route_id, votes_json, model_json
         FROM jsonb_to_recordset($1::jsonb) AS x(proposal_id text, tenant text, outcome text,
             reason text, agent_message text, sop_id text, sop_version bigint,
             rollback_path text, gates_json text, missing_gates_json text, reviewer text,
             decided_at bigint, summary text, review_latency_ms bigint, route_id text,
             votes_json text, model_json text)",
    )
    .bind(serde_json::Value::Array(rows).to_string())
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// The (id, operator) of each rejection among `writes`: whose breakers they
/// may trip.
fn rejected<'a>(writes: &'a [Write<'_>]) -> Vec<(&'a str, &'a str)> {
    writes
        .iter()
        .filter(|w| w.rejects())
        .map(|w| (w.key.id.as_str(), w.operator.as_str()))
        .collect()
}

/// Writes one tenant's decisions, the transaction in its scope and holding
/// every row lock it will take ([`write_prepared`] for one tenant).
pub(super) async fn write_decisions(
    conn: &mut PgConnection,
    tenant: &str,
    writes: &[Write<'_>],
    now: Millis,
) -> Result<()> {
    let mut scoped = scope::TenantScope::entered(tenant);
    write_prepared(conn, &mut scoped, &[(tenant, writes)], now).await
}

/// The second phase of a batch whose every row lock is held: each tenant's
/// proposals take their decided states, then each tenant's decisions are
/// written (the first takes the event log's lock, migration 0010), then the
/// breaker trips their rejections cause, read under that lock (so a rejection
/// another transaction committed first is counted), their events after the
/// rejections' own.
pub(super) async fn write_prepared<'w, T, W>(
    conn: &mut PgConnection,
    scoped: &mut scope::TenantScope,
    prepared: &[(T, W)],
    now: Millis,
) -> Result<()>
where
    T: AsRef<str>,
    W: AsRef<[Write<'w>]>,
{
    let prepared: Vec<(&str, &[Write<'w>])> = prepared
        .iter()
        .map(|(tenant, writes)| (tenant.as_ref(), writes.as_ref()))
        .collect();
    for &(tenant, writes) in &prepared {
        // A proposal stored in its decided state takes its decision alone.
        let moves: Vec<&Write<'_>> = writes.iter().filter(|w| w.moves()).collect();
        if moves.is_empty() {
            continue;
        }
        scoped.enter(&mut *conn, tenant).await?;
        change_states(&mut *conn, tenant, &moves, now).await?;
    }
    for &(tenant, writes) in &prepared {
        scoped.enter(&mut *conn, tenant).await?;
        insert_decisions(&mut *conn, writes).await?;
    }
    // Breakers last: read under the event log's lock (so a rejection another
    // transaction committed first is counted), and their events go after the
    // rejections' own.
    let mut tripped = Vec::new();
    for &(tenant, writes) in &prepared {
        let rejected = rejected(writes);
        if rejected.is_empty() {
            continue;
        }
        scoped.enter(&mut *conn, tenant).await?;
        let ids = suppression::trips(&mut *conn, tenant, &rejected, now).await?;
        if !ids.is_empty() {
            tripped.push((tenant, ids));
        }
    }
    if !tripped.is_empty() {
        scope::write_pending_events(&mut *conn).await?;
        for (tenant, ids) in &tripped {
            scoped.enter(&mut *conn, tenant).await?;
            suppression::log_trips(&mut *conn, tenant, ids, now).await?;
        }
    }
    Ok(())
}

/// One tenant's part of a batch's facts (`indices` of the batch's
/// proposals), the transaction in its scope: its policy, its routes and
/// model profiles, the SOPs of the batch's actions (all of them where it has
/// a model profile) and its targets in one query each, and the operations
/// that may run in parallel with any of them in one more.
pub(super) async fn tenant_facts(
    conn: &mut PgConnection,
    tenant: &str,
    indices: &[usize],
    batch: &mut facts::Batch<'_>,
) -> Result<()> {
    let Some(policy) = tenants::get(&mut *conn, tenant).await?.map(|t| t.policy) else {
        batch.tenant_missing(tenant, indices);
        return Ok(());
    };
    let (actions, targets) = batch.keys(indices);
    let route_rows = sqlx::query(&super::routes::list_statement::<Route>())
        .bind(tenant)
        .fetch_all(&mut *conn)
        .await?;
    let profile_rows = sqlx::query(&super::routes::list_statement::<ModelProfile>())
        .bind(tenant)
        .fetch_all(&mut *conn)
        .await?;
    // With a model profile, the tenant's whole catalogue.
    let every_action = facts::sops_for_every_action(&profile_rows);
    let sop_rows = sqlx::query(
        "SELECT * FROM sops WHERE tenant = $1 AND ($3 OR action = ANY($2))
             ORDER BY id COLLATE \"C\"",
    )
    .bind(tenant)
    .bind(&actions)
    .bind(every_action)
    .fetch_all(&mut *conn)
    .await?;
    let target_rows = sqlx::query("SELECT * FROM targets WHERE tenant = $1 AND id = ANY($2)")
        .bind(tenant)
        .bind(&targets)
        .fetch_all(&mut *conn)
        .await?;
    let Some(gathered) = batch.gather(
        indices,
        policy,
        &sop_rows,
        &target_rows,
        &route_rows,
        &profile_rows,
    ) else {
        return Ok(());
    };
    let query = candidates_query(gathered.tenant_wide, !gathered.clusters.is_empty());
    let mut candidates = sqlx::query(&query)
        .bind(tenant)
        .bind(&targets)
        .bind(gathered.window_start);
    if !gathered.clusters.is_empty() {
        candidates = candidates.bind(&gathered.clusters);
    }
    let rows = candidates.fetch_all(&mut *conn).await?;
    batch.attach_others(gathered, &rows);
    Ok(())
}

#[async_trait]
impl Reviews for PostgresStore {
    /// Starts the reviews of `items` in one transaction; answers in order.
    #[tracing::instrument(name = "store.postgres.begin_reviews", level = "debug", skip_all, fields(n = items.len()))]
    async fn begin_reviews(&self, items: &[ReviewKey]) -> Result<Vec<BeginReview>> {
        let groups = scope::by_tenant(items, |k| k.tenant.as_str());
        let Some((first, _)) = groups.first() else {
            return Ok(Vec::new());
        };
        let mut scoped = scope::TenantScope::planned_once();
        let mut tx = scoped.begin(&self.pool, first).await?;
        let now = now_ms();
        let mut out: Vec<Option<BeginReview>> = vec![None; items.len()];
        let mut started = vec![false; items.len()];
        for (tenant, mut indices) in groups {
            scoped.enter(&mut tx, &tenant).await?;
            // Rows are locked in id order (see `scope::by_tenant`); a proposal
            // that is not PENDING is not locked, and resumed as it is.
            indices.sort_by(|&a, &b| items[a].id.cmp(&items[b].id));
            let mut ids: Vec<&str> = indices.iter().map(|&i| items[i].id.as_str()).collect();
            ids.dedup();
            let rows = sqlx::query(BEGIN_REVIEWS)
                .bind(now)
                .bind(&tenant)
                .bind(&ids)
                .fetch_all(&mut *tx)
                .await?;
            let mut moved = HashMap::with_capacity(rows.len());
            for row in &rows {
                let id: String = row.try_get("id")?;
                moved.insert(id, began(row, now)?);
            }
            for i in indices {
                let id = &items[i].id;
                // A key given twice is begun once and resumed the second time.
                out[i] = Some(match moved.remove(id) {
                    Some(review) => {
                        started[i] = true;
                        review
                    }
                    None => {
                        let (review, now_started) = resume_in(&mut tx, &tenant, id, now).await?;
                        started[i] = now_started;
                        review
                    }
                });
            }
        }
        tx.commit().await?;
        for (key, _) in items.iter().zip(&started).filter(|(_, started)| **started) {
            self.publish(StoreEvent::changed_to(
                &key.tenant,
                &key.id,
                ProposalState::Reviewing,
            ));
        }
        Ok(out.into_iter().flatten().collect())
    }

    /// The facts of a batch of reviews, in one read-only snapshot, a handful
    /// of queries per tenant ([`tenant_facts`]). A database error fails the
    /// batch (every review is tried again); a malformed row fails only the
    /// reviews that read it.
    #[tracing::instrument(name = "store.postgres.review_facts", skip_all, fields(n = proposals.len()))]
    async fn review_facts_many(&self, proposals: &[Proposal]) -> Result<Vec<Result<ReviewFacts>>> {
        let groups = scope::by_tenant(proposals, |p| p.tenant.as_str());
        let Some((first, _)) = groups.first() else {
            return Ok(Vec::new());
        };
        // One snapshot, and plans for each batch's own parameters (see
        // `scope::CUSTOM_PLANS`).
        let mut scoped = scope::TenantScope::snapshot_planned_per_run();
        let mut tx = scoped.begin(&self.pool, first).await?;
        let mut batch = facts::Batch::new(proposals);
        for (tenant, indices) in groups {
            scoped.enter(&mut tx, &tenant).await?;
            tenant_facts(&mut tx, &tenant, &indices, &mut batch).await?;
        }
        tx.commit().await?;
        Ok(batch.finish())
    }

    /// Records many decisions in one transaction, a few statements per tenant
    /// whatever the batch size; answers in order. What becomes of each result is
    /// the domain's rule (`recording::plan`), applied to the proposals as they
    /// are in this transaction: late results are logged and dropped, approvals
    /// whose SOP or target moved are stale. The proposals are row-locked, so a
    /// concurrent decision or cancel of the same proposal is seen, never
    /// overwritten.
    ///
    /// Two phases, for the event log's lock (migrations/postgres/0010): first
    /// every tenant's rows are locked and its decisions prepared; then the states
    /// change and, last, the decisions are written, each drawing its commit order
    /// under that lock, which the transaction therefore takes only once it holds
    /// every row lock, and holds for as few statements as it can.
    #[tracing::instrument(name = "store.postgres.insert_decision", level = "debug", skip_all, fields(n = items.len()))]
    async fn record_decisions(
        &self,
        items: Vec<(ReviewKey, Decision)>,
    ) -> Result<Vec<RecordOutcome>> {
        let groups = scope::by_tenant(&items, |(k, _)| k.tenant.as_str());
        let Some((first, _)) = groups.first() else {
            return Ok(Vec::new());
        };
        let mut scoped = scope::TenantScope::planned_once();
        let mut tx = scoped.begin(&self.pool, first).await?;
        let now = now_ms();
        let mut out: Vec<Option<RecordOutcome>> = vec![None; items.len()];
        let mut prepared = Vec::new();
        for (tenant, indices) in groups {
            scoped.enter(&mut tx, &tenant).await?;
            let group: Vec<&(ReviewKey, Decision)> = indices.iter().map(|&i| &items[i]).collect();
            let found = lock_tenant(&mut tx, &tenant, &group).await?;
            let plan = recording::plan(group.iter().copied(), |k| found.get(&k.id))?;
            log_discarded(&mut tx, &tenant, &plan, now).await?;
            for (i, outcome) in indices.into_iter().zip(plan.outcomes) {
                out[i] = Some(outcome);
            }
            if !plan.writes.is_empty() {
                prepared.push((tenant, plan.writes));
            }
        }
        write_prepared(&mut tx, &mut scoped, &prepared, now).await?;
        tx.commit().await?;
        let recorded = items
            .iter()
            .zip(&out)
            .filter(|(_, o)| matches!(o, Some(RecordOutcome::Recorded)));
        for ((key, decision), _) in recorded {
            self.publish(StoreEvent::changed_to(
                &key.tenant,
                &key.id,
                decision.outcome.state(),
            ));
        }
        Ok(out.into_iter().flatten().collect())
    }

    #[tracing::instrument(name = "store.postgres.overdue_reviews", skip(self))]
    async fn overdue_reviews(
        &self,
        started_before: Millis,
        limit: u32,
    ) -> Result<Vec<OverdueReview>> {
        // The janitor looks across tenants: system scope, read only.
        let mut tx = scope::system(&self.pool).await?;
        let rows: Vec<(String, String, Millis)> = sqlx::query_as(OVERDUE)
            .bind(started_before)
            .bind(i64::from(limit))
            .fetch_all(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(rows
            .into_iter()
            .map(|(tenant, proposal_id, started_at)| OverdueReview {
                tenant,
                proposal_id,
                started_at,
            })
            .collect())
    }
}
