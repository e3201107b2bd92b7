//! The reviewer's side of the store: start a review, gather its facts, record
//! its decision exactly once.

use std::collections::{HashMap, HashSet};

use async_trait::async_trait;
use countersign_domain::{
    Decision, DecisionOutcome, Millis, Proposal, ProposalState, escalation::Route,
    gates::ReviewFacts, model::ModelProfile,
};
use rusqlite::{Connection, OptionalExtension};

use super::{SqliteStore, events};
use crate::recording::{self, Found};
use crate::rows::{ColumnNames, Columns, NamedRows, OwnedRow};
use crate::{
    BeginReview, OverdueReview, RecordOutcome, Result, ReviewKey, Reviews, StoreError, StoreEvent,
    facts, now_ms,
};

/// A proposal of the batch that was not PENDING: redelivered while REVIEWING
/// (it keeps its first start time), or already terminal.
fn resume_in(conn: &Connection, tenant: &str, id: &str, now: Millis) -> Result<BeginReview> {
    let found = conn
        .prepare_cached("SELECT * FROM proposals WHERE tenant = ? AND id = ?")?
        .named_row([tenant, id], |row| {
            Ok((
                crate::rows::proposal_from_row(row)?,
                row.opt_int("review_started_at")?,
                row.opt_text("trace_parent")?,
            ))
        })?;
    let (proposal, started, trace_parent) =
        found.ok_or_else(|| StoreError::NotFound(format!("proposal `{id}`")))?;
    if proposal.state != ProposalState::Reviewing {
        return Ok(BeginReview::Terminal(proposal.state));
    }
    Ok(BeginReview::Reviewing {
        proposal: Box::new(proposal),
        started_at: started.unwrap_or(now),
        trace_parent,
    })
}

/// Moves one PENDING proposal to REVIEWING. The unary `+` keeps the planner
/// on the primary key: left to itself it walked the state index through
/// every pending proposal (66 ms a batch with 8,000 pending).
const BEGIN: &str = "
UPDATE proposals SET state = 'reviewing', review_started_at = ?1, updated_at = ?1
WHERE id = ?2 AND tenant = ?3 AND +state = 'pending'
RETURNING *";

/// Starts the reviews of `items`; answers in order. In one transaction, one
/// statement bound per proposal moves it if it is PENDING; each of the
/// others is then read as it is (a redelivered review resumes, a terminal
/// one ends).
#[tracing::instrument(name = "store.sqlite.begin_reviews", level = "debug", skip_all, fields(n = items.len()))]
pub fn begin_many(
    conn: &mut Connection,
    items: &[ReviewKey],
) -> Result<(Vec<BeginReview>, Vec<StoreEvent>)> {
    let now = now_ms();
    let tx = conn.transaction()?;
    let mut started = Vec::with_capacity(items.len());
    {
        let mut statement = tx.prepare_cached(BEGIN)?;
        let names = ColumnNames::of(&statement);
        for item in items {
            started.push(names.first_row(
                &mut statement,
                rusqlite::params![now, item.id, item.tenant],
                |row| {
                    Ok((
                        crate::rows::proposal_from_row(row)?,
                        row.opt_text("trace_parent")?,
                    ))
                },
            )?);
        }
    }
    let mut events = Vec::new();
    let mut out = Vec::with_capacity(items.len());
    for (item, started) in items.iter().zip(started) {
        match started {
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
            None => out.push(resume_in(&tx, &item.tenant, &item.id, now)?),
        }
    }
    tx.commit()?;
    Ok((out, events))
}

