//! Escalated proposals on PostgreSQL: opened by the reviewer, voted on by
//! people, expired by the janitor, each in its tenant's scope. A vote (and
//! an expiry) locks its proposal's row first (`SELECT … FOR UPDATE`), so
//! every vote, decision and cancel of one proposal is serialized: the second
//! of two first votes waits for the first to commit and then reads its
//! decision. Row locks are taken proposal first, then its escalation (by the
//! trigger that closes it), and the event log's lock last, by the decision.

use std::collections::HashMap;

use async_trait::async_trait;
use countersign_domain::{
    BlastRadius, Millis, Proposal, ProposalState,
    escalation::{Ballot, Caller, Escalation, InboxFilter, ResolveError, Vote},
    gates::GateSpec,
};
use sqlx::PgConnection;

use super::{PostgresStore, proposals, review, scope};
use crate::escalation::{
    self, Decide, EscalationRow, Found, escalation_from_row, person_key, vote_from_row,
};
use crate::rows::{proposal_from_row, target_from_row};
use crate::{
    EscalationRecord, Escalations, RecordOutcome, Result, ReviewKey, StoreError, StoreEvent, Voted,
    now_ms,
};

/// Locks one proposal (`$2`, of tenant `$1`) for a vote or an expiry, by key
/// alone (see `review::LOCK_FOR_DECISION`).
const LOCK_PROPOSAL: &str = "SELECT * FROM proposals
     WHERE id = $2 AND tenant IS NOT DISTINCT FROM $1 FOR UPDATE";

/// The votes on `ids` of `tenant`, each with its proposal, in the order cast.
async fn votes_on(
    conn: &mut PgConnection,
    tenant: &str,
    ids: &[&str],
) -> Result<Vec<(String, Vote)>> {
    sqlx::query(VOTES_ON)
        .bind(tenant)
        .bind(ids)
        .fetch_all(&mut *conn)
        .await?
        .iter()
        .map(vote_from_row)
        .collect()
}

async fn escalation_of(
    conn: &mut PgConnection,
    tenant: &str,
    id: &str,
) -> Result<Option<Escalation>> {
    sqlx::query("SELECT * FROM escalations WHERE tenant = $1 AND proposal_id = $2")
        .bind(tenant)
        .bind(id)
        .fetch_optional(&mut *conn)
        .await?
        .as_ref()
        .map(escalation_from_row)
        .transpose()
}

/// One proposal of `tenant` (locked, with `lock`) with its escalation and
/// votes; `None` without such a proposal.
async fn load(
    conn: &mut PgConnection,
    tenant: &str,
    id: &str,
    lock: bool,
) -> Result<Option<Found>> {
    let proposal = if lock {
        let row = sqlx::query(LOCK_PROPOSAL)
            .bind(tenant)
            .bind(id)
            .fetch_optional(&mut *conn)
            .await?;
        match row {
            None => None,
            Some(row) => {
                let mut proposal = proposal_from_row(&row)?;
                if proposal.state.is_terminal() {
                    proposal.decision = review::decision_of(conn, tenant, id).await?;
                }
                Some(proposal)
            }
        }
    } else {
        proposals::fetch(conn, tenant, id).await?
    };
    let Some(proposal) = proposal else {
        return Ok(None);
    };
    let escalation = escalation_of(conn, tenant, id).await?;
    let votes = votes_on(conn, tenant, &[id])
        .await?
        .into_iter()
        .map(|(_, vote)| vote)
        .collect();
    Ok(Some(Found {
        proposal,
        escalation,
        votes,
    }))
}

