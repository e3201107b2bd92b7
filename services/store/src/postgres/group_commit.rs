//! Group commit for submissions on PostgreSQL. Every transaction that appends
//! events holds the event log's lock through its commit (commit-ordered
//! cursors, migrations/postgres/0002 and 0010), so one transaction per
//! submission made submissions queue on that lock one commit at a time.
//! Submissions that arrive together now share one transaction: the lock is
//! taken once, each tenant's proposals go in with one multi-row INSERT, and
//! one commit answers them all. Each caller still hears back only after the commit: OK means
//! the row is durable. Each tenant's submissions have a committer of their
//! own (`Lanes::PerTenant`): a tenant's group commits beside the others',
//! never behind them.
//!
//! A database error anywhere in a group rolls the group back and its
//! submissions are then tried one transaction each, so a bad submission fails
//! alone.

use sqlx::{PgConnection, PgPool};

use super::{proposals, scope};
use crate::group_commit::{Group, Inserted, Lanes, Submitter};
use crate::{NewProposal, Result, StoreError};

/// Starts the committer on the pool.
pub fn start(pool: PgPool) -> Submitter {
    Submitter::start(Lanes::PerTenant, move |group, _| {
        let pool = pool.clone();
        async move { commit(&pool, group).await }
    })
}

#[tracing::instrument(name = "store.postgres.commit_proposals", level = "debug", skip_all, fields(n = group.len()))]
async fn commit(pool: &PgPool, group: Group) {
    // Every submission is queued for the reviewers here (see
    // `PostgresStore::submit_reviewed`).
    let (news, replies): (Vec<NewProposal>, Vec<_>) = group
        .into_iter()
        .map(|(submission, reply)| (submission.new, reply))
        .unzip();
    match together(pool, &news).await {
        Ok(results) => {
            for (result, reply) in results.into_iter().zip(replies) {
                let _ = reply.send(result);
            }
        }
        Err(error) => {
            if news.len() > 1 {
                tracing::debug!(%error, n = news.len(), "group submit failed; one by one");
            }
            for (new, reply) in news.into_iter().zip(replies) {
                let _ = reply.send(proposals::insert_one(pool, new).await);
            }
        }
    }
}

/// The whole group in one transaction; `Err` when it did not commit.
async fn together(pool: &PgPool, news: &[NewProposal]) -> Result<Vec<Inserted>> {
    let groups = scope::by_tenant(news, |n| n.tenant.as_str());
    let Some((first, _)) = groups.first() else {
        return Ok(Vec::new());
    };
    let mut scoped = scope::TenantScope::default();
    let mut tx = scoped.begin(pool, first).await?;
    let mut results: Vec<Option<Inserted>> = (0..news.len()).map(|_| None).collect();
    for (tenant, indices) in groups {
        scoped.enter(&mut tx, &tenant).await?;
        let group: Vec<&NewProposal> = indices.iter().map(|&i| &news[i]).collect();
        for (i, result) in indices.into_iter().zip(insert_many(&mut tx, &group).await?) {
            results[i] = Some(result);
        }
    }
    tx.commit().await?;
    Ok(results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(StoreError::Unavailable("not submitted".into()))))
        .collect())
}

/// One field of every row, as the array `unnest` takes.
fn column<'a, T, V>(rows: &'a [T], field: impl Fn(&'a T) -> V) -> Vec<V> {
    rows.iter().map(field).collect()
}

/// One tenant's proposals in one statement (the transaction in its scope;
/// their events are written at commit). A submission whose idempotency key is taken is
/// answered from the earlier proposal, as a single insert would be.
async fn insert_many(conn: &mut PgConnection, news: &[&NewProposal]) -> Result<Vec<Inserted>> {
    let rows: Vec<proposals::NewRow> = news.iter().map(|n| proposals::NewRow::of(n)).collect();
    let now = crate::now_ms();
    let inserted: Vec<String> = sqlx::query_scalar(
        "INSERT INTO proposals (id, tenant, action, class, target, blast_radius, operator,
             spec_json, spec_digest, idempotency_key, state, submitted_by, created_at, updated_at,
             trace_parent, submitted_key, submitted_by_person)
         SELECT n.id, $1, n.action, n.class, n.target, n.blast_radius, n.operator, n.spec_json,
                n.spec_digest, n.idempotency_key, 'pending', n.submitted_by, $2, $2, n.trace_parent,
                n.submitted_key, n.submitted_by_person
         FROM unnest($3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[],
                     $9::text[], $10::text[], $11::text[], $12::text[], $13::text[], $14::text[],
                     $15::text[])
              WITH ORDINALITY AS n(id, action, class, target, blast_radius, operator, spec_json,
                                   spec_digest, idempotency_key, submitted_by, trace_parent,
                                   submitted_key, submitted_by_person, ord)
         ORDER BY n.ord
         ON CONFLICT (tenant, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
         RETURNING id",
    )
    .bind(&news[0].tenant)
    .bind(now)
    .bind(column(&rows, |r| r.id.as_str()))
    .bind(column(news, |n| n.spec.action.as_str()))
    .bind(column(news, |n| n.spec.class.as_str()))
    .bind(column(news, |n| n.spec.target.as_str()))
    .bind(column(news, |n| n.spec.blast_radius.as_str()))
    .bind(column(news, |n| n.spec.operator.as_str()))
    .bind(column(&rows, |r| r.spec_json.as_str()))
    .bind(column(&rows, |r| r.digest.as_str()))
    .bind(column(&rows, |r| r.key.as_deref()))
    .bind(column(news, |n| n.submitted_by.as_str()))
    .bind(column(news, |n| n.trace_parent.as_deref()))
    .bind(column(news, |n| n.submitted_key.as_deref()))
    .bind(column(news, |n| n.submitted_by_person.as_deref()))
    .fetch_all(&mut *conn)
    .await?;
    let inserted: std::collections::HashSet<String> = inserted.into_iter().collect();
    let mut results = Vec::with_capacity(news.len());
    for (new, row) in news.iter().zip(rows) {
        if inserted.contains(&row.id) {
            results.push(Ok(proposals::created((*new).clone(), row.id, now)));
            continue;
        }
        match proposals::earlier(conn, new, &row).await {
            // The transaction is aborted: the whole group must not commit.
            Err(error @ StoreError::Database(_)) => return Err(error),
            answer => results.push(answer),
        }
    }
    Ok(results)
}