/// The operations that may overlap any review of a tenant group, in one
/// statement (`?1` the tenant, `?2` the group's targets and `?4` the clusters
/// of its cluster-wide reviews as JSON arrays, `?3` the window's start). Each
/// branch is one range of `proposals_target_end` or `proposals_radius_end`
/// (the tenant-wide branches of `proposals_by_end`): the open operations at
/// `decided_at IS NULL`, the approvals of the window from its start on (the
/// row's state says which of those approved); which candidates block which
/// review is the domain's rule (`gates::blocks`). One statement per group, not
/// one per review: those were a third of a batch's statements.
fn candidates_query(tenant_wide: bool, clusters: bool) -> String {
    const COLUMNS: &str = "id, action, target, blast_radius, state, created_at, decided_at";
    // What may overlap: the open operations, and the window's approvals. Each
    // scope below is read once for each, a range of its index. No table
    // joined with `proposals` has a `decided_at` or a `state`.
    const ENDS: [&str; 2] = [
        "decided_at IS NULL AND state IN ('pending', 'reviewing', 'escalated')",
        "decided_at >= ?3 AND state = 'approved'",
    ];
    let mut scopes = vec![
        format!(
            "SELECT {COLUMNS} FROM proposals WHERE tenant = ?1 AND target IN (SELECT value FROM json_each(?2))"
        ),
        format!(
            "SELECT {COLUMNS} FROM proposals WHERE tenant = ?1
             AND blast_radius IN ('tenant_wide', 'cluster')"
        ),
    ];
    if tenant_wide {
        scopes.push(format!("SELECT {COLUMNS} FROM proposals WHERE tenant = ?1"));
    }
    if clusters {
        scopes.push(
            "SELECT p2.id, p2.action, p2.target, p2.blast_radius, p2.state, p2.created_at,
                    p2.decided_at
                 FROM targets t2 CROSS JOIN proposals p2 ON p2.tenant = t2.tenant AND p2.target = t2.id
                 WHERE t2.tenant = ?1 AND t2.cluster IN (SELECT value FROM json_each(?4))"
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
         FROM ({}) p LEFT JOIN targets t ON t.tenant = ?1 AND t.id = p.target",
        branches.join("\n         UNION ALL ")
    )
}

pub(super) fn json_array<S: AsRef<str>>(items: &[S]) -> String {
    let items: Vec<&str> = items.iter().map(AsRef::as_ref).collect();
    serde_json::to_string(&items).expect("strings serialize")
}

/// The operations of `tenant` that may overlap an operation on `targets` (a
/// JSON array), open or approved since `window_start`, by
/// [`candidates_query`]: what the parallel-operation gate's facts are
/// gathered from, and what an approval people reached is re-checked against.
pub(super) fn candidates(
    tx: &Connection,
    tenant: &str,
    targets: String,
    window_start: Millis,
    tenant_wide: bool,
    clusters: &[String],
) -> Result<Vec<OwnedRow>> {
    let query = candidates_query(tenant_wide, !clusters.is_empty());
    let mut candidates = tx.prepare_cached(&query)?;
    // The query names ?4 (the clusters) only when there are clusters.
    let parameters: [rusqlite::types::Value; 4] = [
        tenant.to_owned().into(),
        targets.into(),
        window_start.into(),
        json_array(clusters).into(),
    ];
    for (i, value) in parameters
        .into_iter()
        .enumerate()
        .take(candidates.parameter_count())
    {
        candidates.raw_bind_parameter(i + 1, value)?;
    }
    OwnedRow::all(&mut candidates)
}

/// The facts of each proposal, in order, from one read transaction (one
/// snapshot): per tenant of the batch, its policy, the SOPs of the batch's
/// actions, its targets and the candidate parallel operations in one
/// statement each. The outer error is the transaction's; each inner one a
/// review's (a malformed row fails only the reviews that read it).
///
/// Read on the writer's own handle (the write thread, between writes): no
/// statement is handed to another thread, and the facts see every write
/// committed before them. On a reader they took the longest step of a review
/// batch (~1.3 ms of hand-offs); here, 10,000 × 32 decided 7–21% faster.
#[tracing::instrument(name = "store.sqlite.review_facts", skip_all, fields(n = proposals.len()))]
pub fn facts_many(
    conn: &mut Connection,
    proposals: &[Proposal],
) -> Result<Vec<Result<ReviewFacts>>> {
    let tx = conn.transaction()?;
    facts_in(&tx, proposals)
}

/// [`facts_many`] in the caller's transaction: what it has written so far
/// is part of the facts.
pub(super) fn facts_in(
    tx: &Connection,
    proposals: &[Proposal],
) -> Result<Vec<Result<ReviewFacts>>> {
    let mut batch = facts::Batch::new(proposals);
    for (tenant, indices) in facts::by_tenant(proposals, |p| p.tenant.as_str()) {
        let policy = tx
            .prepare_cached(
                "SELECT parallel_window_ms, allow_force_approve_no_sop, breaker_threshold,
                        breaker_window_ms, receipt_ttl_ms
                 FROM tenants WHERE name = ?1",
            )?
            .query_row([&tenant], |row| {
                Ok(countersign_domain::TenantPolicy {
                    parallel_window_ms: row.get(0)?,
                    allow_force_approve_no_sop: row.get(1)?,
                    breaker_threshold: row.get::<_, i64>(2)?.max(0) as u32,
                    breaker_window_ms: row.get(3)?,
                    receipt_ttl_ms: row.get(4)?,
                })
            })
            .optional()?;
        let Some(policy) = policy else {
            batch.tenant_missing(&tenant, &indices);
            continue;
        };
        let (actions, targets) = batch.keys(&indices);
        let targets = json_array(&targets);
        let documents = |statement: String| -> Result<Vec<OwnedRow>> {
            let mut statement = tx.prepare_cached(&statement)?;
            statement.raw_bind_parameter(1, &tenant)?;
            OwnedRow::all(&mut statement)
        };
        let route_rows = documents(super::routes::list_statement::<Route>())?;
        let profile_rows = documents(super::routes::list_statement::<ModelProfile>())?;
        // With a model profile, the tenant's whole catalogue.
        let mut sops = tx.prepare_cached(
            "SELECT * FROM sops WHERE tenant = ?1
                 AND (?3 OR action IN (SELECT value FROM json_each(?2)))
             ORDER BY id",
        )?;
        sops.raw_bind_parameter(1, &tenant)?;
        sops.raw_bind_parameter(2, json_array(&actions))?;
        sops.raw_bind_parameter(3, facts::sops_for_every_action(&profile_rows))?;
        let sop_rows = OwnedRow::all(&mut sops)?;
        let mut target_statement = tx.prepare_cached(
            "SELECT * FROM targets WHERE tenant = ?1 AND id IN (SELECT value FROM json_each(?2))",
        )?;
        target_statement.raw_bind_parameter(1, &tenant)?;
        target_statement.raw_bind_parameter(2, &targets)?;
        let target_rows = OwnedRow::all(&mut target_statement)?;
        let Some(gathered) = batch.gather(
            &indices,
            policy,
            &sop_rows,
            &target_rows,
            &route_rows,
            &profile_rows,
        ) else {
            continue;
        };
        let rows = candidates(
            tx,
            &tenant,
            targets,
            gathered.window_start,
            gathered.tenant_wide,
            &gathered.clusters,
        )?;
        batch.attach_others(gathered, &rows);
    }
    Ok(batch.finish())
}

/// A proposal a batch decides, as it is at commit: tenant, id, state, target,
/// operator, and the cited SOP's version and retired flag and the target's
/// status (read for every item, used for approvals).
type OpenRow = (
    String,
    String,
    String,
    String,
    String,
    Option<i64>,
    Option<bool>,
    Option<String>,
);

/// A proposal of a batch (`?1` its tenant, `?2` its id, `?3` the SOP it
/// cites) with its cited SOP and its target, as they are at commit.
const AT_COMMIT: &str = "
SELECT p.tenant, p.id, p.state, p.target, p.operator, s.version, s.retired, t.status
FROM proposals AS p
LEFT JOIN sops AS s ON s.tenant = p.tenant AND s.id = ?3
LEFT JOIN targets AS t ON t.tenant = p.tenant AND t.id = p.target
WHERE p.id = ?2 AND p.tenant = ?1";

/// Records many decisions in one transaction, in a handful of statements
/// whatever the batch size; answers in order. What becomes of each result is
/// the domain's rule (`recording::plan`), applied to the proposals as they
/// are in this transaction: late results are logged and dropped, approvals
/// whose SOP or target moved are stale.
#[tracing::instrument(name = "store.sqlite.insert_decision", level = "debug", skip_all, fields(n = items.len()))]
pub fn record_many(
    conn: &mut Connection,
    items: Vec<(ReviewKey, Decision)>,
) -> Result<(Vec<RecordOutcome>, Vec<StoreEvent>)> {
    let tx = conn.transaction()?;
    let now = now_ms();
    // Each proposal as it is now, with its cited SOP and target.
    let approvals: HashSet<(&str, &str)> = items
        .iter()
        .filter(|(_, d)| d.outcome == DecisionOutcome::Approve)
        .map(|(k, _)| (k.tenant.as_str(), k.id.as_str()))
        .collect();
    let mut rows: Vec<OpenRow> = Vec::with_capacity(items.len());
    {
        let mut at_commit = tx.prepare_cached(AT_COMMIT)?;
        for (k, d) in &items {
            let sop = match d.outcome {
                DecisionOutcome::Approve => d.sop_id.as_deref().unwrap_or_default(),
                _ => "",
            };
            let row = at_commit
                .query_row([k.tenant.as_str(), k.id.as_str(), sop], |r| r.try_into())
                .optional()?;
            rows.extend(row);
        }
    }
    let mut found = HashMap::with_capacity(rows.len());
    for (tenant, id, state, target, operator, version, retired, status) in rows {
        let approval = approvals
            .contains(&(tenant.as_str(), id.as_str()))
            .then_some((version, retired, status));
        let proposal = Found::parse(&id, &state, target, operator, approval)?;
        found.insert((tenant, id), proposal);
    }
    let plan = recording::plan(&items, |k| found.get(&(k.tenant.clone(), k.id.clone())))?;

    for (key, decision, state) in &plan.discarded {
        tx.prepare_cached(
            "INSERT INTO discarded_results (tenant, proposal_id, outcome, state_found, reviewer, at)
             VALUES (?, ?, ?, ?, ?, ?)",
        )?
        .execute(rusqlite::params![
            key.tenant,
            key.id,
            decision.outcome.as_str(),
            state.as_str(),
            decision.reviewer,
            now
        ])?;
    }
    let writes = &plan.writes;
    write_decisions(&tx, writes, now)?;
    let events = writes
        .iter()
        .map(|w| events::signal(&w.key.tenant, &w.key.id, w.next))
        .collect();
    let outcomes = plan.outcomes;
    tx.commit()?;
    Ok((outcomes, events))
}

/// Writes decisions, their proposals' state changes (events by trigger) and
/// the breaker trips their rejections cause, in the caller's transaction,
/// in a handful of statements whatever their number. Each proposal must
/// still be in the state its write moves it from: if one is not, the
/// transaction is refused whole (`FailedPrecondition`). A proposal stored in
/// its decided state (`Write::moves` false) takes its decision alone.
pub(super) fn write_decisions(
    tx: &Connection,
    writes: &[recording::Write<'_>],
    now: Millis,
) -> Result<()> {
    if writes.is_empty() {
        return Ok(());
    }
    let mut insert = tx.prepare_cached(
        "INSERT INTO decisions (proposal_id, tenant, outcome, reason, agent_message, sop_id,
             sop_version, rollback_path, gates_json, missing_gates_json, reviewer, decided_at,
             summary, review_latency_ms, route_id, votes_json, model_json)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)",
    )?;
    let mut update = tx.prepare_cached(
        "UPDATE proposals SET state = ?4, decided_at = ?5, updated_at = ?1
         WHERE id = ?2 AND tenant = ?3 AND state = ?6",
    )?;
    for w in writes {
        let d = w.decision;
        insert.execute(rusqlite::params![
            w.key.id,
            w.key.tenant,
            d.outcome.as_str(),
            d.reason,
            d.agent_message,
            d.sop_id,
            d.sop_version,
            d.rollback_path,
            serde_json::to_string(&d.gates).expect("gates serialize"),
            serde_json::to_string(&d.missing_gates).expect("names serialize"),
            d.reviewer,
            d.decided_at,
            d.summary,
            i64::try_from(d.review_latency_ms).unwrap_or(i64::MAX),
            d.route_id,
            crate::escalation::votes_json(&d.votes),
            crate::model::review_json(d.model.as_ref()),
        ])?;
        if !w.moves() {
            continue;
        }
        let updated = update.execute(rusqlite::params![
            now,
            w.key.id,
            w.key.tenant,
            w.next.as_str(),
            d.decided_at,
            w.prev.as_str(),
        ])?;
        if updated != 1 {
            // Something moved under us: write nothing, let the reviews retry.
            return Err(StoreError::FailedPrecondition(
                "proposals changed under their decisions".into(),
            ));
        }
    }
    super::suppression::log_trips(tx, writes, now)
}

