//! Group commit for submissions on PostgreSQL. Every transaction that appends
//! events holds the event log's lock through its commit (commit-ordered
//! cursors, migrations/postgres/0002 and 0010), so one transaction per
//! submission made submissions queue on that lock one commit at a time.
//! Submissions that arrive together share one transaction: the lock is taken
//! once, each tenant's proposals go in with one multi-row INSERT, and one
//! commit answers them all. Each caller still hears back only after the
//! commit: OK means the row is durable. Each tenant's submissions have a
//! committer of their own (`Lanes::PerTenant`): a tenant's group commits
//! beside the others', never behind them.
//!
//! A tenant's submissions commit one transaction at a time across every
//! replica ([`proposals::lock_submissions`]), so a submission reviewed in its
//! own transaction (`at_submission`) reads, under that lock, every earlier
//! submission of its tenant as committed, and no later one commits before it
//! is decided: two overlapping operations submitted side by side to two
//! replicas are decided as if one writer took them in turn.
//!
//! A database error anywhere in a group rolls the group back and its
//! submissions are then tried one transaction each, queued for the reviewers,
//! so a bad submission fails alone and nothing is decided on facts the group
//! could not read.

use std::collections::HashSet;

use sqlx::{PgConnection, PgPool};

use super::{proposals, review, scope};
use crate::at_submission::{self, InOrder};
use crate::facts;
use crate::group_commit::{Group, Inserted, Lanes, Submitter};
use crate::recording::Write;
use crate::types::Submission;
use crate::{Result, StoreError, StoreEvent, SubmitOutcome};
use countersign_domain::{Millis, Proposal, ProposalState, gates::ReviewFacts};

/// Starts the committer on the pool.
pub fn start(pool: PgPool) -> Submitter {
    Submitter::start(Lanes::PerTenant, move |group, _| {
        let pool = pool.clone();
        async move { commit(&pool, group).await }
    })
}

#[tracing::instrument(name = "store.postgres.commit_proposals", level = "debug", skip_all, fields(n = group.len()))]
async fn commit(pool: &PgPool, group: Group) {
    let (submissions, replies): (Vec<Submission>, Vec<_>) = group.into_iter().unzip();
    match together(pool, &submissions).await {
        Ok(results) => {
            for (result, reply) in results.into_iter().zip(replies) {
                let _ = reply.send(result);
            }
        }
        Err(error) => {
            if submissions.len() > 1 {
                tracing::debug!(%error, n = submissions.len(), "group submit failed; one by one");
            }
            for (submission, reply) in submissions.into_iter().zip(replies) {
                let queued = Submission {
                    new: submission.new,
                    review: None,
                };
                let _ = reply.send(alone(pool, &queued).await);
            }
        }
    }
}

/// The whole group in one transaction; `Err` when it did not commit.
async fn together(pool: &PgPool, submissions: &[Submission]) -> Result<Vec<Inserted>> {
    let groups = scope::by_tenant(submissions, |s| s.new.tenant.as_str());
    let Some((first, _)) = groups.first() else {
        return Ok(Vec::new());
    };
    // Planned once: the writes are reads and writes by key; a review's
    // facts switch to plans for their parameters and back (`facts_of`).
    let mut scoped = scope::TenantScope::planned_once();
    let mut tx = scoped.begin(pool, first).await?;
    let now = crate::now_ms();
    let mut results: Vec<Option<Inserted>> = (0..submissions.len()).map(|_| None).collect();
    let mut reviews: Vec<(String, InOrder)> = Vec::with_capacity(groups.len());
    for (tenant, indices) in groups {
        scoped.enter(&mut tx, &tenant).await?;
        proposals::lock_submissions(&mut tx, &tenant).await?;
        let group: Vec<&Submission> = indices.iter().map(|&i| &submissions[i]).collect();
        let (answers, in_order) = tenant_group(&mut tx, &tenant, &group, now).await?;
        for (i, answer) in indices.into_iter().zip(answers) {
            results[i] = Some(answer);
        }
        reviews.push((tenant, in_order));
    }
    // Every row lock is held: the decisions go last (the event log's lock).
    let writes: Vec<(&str, Vec<Write<'_>>)> = reviews
        .iter()
        .map(|(tenant, in_order)| (tenant.as_str(), in_order.writes()))
        .filter(|(_, writes)| !writes.is_empty())
        .collect();
    if !writes.is_empty() {
        review::write_prepared(&mut tx, &mut scoped, &writes, now).await?;
    }
    tx.commit().await?;
    for (_, in_order) in &reviews {
        in_order.committed();
    }
    Ok(results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(StoreError::Unavailable("not submitted".into()))))
        .collect())
}

