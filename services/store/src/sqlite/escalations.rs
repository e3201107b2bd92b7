//! Escalated proposals: opened by the reviewer, voted on by people, expired
//! by the janitor. Every write runs on the writer's thread, one job after
//! another: a vote's job reads the proposal, its escalation and its votes
//! and writes what the vote does in one transaction, so no other vote,
//! decision or cancel of any proposal comes between (two first votes are
//! decided one after the other: the second finds the first's decision).

use std::collections::HashMap;

use async_trait::async_trait;
use countersign_domain::{
    BlastRadius, Millis, Proposal, ProposalState,
    escalation::{Ballot, Caller, Escalation, InboxFilter, ResolveError, Vote, Voter},
    gates::GateSpec,
};
use rusqlite::{Connection, OptionalExtension, params};

use super::{SqliteStore, events, proposals, review};
use crate::escalation::{
    self, Decide, EscalationRow, Found, OwnedBallot, escalation_from_row, person_key, vote_from_row,
};
use crate::rows::{NamedRows, OwnedRow, proposal_from_row, target_from_row};
use crate::{
    EscalationRecord, Escalations, RecordOutcome, Result, ReviewKey, StoreError, StoreEvent, Voted,
    now_ms,
};

const INSERT_ESCALATION: &str = "
INSERT INTO escalations (proposal_id, tenant, route_id, approvals_required, approver_roles_json,
    opened_at, expires_at, gates_json, sop_id, sop_version, rollback_path, reviewer,
    review_latency_ms, model_json)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)";

/// Moves the REVIEWING proposals of `items` to ESCALATED and stores their
/// escalations, in one transaction; each fate by `commit::escalating`.
#[tracing::instrument(name = "store.sqlite.open_escalations", level = "debug", skip_all, fields(n = items.len()))]
pub fn open(
    conn: &mut Connection,
    items: &[(ReviewKey, Escalation)],
) -> Result<(Vec<RecordOutcome>, Vec<StoreEvent>)> {
    let tx = conn.transaction()?;
    let now = now_ms();
    let mut outcomes = Vec::with_capacity(items.len());
    let mut events = Vec::new();
    for (key, opened) in items {
        let state: Option<String> = tx
            .prepare_cached("SELECT state FROM proposals WHERE tenant = ? AND id = ?")?
            .query_row([&key.tenant, &key.id], |r| r.get(0))
            .optional()?;
        let state = state.ok_or_else(|| StoreError::NotFound(format!("proposal `{}`", key.id)))?;
        let outcome = escalation::opening(key, &state)?;
        if matches!(outcome, RecordOutcome::Recorded) {
            let moved = tx
                .prepare_cached(
                    "UPDATE proposals SET state = 'escalated', updated_at = ?3
                     WHERE tenant = ?1 AND id = ?2 AND state = 'reviewing'",
                )?
                .execute(params![key.tenant, key.id, now])?;
            if moved != 1 {
                return Err(StoreError::FailedPrecondition(
                    "proposals changed under their escalations".into(),
                ));
            }
            let row = EscalationRow::of(opened);
            tx.prepare_cached(INSERT_ESCALATION)?.execute(params![
                key.id,
                key.tenant,
                opened.route_id,
                opened.approvals_required,
                row.approver_roles_json,
                opened.opened_at,
                opened.expires_at,
                row.gates_json,
                opened.sop_id,
                opened.sop_version,
                opened.rollback_path,
                opened.reviewer,
                i64::try_from(opened.review_latency_ms).unwrap_or(i64::MAX),
                row.model_json,
            ])?;
            events.push(events::signal(
                &key.tenant,
                &key.id,
                ProposalState::Escalated,
            ));
        }
        outcomes.push(outcome);
    }
    tx.commit()?;
    Ok((outcomes, events))
}

/// The votes on the proposals `?2` (a JSON array) of tenant `?1`, in the
/// order cast.
const VOTES_ON: &str = "SELECT * FROM votes
     WHERE tenant = ?1 AND proposal_id IN (SELECT value FROM json_each(?2)) ORDER BY id";

/// A page of tenant `?1`'s open escalations after (`?2`, `?3`).
const PAGE: &str = "SELECT * FROM escalations WHERE tenant = ?1 AND closed_at IS NULL
       AND (opened_at, proposal_id) > (?2, ?3)
     ORDER BY opened_at, proposal_id LIMIT ?4";

/// The open escalations run out by `?1`, the earliest first.
const DUE: &str = "SELECT tenant, proposal_id FROM escalations
     WHERE closed_at IS NULL AND expires_at <= ?1 ORDER BY expires_at LIMIT ?2";

const NEXT_EXPIRY: &str = "SELECT MIN(expires_at) FROM escalations WHERE closed_at IS NULL";