/// The reviews started before `?1`, oldest first, at most `?2`: a range of
/// `proposals_reviewing`, which holds the proposals under review only.
const OVERDUE: &str = "
SELECT tenant, id, review_started_at FROM proposals
WHERE state = 'reviewing' AND review_started_at < ? ORDER BY review_started_at LIMIT ?";

pub fn overdue(
    conn: &Connection,
    started_before: Millis,
    limit: u32,
) -> Result<Vec<OverdueReview>> {
    conn.prepare_cached(OVERDUE)?
        .query_map(rusqlite::params![started_before, limit], |row| {
            Ok(OverdueReview {
                tenant: row.get(0)?,
                proposal_id: row.get(1)?,
                started_at: row.get(2)?,
            })
        })?
        .collect::<rusqlite::Result<_>>()
        .map_err(Into::into)
}

#[async_trait]
impl Reviews for SqliteStore {
    async fn begin_reviews(&self, items: &[ReviewKey]) -> Result<Vec<BeginReview>> {
        let items = items.to_vec();
        let (begun, events) = self.write(move |conn| begin_many(conn, &items)).await?;
        for event in events {
            self.publish(Some(event));
        }
        Ok(begun)
    }

    async fn review_facts_many(&self, proposals: &[Proposal]) -> Result<Vec<Result<ReviewFacts>>> {
        let proposals = proposals.to_vec();
        self.write(move |conn| facts_many(conn, &proposals)).await
    }