/// One submission in a transaction of its own.
#[tracing::instrument(
    name = "store.postgres.insert_proposal",
    level = "debug",
    skip_all,
    fields(tenant = %submission.new.tenant, proposal_id = %submission.new.id)
)]
async fn alone(pool: &PgPool, submission: &Submission) -> Inserted {
    let tenant = &submission.new.tenant;
    let mut tx = scope::tenant(pool, tenant).await?;
    proposals::lock_submissions(&mut tx, tenant).await?;
    let (mut answers, _) = tenant_group(&mut tx, tenant, &[submission], crate::now_ms()).await?;
    tx.commit().await?;
    answers
        .pop()
        .unwrap_or_else(|| Err(StoreError::Unavailable("not submitted".into())))
}

/// One tenant's submissions (the transaction in its scope, holding its
/// submissions' lock): reviewed in order where asked, on the facts read
/// before any is written, then inserted in one statement.
async fn tenant_group(
    conn: &mut PgConnection,
    tenant: &str,
    group: &[&Submission],
    now: Millis,
) -> Result<(Vec<Inserted>, InOrder)> {
    let facts = facts_of(conn, tenant, group, now).await?;
    let mut in_order = InOrder::default();
    let mut states = Vec::with_capacity(group.len());
    let mut stored = Vec::with_capacity(group.len());
    for (submission, facts) in group.iter().zip(facts) {
        let reviewed = in_order.review(submission, facts);
        states.push(reviewed.stored_as());
        stored.push(in_order.stored(submission, reviewed, now));
    }
    let rows: Vec<proposals::NewRow> = group
        .iter()
        .map(|s| proposals::NewRow::of(&s.new))
        .collect();
    let inserted = insert_rows(conn, tenant, group, &rows, &states, now).await?;
    let mut answers = Vec::with_capacity(group.len());
    for ((submission, row), proposal) in group.iter().zip(rows).zip(stored) {
        if inserted.contains(&row.id) {
            let event = StoreEvent::stored(tenant, &row.id, proposal.state);
            answers.push(Ok((SubmitOutcome::Created(proposal), Some(event))));
            continue;
        }
        if in_order.decides_any() {
            // A later review of the group counted this one as stored: the
            // group is queued instead, one submission at a time.
            return Err(StoreError::Unavailable(format!(
                "idempotency key of {} taken while its group was reviewed",
                row.id
            )));
        }
        match proposals::earlier(conn, &submission.new, &row).await {
            // The transaction is aborted: the whole group must not commit.
            Err(error @ StoreError::Database(_)) => return Err(error),
            answer => answers.push(answer),
        }
    }
    Ok((answers, in_order))
}