/// How many VOTE events of tenant `?1`'s proposal `?2` follow its event
/// `?3` (a tenant cursor).
const VOTE_EVENTS_AFTER: &str = "SELECT COUNT(*) FROM events
     WHERE tenant = ?1 AND proposal_id = ?2 AND kind = 'VOTE' AND tenant_cursor > ?3";

/// The votes on `ids` (a JSON array) of `tenant`, each with its proposal,
/// in the order cast.
fn votes_on(conn: &Connection, tenant: &str, ids: &str) -> Result<Vec<(String, Vote)>> {
    conn.prepare_cached(VOTES_ON)?
        .named_rows([tenant, ids], |row| vote_from_row(row))
}

fn escalation_of(conn: &Connection, tenant: &str, id: &str) -> Result<Option<Escalation>> {
    conn.prepare_cached("SELECT * FROM escalations WHERE tenant = ? AND proposal_id = ?")?
        .named_row([tenant, id], |row| escalation_from_row(row))
}

/// One proposal of `tenant` with its escalation and votes, in the caller's
/// transaction; `None` without such a proposal.
fn load(conn: &Connection, tenant: &str, id: &str) -> Result<Option<Found>> {
    let Some(proposal) = proposals::get(conn, tenant, id)? else {
        return Ok(None);
    };
    let escalation = escalation_of(conn, tenant, id)?;
    let ids = serde_json::to_string(&[id]).expect("ids serialize");
    let votes = votes_on(conn, tenant, &ids)?
        .into_iter()
        .map(|(_, vote)| vote)
        .collect();
    Ok(Some(Found {
        proposal,
        escalation,
        votes,
    }))
}

fn insert_vote(conn: &Connection, tenant: &str, id: &str, vote: &Vote) -> Result<()> {
    conn.prepare_cached(
        "INSERT INTO votes (tenant, proposal_id, person, person_key, key_id, verdict, comment, at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?
    .execute(params![
        tenant,
        id,
        vote.person,
        person_key(vote),
        vote.key_id,
        vote.verdict.as_str(),
        vote.comment,
        vote.at
    ])?;
    Ok(())
}

/// `decide` re-checked, when it approves, against the facts as they are in
/// the transaction (`commit::final_approval`).
fn recheck(conn: &Connection, proposal: &Proposal, decide: Decide) -> Result<Decide> {
    let tenant = proposal.tenant.as_str();
    let spec = GateSpec::from(&proposal.spec);
    let mut target = conn.prepare_cached("SELECT * FROM targets WHERE tenant = ?1 AND id = ?2")?;
    target.raw_bind_parameter(1, tenant)?;
    target.raw_bind_parameter(2, spec.target.as_str())?;
    let target = OwnedRow::all(&mut target)?.pop();
    let sop: Option<(i64, bool)> = match &decide.decision.sop_id {
        Some(sop_id) => conn
            .prepare_cached("SELECT version, retired FROM sops WHERE tenant = ? AND id = ?")?
            .query_row([tenant, sop_id.as_str()], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?,
        None => None,
    };
    let cluster = match (&target, spec.blast_radius) {
        (Some(row), BlastRadius::Cluster) => target_from_row(row)?.cluster().map(str::to_owned),
        _ => None,
    };
    let candidates = review::candidates(
        conn,
        tenant,
        review::json_array(&[spec.target.as_str()]),
        decide.opened_at,
        spec.blast_radius == BlastRadius::TenantWide,
        cluster.as_slice(),
    )?;
    decide.recheck(&spec, target.as_ref(), sop, &candidates)
}

/// Writes `decide` for `proposal` (an approval re-checked first): the
/// decision, the state change and its event, and any breaker trip.
fn write(conn: &Connection, proposal: &Proposal, decide: Decide, now: Millis) -> Result<Decide> {
    let decide = if decide.approves() {
        recheck(conn, proposal, decide)?
    } else {
        decide
    };
    review::write_decisions(conn, &[decide.write()], now)?;
    Ok(decide)
}

type Cast = (std::result::Result<Voted, ResolveError>, Vec<StoreEvent>);

/// One vote, read and written in one transaction on the writer's thread.
#[tracing::instrument(
    name = "store.sqlite.cast_vote",
    level = "debug",
    skip(conn, caller, ballot)
)]
pub fn cast(
    conn: &mut Connection,
    caller: &Voter,
    id: &str,
    ballot: &OwnedBallot,
    now: Millis,
) -> Result<Cast> {
    let tx = conn.transaction()?;
    let tenant = caller.tenant.as_str();
    let Some(found) = load(&tx, tenant, id)? else {
        return Ok((Err(ResolveError::NotFound(id.to_owned())), Vec::new()));
    };
    let mut plan = escalation::plan_vote(&caller.caller(), &found, &ballot.get(), now);
    let mut events = Vec::new();
    if let Some(vote) = &plan.vote {
        insert_vote(&tx, tenant, id, vote)?;
        events.push(StoreEvent::voted(tenant, id));
    }
    if let Some(decide) = plan.decide.take() {
        let decide = write(&tx, &found.proposal, decide, now)?;
        events.push(events::signal(tenant, id, decide.write().next));
        plan.decide = Some(decide);
    }
    tx.commit()?;
    Ok((plan.answer(found.proposal, now), events))
}