    async fn record_decisions(
        &self,
        items: Vec<(ReviewKey, Decision)>,
    ) -> Result<Vec<RecordOutcome>> {
        let (recorded, events) = self.write(move |conn| record_many(conn, items)).await?;
        for event in events {
            self.publish(Some(event));
        }
        Ok(recorded)
    }

    async fn overdue_reviews(
        &self,
        started_before: Millis,
        limit: u32,
    ) -> Result<Vec<OverdueReview>> {
        self.read(move |conn| overdue(conn, started_before, limit))
            .await
    }
}

#[cfg(test)]
mod tests {
    use countersign_domain::ProposalState;

    use crate::{
        Lifecycle, NewProposal, Proposals, RecordOutcome, ReviewKey, Reviews, SqliteStore, Tenants,
    };

    async fn store(dir: &tempfile::TempDir) -> SqliteStore {
        let url = format!("sqlite://{}", dir.path().join("s.db").display());
        let store = SqliteStore::connect(&url).await.unwrap();
        store.migrate().await.unwrap();
        store
    }

    use crate::sqlite::tests::plan_of;

    /// Beginning a batch looks its proposals up by primary key, whatever the
    /// number of pending proposals.
    #[tokio::test]
    async fn beginning_a_batch_seeks_each_proposal_by_its_id() {
        let steps = plan_of(super::BEGIN).await;
        let reads: Vec<&String> = steps.iter().filter(|s| s.contains("proposals")).collect();
        assert_eq!(
            reads,
            ["SEARCH proposals USING INDEX sqlite_autoindex_proposals_1 (id=?)"],
            "{steps:#?}"
        );
    }