/// The facts of each submission of a group where any of them asks for a
/// review (every one's: a reviewed submission may overlap another of the
/// group), read before the group writes anything, each with the proposal it
/// would be; `None` for each where none does, or whose facts are malformed
/// (its review then leaves it PENDING). The reads are planned for their
/// parameters (`scope::CUSTOM_PLANS`, as the reviewers' are), and the
/// transaction's later statements once again (`scope::GENERIC_PLANS`).
async fn facts_of(
    conn: &mut PgConnection,
    tenant: &str,
    group: &[&Submission],
    now: Millis,
) -> Result<Vec<Option<(ReviewFacts, Proposal)>>> {
    let Some(proposals) = at_submission::proposals(group.iter().copied(), now) else {
        return Ok(vec![None; group.len()]);
    };
    scope::plan(&mut *conn, scope::CUSTOM_PLANS).await?;
    let mut batch = facts::Batch::new(&proposals);
    let all: Vec<usize> = (0..proposals.len()).collect();
    review::tenant_facts(&mut *conn, tenant, &all, &mut batch).await?;
    scope::plan(&mut *conn, scope::GENERIC_PLANS).await?;
    Ok(at_submission::with_facts(batch.finish(), proposals))
}

/// One field of every row, as the array `unnest` takes.
fn column<'a, T, V>(rows: &'a [T], field: impl Fn(&'a T) -> V) -> Vec<V> {
    rows.iter().map(field).collect()
}

/// One tenant's proposals in one statement, each in its state (PENDING, or
/// decided at its time, reviewed since `now`); their events are written at
/// commit (migration 0031). Answers
/// the ids inserted: a submission whose idempotency key is taken is left out.
async fn insert_rows(
    conn: &mut PgConnection,
    tenant: &str,
    group: &[&Submission],
    rows: &[proposals::NewRow],
    states: &[(ProposalState, Option<Millis>)],
    now: Millis,
) -> Result<HashSet<String>> {
    let news: Vec<&crate::NewProposal> = group.iter().map(|s| &s.new).collect();
    let inserted: Vec<String> = sqlx::query_scalar(
        "INSERT INTO proposals (id, tenant, action, class, target, blast_radius, operator,
             spec_json, spec_digest, idempotency_key, state, submitted_by, created_at, updated_at,
             trace_parent, submitted_key, submitted_by_person, review_started_at, decided_at)
         SELECT n.id, $1, n.action, n.class, n.target, n.blast_radius, n.operator, n.spec_json,
                n.spec_digest, n.idempotency_key, n.state, n.submitted_by, $2, $2, n.trace_parent,
                n.submitted_key, n.submitted_by_person,
                CASE WHEN n.decided_at IS NOT NULL THEN $2 END, n.decided_at
         FROM unnest($3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[],
                     $9::text[], $10::text[], $11::text[], $12::text[], $13::text[], $14::text[],
                     $15::text[], $16::text[], $17::bigint[])
              WITH ORDINALITY AS n(id, action, class, target, blast_radius, operator, spec_json,
                                   spec_digest, idempotency_key, submitted_by, trace_parent,
                                   submitted_key, submitted_by_person, state, decided_at, ord)
         ORDER BY n.ord
         ON CONFLICT (tenant, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
         RETURNING id",
    )
    .bind(tenant)
    .bind(now)
    .bind(column(rows, |r| r.id.as_str()))
    .bind(column(&news, |n| n.spec.action.as_str()))
    .bind(column(&news, |n| n.spec.class.as_str()))
    .bind(column(&news, |n| n.spec.target.as_str()))
    .bind(column(&news, |n| n.spec.blast_radius.as_str()))
    .bind(column(&news, |n| n.spec.operator.as_str()))
    .bind(column(rows, |r| r.spec_json.as_str()))
    .bind(column(rows, |r| r.digest.as_str()))
    .bind(column(rows, |r| r.key.as_deref()))
    .bind(column(&news, |n| n.submitted_by.as_str()))
    .bind(column(&news, |n| n.trace_parent.as_deref()))
    .bind(column(&news, |n| n.submitted_key.as_deref()))
    .bind(column(&news, |n| n.submitted_by_person.as_deref()))
    .bind(column(states, |(s, _)| s.as_str()))
    .bind(column(states, |(_, at)| *at))
    .fetch_all(&mut *conn)
    .await?;
    Ok(inserted.into_iter().collect())
}