/// Decides, as expired, up to `limit` escalations run out by `now`, each in
/// a transaction of its own that re-reads it. One that fails is logged and
/// left for the next pass; the others are decided.
#[tracing::instrument(name = "store.sqlite.expire_escalations", level = "debug", skip(conn))]
pub fn expire(
    conn: &mut Connection,
    now: Millis,
    limit: u32,
) -> Result<(Vec<ReviewKey>, Vec<StoreEvent>)> {
    let due: Vec<(String, String)> = conn
        .prepare_cached(DUE)?
        .query_map(params![now, limit], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let (mut keys, mut events) = (Vec::new(), Vec::new());
    for (tenant, id) in due {
        let expired = (|| {
            let tx = conn.transaction()?;
            let Some(found) = load(&tx, &tenant, &id)? else {
                return Ok(None);
            };
            let Some(decide) = escalation::expiry(&found, now) else {
                return Ok(None);
            };
            let decide = write(&tx, &found.proposal, decide, now)?;
            tx.commit()?;
            Ok::<_, StoreError>(Some(decide.write().next))
        })();
        match expired {
            Ok(Some(state)) => {
                events.push(events::signal(&tenant, &id, state));
                keys.push(ReviewKey { tenant, id });
            }
            Ok(None) => {}
            Err(error) => {
                tracing::warn!(%tenant, proposal = %id, %error, "escalation not expired");
            }
        }
    }
    Ok((keys, events))
}

/// The open escalations of `tenant` that `filter` keeps, after `after`,
/// oldest opened first, each with its proposal and votes, from one snapshot.
pub fn list(
    conn: &mut Connection,
    tenant: &str,
    filter: &InboxFilter,
    after: Option<(Millis, String)>,
    limit: u32,
) -> Result<Vec<EscalationRecord>> {
    let tx = conn.transaction()?;
    let mut scan = escalation::Scan::new(filter, after, limit);
    while let Some((after, n)) = scan.next() {
        scan.take(chunk(&tx, tenant, after, n)?, n);
    }
    Ok(scan.finish())
}

/// Up to `limit` open escalations of `tenant` after `after`, oldest opened
/// first, each with its proposal and votes.
fn chunk(
    tx: &Connection,
    tenant: &str,
    after: Option<(Millis, String)>,
    limit: u32,
) -> Result<Vec<EscalationRecord>> {
    let (opened_at, id) = after.unwrap_or((Millis::MIN, String::new()));
    let rows = {
        let mut page = tx.prepare_cached(PAGE)?;
        page.raw_bind_parameter(1, tenant)?;
        page.raw_bind_parameter(2, opened_at)?;
        page.raw_bind_parameter(3, &id)?;
        page.raw_bind_parameter(4, limit)?;
        OwnedRow::all(&mut page)?
    };
    let (ids, escalations) = escalation::page(&rows)?;
    let ids_json = serde_json::to_string(&ids).expect("ids serialize");
    let proposals = tx
        .prepare_cached(
            "SELECT * FROM proposals WHERE tenant = ?1 AND id IN (SELECT value FROM json_each(?2))",
        )?
        .named_rows([tenant, ids_json.as_str()], |row| {
            proposal_from_row(row).map(|p: Proposal| (p.id.clone(), p))
        })?
        .into_iter()
        .collect::<HashMap<_, _>>();
    let votes = votes_on(tx, tenant, &ids_json)?;
    escalation::records(escalations, &ids, proposals, votes)
}

/// One proposal's escalation, proposal and votes, from one snapshot.
pub fn get(conn: &mut Connection, tenant: &str, id: &str) -> Result<Option<EscalationRecord>> {
    let tx = conn.transaction()?;
    Ok(load(&tx, tenant, id)?.and_then(Found::record))
}

/// [`get`] with the votes as they stood at the tenant's event `cursor`.
pub fn get_at_event(
    conn: &mut Connection,
    tenant: &str,
    id: &str,
    cursor: u64,
) -> Result<Option<EscalationRecord>> {
    let tx = conn.transaction()?;
    let Some(found) = load(&tx, tenant, id)? else {
        return Ok(None);
    };
    let later: i64 = tx
        .prepare_cached(VOTE_EVENTS_AFTER)?
        .query_row(params![tenant, id, cursor], |r| r.get(0))?;
    Ok(found.record_at_event(later))
}

pub fn next_expiry(conn: &Connection) -> Result<Option<Millis>> {
    Ok(conn
        .prepare_cached(NEXT_EXPIRY)?
        .query_row([], |r| r.get(0))?)
}

pub fn open_by_tenant(conn: &Connection) -> Result<Vec<(String, u64)>> {
    conn.prepare_cached(
        "SELECT tenant, COUNT(*) FROM escalations WHERE closed_at IS NULL
         GROUP BY tenant ORDER BY tenant",
    )?
    .query_map([], |r| Ok((r.get(0)?, r.get::<_, i64>(1)?.max(0) as u64)))?
    .collect::<rusqlite::Result<_>>()
    .map_err(Into::into)
}

#[async_trait]
impl Escalations for SqliteStore {
    async fn open_escalations(
        &self,
        items: Vec<(ReviewKey, Escalation)>,
    ) -> Result<Vec<RecordOutcome>> {
        let (outcomes, events) = self.write(move |conn| open(conn, &items)).await?;
        for event in events {
            self.publish(Some(event));
        }
        Ok(outcomes)
    }

    async fn list_escalations(
        &self,
        tenant: &str,
        filter: &InboxFilter,
        after: Option<(Millis, String)>,
        limit: u32,
    ) -> Result<Vec<EscalationRecord>> {
        let (tenant, filter) = (tenant.to_owned(), filter.clone());
        self.read(move |conn| list(conn, &tenant, &filter, after, limit))
            .await
    }

    async fn get_escalation(&self, tenant: &str, id: &str) -> Result<Option<EscalationRecord>> {
        let (tenant, id) = (tenant.to_owned(), id.to_owned());
        self.read(move |conn| get(conn, &tenant, &id)).await
    }

    async fn escalation_at_event(
        &self,
        tenant: &str,
        id: &str,
        cursor: u64,
    ) -> Result<Option<EscalationRecord>> {
        let (tenant, id) = (tenant.to_owned(), id.to_owned());
        self.read(move |conn| get_at_event(conn, &tenant, &id, cursor))
            .await
    }

    async fn cast_vote(
        &self,
        caller: Caller<'_>,
        proposal_id: &str,
        ballot: Ballot<'_>,
        now: Millis,
    ) -> Result<std::result::Result<Voted, ResolveError>> {
        let (caller, ballot) = (Voter::of(&caller), OwnedBallot::of(&ballot));
        let id = proposal_id.to_owned();
        let (voted, events) = self
            .write(move |conn| cast(conn, &caller, &id, &ballot, now))
            .await?;
        for event in events {
            self.publish(Some(event));
        }
        Ok(voted)
    }

    async fn expire_escalations(&self, now: Millis, limit: u32) -> Result<Vec<ReviewKey>> {
        let (keys, events) = self.write(move |conn| expire(conn, now, limit)).await?;
        for event in events {
            self.publish(Some(event));
        }
        Ok(keys)
    }

    async fn next_expiry(&self) -> Result<Option<Millis>> {
        self.read(|conn| next_expiry(conn)).await
    }

    async fn open_escalations_by_tenant(&self) -> Result<Vec<(String, u64)>> {
        self.read(|conn| open_by_tenant(conn)).await
    }
}

#[cfg(test)]
mod tests {
    use crate::sqlite::tests::plan_of;

    /// The steps of `query`'s plan that read `table`.
    async fn reads(query: &str, table: &str) -> Vec<String> {
        plan_of(query)
            .await
            .into_iter()
            .filter(|s| s.contains(table))
            .collect()
    }

    /// The inbox, the janitor's scan and its timer, and a proposal's votes
    /// are each one seek: however many escalations closed before them.
    #[tokio::test]
    async fn open_escalations_and_votes_are_found_by_index() {
        let cases = [
            (
                super::PAGE,
                "escalations",
                "SEARCH escalations USING INDEX escalations_open (tenant=? AND (opened_at,proposal_id)>(?,?))",
            ),
            (
                super::DUE,
                "escalations",
                "SEARCH escalations USING INDEX escalations_expiring (expires_at<?)",
            ),
            (
                super::NEXT_EXPIRY,
                "escalations",
                "SEARCH escalations USING INDEX escalations_expiring",
            ),
            (
                super::VOTES_ON,
                "votes",
                "SEARCH votes USING INDEX votes_one_per_person (proposal_id=?)",
            ),
            (
                super::VOTE_EVENTS_AFTER,
                "events",
                "SEARCH events USING COVERING INDEX events_votes_by_proposal (tenant=? AND proposal_id=? AND tenant_cursor>?)",
            ),
        ];
        for (query, table, step) in cases {
            assert_eq!(reads(query, table).await, [step], "{query}");
        }
    }
}