    /// A review's start writes the proposal, the index of the reviews under
    /// way and the breaker's partial index (whose `WHERE` reads the state;
    /// no entry moves, as neither state is a rejection): the facts' indexes
    /// hold no column it changes, so none of their entries moves.
    #[tokio::test]
    async fn a_reviews_start_moves_no_entry_of_the_facts_indexes() {
        let written = crate::sqlite::tests::written_by(super::BEGIN).await;
        let proposals: Vec<&str> = written
            .iter()
            .map(String::as_str)
            .filter(|name| name.starts_with("proposals"))
            .collect();
        assert_eq!(
            proposals,
            [
                "proposals",
                "proposals_operator_rejections",
                "proposals_reviewing"
            ],
            "{written:?}"
        );
    }

    /// The candidates of a tenant group, in every shape: each branch reads
    /// `proposals` through a range of one of its indexes, never a scan, so a
    /// batch's facts cost the same behind any number of decided proposals.
    #[tokio::test]
    async fn a_groups_candidates_are_index_ranges_in_every_shape() {
        for (tenant_wide, clusters) in [(false, false), (true, false), (false, true), (true, true)]
        {
            let steps = plan_of(&super::candidates_query(tenant_wide, clusters)).await;
            let reads: Vec<&String> = steps
                .iter()
                .filter(|s| s.contains(" proposals") || s.contains(" p2 "))
                .collect();
            assert!(!reads.is_empty(), "{steps:#?}");
            assert!(
                reads
                    .iter()
                    .all(|s| s.starts_with("SEARCH") && s.contains("INDEX")),
                "tenant_wide={tenant_wide} clusters={clusters}: {steps:#?}"
            );
            // The open operations at `decided_at IS NULL`, the approvals from
            // the window's start: each branch's range bounds `decided_at`.
            assert!(
                reads
                    .iter()
                    .filter(|s| s.contains(" proposals ") || s.contains(" p2 "))
                    .all(|s| s.contains("decided_at=?") || s.contains("decided_at>?")),
                "tenant_wide={tenant_wide} clusters={clusters}: {steps:#?}"
            );
        }
    }