async fn insert_vote(conn: &mut PgConnection, tenant: &str, id: &str, vote: &Vote) -> Result<()> {
    sqlx::query(
        "INSERT INTO votes (tenant, proposal_id, person, person_key, key_id, verdict, comment, at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(tenant)
    .bind(id)
    .bind(&vote.person)
    .bind(person_key(vote))
    .bind(&vote.key_id)
    .bind(vote.verdict.as_str())
    .bind(&vote.comment)
    .bind(vote.at)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// `decide` re-checked, when it approves, against the facts as they are in
/// the transaction (`commit::final_approval`).
async fn recheck(conn: &mut PgConnection, proposal: &Proposal, decide: Decide) -> Result<Decide> {
    let tenant = proposal.tenant.as_str();
    let spec = GateSpec::from(&proposal.spec);
    let target = sqlx::query("SELECT * FROM targets WHERE tenant = $1 AND id = $2")
        .bind(tenant)
        .bind(&spec.target)
        .fetch_optional(&mut *conn)
        .await?;
    let sop: Option<(i64, bool)> = match &decide.decision.sop_id {
        Some(sop_id) => {
            sqlx::query_as("SELECT version, retired FROM sops WHERE tenant = $1 AND id = $2")
                .bind(tenant)
                .bind(sop_id)
                .fetch_optional(&mut *conn)
                .await?
        }
        None => None,
    };
    let cluster = match (&target, spec.blast_radius) {
        (Some(row), BlastRadius::Cluster) => target_from_row(row)?.cluster().map(str::to_owned),
        _ => None,
    };
    let query = review::candidates_query(
        spec.blast_radius == BlastRadius::TenantWide,
        cluster.is_some(),
    );
    let mut candidates = sqlx::query(&query)
        .bind(tenant)
        .bind([spec.target.as_str()])
        .bind(decide.opened_at);
    if let Some(cluster) = &cluster {
        candidates = candidates.bind([cluster.as_str()]);
    }
    let rows = candidates.fetch_all(&mut *conn).await?;
    decide.recheck(&spec, target.as_ref(), sop, &rows)
}

/// Writes `decide` for `proposal` (an approval re-checked first): the
/// decision, the state change (its event at commit) and any breaker trip.
async fn write(
    conn: &mut PgConnection,
    proposal: &Proposal,
    decide: Decide,
    now: Millis,
) -> Result<Decide> {
    let decide = if decide.approves() {
        recheck(conn, proposal, decide).await?
    } else {
        decide
    };
    review::write_decisions(conn, &proposal.tenant, &[decide.write()], now).await?;
    Ok(decide)
}

/// A page of tenant `$1`'s open escalations after (`$2`, `$3`), at most `$4`,
/// along `escalations_open`. Planned per run (`scope::CUSTOM_PLANS`): a plan
/// made without the tenant reads every tenant's open escalations (the other
/// partial index) and sorts them.
pub const OPEN_PAGE: &str = "SELECT * FROM escalations WHERE tenant = $1 AND closed_at IS NULL
       AND (opened_at, proposal_id COLLATE \"C\") > ($2, $3)
     ORDER BY opened_at, proposal_id COLLATE \"C\" LIMIT $4";

/// The open escalations run out by `$1`, the earliest first, at most `$2`
/// (read in the system scope).
pub const DUE: &str = "SELECT tenant, proposal_id FROM escalations
     WHERE closed_at IS NULL AND expires_at <= $1 ORDER BY expires_at LIMIT $2";

/// The earliest expires_at of any open escalation (system scope).
pub const NEXT_EXPIRY: &str = "SELECT MIN(expires_at) FROM escalations WHERE closed_at IS NULL";

/// Open escalations by tenant (system scope).
pub const OPEN_BY_TENANT: &str = "SELECT tenant, COUNT(*) FROM escalations WHERE closed_at IS NULL
     GROUP BY tenant ORDER BY tenant COLLATE \"C\"";

/// The votes on the proposals `$2` of tenant `$1`, in the order cast.
pub const VOTES_ON: &str =
    "SELECT * FROM votes WHERE tenant = $1 AND proposal_id = ANY($2) ORDER BY id";

/// How many VOTE events of tenant `$1`'s proposal `$2` follow its event `$3`
/// (a tenant cursor).
pub const VOTE_EVENTS_AFTER: &str = "SELECT COUNT(*) FROM events
     WHERE tenant = $1 AND proposal_id = $2 AND kind = 'VOTE' AND tenant_cursor > $3";

/// Up to `limit` open escalations of `tenant` after `after`, oldest opened
/// first, each with its proposal and votes.
async fn chunk(
    conn: &mut PgConnection,
    tenant: &str,
    after: Option<(Millis, String)>,
    limit: u32,
) -> Result<Vec<EscalationRecord>> {
    let (opened_at, after_id) = after.unwrap_or((Millis::MIN, String::new()));
    let rows = sqlx::query(OPEN_PAGE)
        .bind(tenant)
        .bind(opened_at)
        .bind(&after_id)
        .bind(i64::from(limit))
        .fetch_all(&mut *conn)
        .await?;
    let (ids, escalations) = escalation::page(&rows)?;
    let id_refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let proposals = sqlx::query(
        "SELECT * FROM proposals WHERE id = ANY($2) AND tenant IS NOT DISTINCT FROM $1",
    )
    .bind(tenant)
    .bind(&id_refs)
    .fetch_all(&mut *conn)
    .await?
    .iter()
    .map(|row| proposal_from_row(row).map(|p| (p.id.clone(), p)))
    .collect::<Result<HashMap<_, _>>>()?;
    let votes = votes_on(conn, tenant, &id_refs).await?;
    escalation::records(escalations, &ids, proposals, votes)
}

/// Expires one escalation of `tenant` in a transaction of its own; the state
/// it left the proposal in, or `None` when nothing was due (it was decided
/// or cancelled meanwhile).
async fn expire_one(
    pool: &sqlx::PgPool,
    tenant: &str,
    id: &str,
    now: Millis,
) -> Result<Option<ProposalState>> {
    let mut tx = scope::tenant(pool, tenant).await?;
    let Some(found) = load(&mut tx, tenant, id, true).await? else {
        return Ok(None);
    };
    let Some(decide) = escalation::expiry(&found, now) else {
        return Ok(None);
    };
    let decide = write(&mut tx, &found.proposal, decide, now).await?;
    tx.commit().await?;
    Ok(Some(decide.write().next))
}

/// Moves one tenant's REVIEWING proposals of `items` (`indices`) to
/// ESCALATED and stores their escalations, the rows locked in id order.
async fn open_tenant(
    conn: &mut PgConnection,
    tenant: &str,
    items: &[(ReviewKey, Escalation)],
    mut indices: Vec<usize>,
    now: Millis,
    out: &mut [Option<RecordOutcome>],
) -> Result<()> {
    indices.sort_by(|&a, &b| items[a].0.id.cmp(&items[b].0.id));
    for i in indices {
        let (key, opened) = &items[i];
        let row: Option<(String, String, String, String)> =
            sqlx::query_as(review::LOCK_FOR_DECISION)
                .bind(tenant)
                .bind(&key.id)
                .fetch_optional(&mut *conn)
                .await?;
        let (_, state, _, _) =
            row.ok_or_else(|| StoreError::NotFound(format!("proposal `{}`", key.id)))?;
        let outcome = escalation::opening(key, &state)?;
        if matches!(outcome, RecordOutcome::Recorded) {
            let moved = sqlx::query(
                "UPDATE proposals SET state = 'escalated', updated_at = $2
                 WHERE id = $3 AND (tenant, state) IS NOT DISTINCT FROM ($1, 'reviewing')",
            )
            .bind(tenant)
            .bind(now)
            .bind(&key.id)
            .execute(&mut *conn)
            .await?
            .rows_affected();
            if moved != 1 {
                return Err(StoreError::FailedPrecondition(
                    "proposals changed under their escalations".into(),
                ));
            }
            let row = EscalationRow::of(opened);
            sqlx::query(
                "INSERT INTO escalations (proposal_id, tenant, route_id, approvals_required,
                     approver_roles_json, opened_at, expires_at, gates_json, sop_id, sop_version,
                     rollback_path, reviewer, review_latency_ms, model_json)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)",
            )
            .bind(&key.id)
            .bind(tenant)
            .bind(&opened.route_id)
            .bind(i64::from(opened.approvals_required))
            .bind(&row.approver_roles_json)
            .bind(opened.opened_at)
            .bind(opened.expires_at)
            .bind(&row.gates_json)
            .bind(&opened.sop_id)
            .bind(opened.sop_version.map(i64::from))
            .bind(&opened.rollback_path)
            .bind(&opened.reviewer)
            .bind(i64::try_from(opened.review_latency_ms).unwrap_or(i64::MAX))
            .bind(&row.model_json)
            .execute(&mut *conn)
            .await?;
        }
        out[i] = Some(outcome);
    }
    Ok(())
}

#[async_trait]
impl Escalations for PostgresStore {
    /// One transaction for the batch, its scope switched per tenant group
    /// (tenants by name, rows by id: the order every writer locks in).
    #[tracing::instrument(name = "store.postgres.open_escalations", level = "debug", skip_all, fields(n = items.len()))]
    async fn open_escalations(
        &self,
        items: Vec<(ReviewKey, Escalation)>,
    ) -> Result<Vec<RecordOutcome>> {
        let groups = scope::by_tenant(&items, |(k, _)| k.tenant.as_str());
        let Some((first, _)) = groups.first() else {
            return Ok(Vec::new());
        };
        let mut scoped = scope::TenantScope::default();
        let mut tx = scoped.begin(&self.pool, first).await?;
        let now = now_ms();
        let mut out: Vec<Option<RecordOutcome>> = vec![None; items.len()];
        for (tenant, indices) in groups {
            scoped.enter(&mut tx, &tenant).await?;
            open_tenant(&mut tx, &tenant, &items, indices, now, &mut out).await?;
        }
        tx.commit().await?;
        let opened = items
            .iter()
            .zip(&out)
            .filter(|(_, o)| matches!(o, Some(RecordOutcome::Recorded)));
        for ((key, _), _) in opened {
            self.publish(StoreEvent::changed_to(
                &key.tenant,
                &key.id,
                ProposalState::Escalated,
            ));
        }
        Ok(out.into_iter().flatten().collect())
    }

    #[tracing::instrument(name = "store.postgres.list_escalations", skip(self))]
    async fn list_escalations(
        &self,
        tenant: &str,
        filter: &InboxFilter,
        after: Option<(Millis, String)>,
        limit: u32,
    ) -> Result<Vec<EscalationRecord>> {
        // Planned for the tenant (`OPEN_PAGE`): one plan for any tenant
        // reads every tenant's open escalations where one has many.
        let mut tx = scope::tenant_planned_per_run(&self.pool, tenant).await?;
        let mut scan = escalation::Scan::new(filter, after, limit);
        while let Some((after, n)) = scan.next() {
            scan.take(chunk(&mut tx, tenant, after, n).await?, n);
        }
        tx.commit().await?;
        Ok(scan.finish())
    }

    #[tracing::instrument(name = "store.postgres.get_escalation", skip(self))]
    async fn get_escalation(&self, tenant: &str, id: &str) -> Result<Option<EscalationRecord>> {
        let mut tx = scope::tenant(&self.pool, tenant).await?;
        let found = load(&mut tx, tenant, id, false).await?;
        tx.commit().await?;
        Ok(found.and_then(Found::record))
    }

    #[tracing::instrument(name = "store.postgres.escalation_at_event", skip(self))]
    async fn escalation_at_event(
        &self,
        tenant: &str,
        id: &str,
        cursor: u64,
    ) -> Result<Option<EscalationRecord>> {
        let mut tx = scope::tenant(&self.pool, tenant).await?;
        let Some(found) = load(&mut tx, tenant, id, false).await? else {
            return Ok(None);
        };
        let later: i64 = sqlx::query_scalar(VOTE_EVENTS_AFTER)
            .bind(tenant)
            .bind(id)
            .bind(i64::try_from(cursor).unwrap_or(i64::MAX))
            .fetch_one(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(found.record_at_event(later))
    }

    #[tracing::instrument(
        name = "store.postgres.cast_vote",
        level = "debug",
        skip(self, caller, ballot)
    )]
    async fn cast_vote(
        &self,
        caller: Caller<'_>,
        proposal_id: &str,
        ballot: Ballot<'_>,
        now: Millis,
    ) -> Result<std::result::Result<Voted, ResolveError>> {
        let tenant = caller.tenant;
        let mut tx = scope::tenant(&self.pool, tenant).await?;
        let Some(found) = load(&mut tx, tenant, proposal_id, true).await? else {
            return Ok(Err(ResolveError::NotFound(proposal_id.to_owned())));
        };
        let mut plan = escalation::plan_vote(&caller, &found, &ballot, now);
        if let Some(vote) = &plan.vote {
            insert_vote(&mut tx, tenant, proposal_id, vote).await?;
        }
        if let Some(decide) = plan.decide.take() {
            plan.decide = Some(write(&mut tx, &found.proposal, decide, now).await?);
        }
        tx.commit().await?;
        if plan.vote.is_some() {
            self.publish(StoreEvent::voted(tenant, proposal_id));
        }
        if let Some(decide) = &plan.decide {
            self.publish(StoreEvent::changed_to(
                tenant,
                proposal_id,
                decide.write().next,
            ));
        }
        Ok(plan.answer(found.proposal, now))
    }

    /// Finds what ran out across tenants (system scope, read only), then
    /// decides each in its tenant's scope, in a transaction of its own that
    /// re-reads it. One that fails is logged and left for the next pass.
    #[tracing::instrument(
        name = "store.postgres.expire_escalations",
        level = "debug",
        skip(self)
    )]
    async fn expire_escalations(&self, now: Millis, limit: u32) -> Result<Vec<ReviewKey>> {
        let mut tx = scope::system(&self.pool).await?;
        let due: Vec<(String, String)> = sqlx::query_as(DUE)
            .bind(now)
            .bind(i64::from(limit))
            .fetch_all(&mut *tx)
            .await?;
        tx.commit().await?;
        let mut keys = Vec::new();
        for (tenant, id) in due {
            match expire_one(&self.pool, &tenant, &id, now).await {
                Ok(Some(state)) => {
                    self.publish(StoreEvent::changed_to(&tenant, &id, state));
                    keys.push(ReviewKey { tenant, id });
                }
                Ok(None) => {}
                Err(error) => {
                    tracing::warn!(%tenant, proposal = %id, %error, "escalation not expired");
                }
            }
        }
        Ok(keys)
    }

    async fn next_expiry(&self) -> Result<Option<Millis>> {
        let mut tx = scope::system(&self.pool).await?;
        let next: Option<Millis> = sqlx::query_scalar(NEXT_EXPIRY).fetch_one(&mut *tx).await?;
        tx.commit().await?;
        Ok(next)
    }

    async fn open_escalations_by_tenant(&self) -> Result<Vec<(String, u64)>> {
        let mut tx = scope::system(&self.pool).await?;
        let rows: Vec<(String, i64)> = sqlx::query_as(OPEN_BY_TENANT).fetch_all(&mut *tx).await?;
        tx.commit().await?;
        Ok(rows
            .into_iter()
            .map(|(tenant, n)| (tenant, n.max(0) as u64))
            .collect())
    }
}