    /// The janitor's overdue reviews are a range of `proposals_reviewing`,
    /// an index of the proposals under review alone.
    #[tokio::test]
    async fn the_overdue_reviews_are_a_range_of_the_index_of_reviews() {
        let steps = plan_of(super::OVERDUE).await;
        assert_eq!(
            steps,
            ["SEARCH proposals USING INDEX proposals_reviewing (review_started_at<?)"],
            "{steps:#?}"
        );
    }

    /// The radius branches of the candidates read `proposals_radius_end`,
    /// which holds cluster-wide and tenant-wide proposals alone.
    #[tokio::test]
    async fn the_candidates_radius_branches_read_the_partial_radius_index() {
        let steps = plan_of(&super::candidates_query(false, false)).await;
        let radius: Vec<&String> = steps
            .iter()
            .filter(|s| s.contains("proposals_radius_end"))
            .collect();
        assert_eq!(radius.len(), 2, "{steps:#?}");
    }

    /// Each row of a state change is written once: the proposal, its
    /// tenant's cursor and its event, which the trigger inserts with that
    /// cursor (no second write of the event row to set it).
    #[tokio::test]
    async fn a_state_change_writes_the_proposal_the_cursor_and_one_event_row() {
        let dir = tempfile::tempdir().unwrap();
        let (store, p) = submitted(&dir).await;
        let (changes, cursors) = store
            .on_writer(move |conn| {
                let before = conn.total_changes();
                conn.execute(
                    "UPDATE proposals SET state = 'reviewing', updated_at = 1 WHERE id = ?",
                    [&p.id],
                )?;
                let changes = conn.total_changes() - before;
                let cursors = conn
                    .prepare("SELECT kind, tenant_cursor FROM events WHERE proposal_id = ? ORDER BY cursor")?
                    .query_map([&p.id], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?
                    .collect::<rusqlite::Result<Vec<_>>>()?;
                Ok::<_, rusqlite::Error>((changes, cursors))
            })
            .await
            .unwrap();
        assert_eq!(changes, 3, "proposal, cursor, event");
        assert_eq!(
            cursors,
            [
                ("SUBMITTED".to_owned(), 1),
                ("REVIEW_STARTED".to_owned(), 2)
            ]
        );
    }

    /// A store with tenant `a` and one proposal of it, submitted.
    async fn submitted(dir: &tempfile::TempDir) -> (SqliteStore, countersign_domain::Proposal) {
        let store = store(dir).await;
        store.create_tenant("a").await.unwrap();
        let p = store
            .insert_proposal(NewProposal {
                id: NewProposal::new_id(),
                tenant: "a".into(),
                spec: spec(),
                submitted_by: "t".into(),
                submitted_by_person: None,
                submitted_key: None,
                trace_parent: None,
            })
            .await
            .unwrap()
            .proposal()
            .clone();
        (store, p)
    }

    fn spec() -> countersign_domain::ProposalSpec {
        countersign_domain::ProposalSpec {
            action: "host_restart_service".into(),
            class: countersign_domain::OperationClass::Write,
            target: "node-01".into(),
            parameters: Default::default(),
            reason: "r".into(),
            blast_radius: countersign_domain::BlastRadius::SingleDevice,
            operator: "o".into(),
            context_summary: String::new(),
            incident_id: String::new(),
            labels: Default::default(),
            rollback_plan: String::new(),
            force_approve_no_sop: false,
            idempotency_key: String::new(),
        }
    }

    /// A batch's proposals, their SOPs and their targets are each read by key.
    #[tokio::test]
    async fn a_batch_reads_its_proposals_sops_and_targets_by_key() {
        let steps = plan_of(super::AT_COMMIT).await;
        assert_eq!(
            steps,
            [
                "SEARCH p USING INDEX sqlite_autoindex_proposals_1 (id=?)",
                "SEARCH s USING INDEX sqlite_autoindex_sops_1 (tenant=? AND id=?) LEFT-JOIN",
                "SEARCH t USING INDEX sqlite_autoindex_targets_1 (tenant=? AND id=?) LEFT-JOIN",
            ],
            "{steps:#?}"
        );
    }

    /// A late result is logged in `discarded_results` (an operator's record:
    /// no code path reads it back).
    #[tokio::test]
    async fn a_late_result_is_logged() {
        let dir = tempfile::tempdir().unwrap();
        let (store, p) = submitted(&dir).await;
        let key = ReviewKey {
            tenant: "a".into(),
            id: p.id.clone(),
        };
        store
            .begin_reviews(std::slice::from_ref(&key))
            .await
            .unwrap();
        let stamp = countersign_domain::review::ReviewStamp {
            reviewer: "w".into(),
            decided_at: countersign_domain::now_ms(),
            latency_ms: 1,
        };
        let decision = countersign_domain::review::failed("lost", stamp);
        let mut outcomes = store
            .record_decisions(vec![(key.clone(), decision.clone())])
            .await
            .unwrap();
        outcomes.extend(store.record_decisions(vec![(key, decision)]).await.unwrap());
        assert!(
            matches!(
                outcomes[..],
                [
                    RecordOutcome::Recorded,
                    RecordOutcome::Discarded(ProposalState::Rejected)
                ]
            ),
            "{outcomes:?}"
        );
        let logged: Vec<(String, String, String)> = store
            .on_writer(|conn| {
                conn.prepare(
                    "SELECT proposal_id, outcome, state_found FROM discarded_results
                     WHERE tenant = 'a'",
                )?
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                .collect::<rusqlite::Result<Vec<_>>>()
            })
            .await
            .unwrap();
        assert_eq!(logged, [(p.id, "reject".into(), "rejected".into())]);
    }
}
