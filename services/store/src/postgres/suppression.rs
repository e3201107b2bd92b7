//! Suppressed retries and operator breakers.

use countersign_domain::Millis;
use sqlx::{PgConnection, PgPool};

use super::scope;
use crate::{BreakerReset, RecentRejection, Result, ReviewKey, StoreError, now_ms};

#[tracing::instrument(name = "store.postgres.record_suppressed", skip_all, fields(proposals = counts.len()))]
pub async fn record(pool: &PgPool, counts: Vec<(ReviewKey, u64)>) -> Result<()> {
    if counts.is_empty() {
        return Ok(());
    }
    let now = now_ms();
    let mut tx = pool.begin().await?;
    let groups: Vec<(String, Vec<&str>, Vec<i64>)> =
        scope::by_tenant(&counts, |(k, _)| k.tenant.as_str())
            .into_iter()
            .map(|(tenant, indices)| {
                let ids = indices.iter().map(|&i| counts[i].0.id.as_str()).collect();
                let ns = indices
                    .iter()
                    .map(|&i| i64::try_from(counts[i].1).unwrap_or(i64::MAX))
                    .collect();
                (tenant, ids, ns)
            })
            .collect();
    let mut scoped = scope::TenantScope::default();
    // Every row lock first, then the events (the event log's lock must be a
    // transaction's last; see migrations/postgres/0010).
    for (tenant, ids, ns) in &groups {
        scoped.enter(&mut tx, tenant).await?;
        sqlx::query(
            "UPDATE proposals SET suppressed_retries = suppressed_retries + b.n
             FROM unnest($2::text[], $3::bigint[]) AS b(id, n)
             WHERE proposals.tenant = $1 AND proposals.id = b.id AND proposals.id IN (
                 SELECT id FROM proposals WHERE tenant = $1 AND id = ANY($2)
                 ORDER BY id FOR UPDATE)",
        )
        .bind(tenant)
        .bind(ids)
        .bind(ns)
        .execute(&mut *tx)
        .await?;
    }
    for (tenant, ids, _) in &groups {
        scoped.enter(&mut tx, tenant).await?;
        sqlx::query(
            "INSERT INTO events (tenant, proposal_id, kind, state, created_at)
             SELECT p.tenant, p.id, 'SUPPRESSED', p.state, $3
             FROM unnest($2::text[]) WITH ORDINALITY AS b(id, ord)
             JOIN proposals AS p ON p.tenant = $1 AND p.id = b.id
             ORDER BY b.ord",
        )
        .bind(tenant)
        .bind(ids)
        .bind(now)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(())
}

/// Logs BREAKER_TRIPPED for each just-rejected proposal (of `tenant`) that is
/// exactly its operator's threshold-th rejection in the tenant's window since
/// the last reset. Runs inside the transaction that records the rejections, in
/// the tenant's scope, after its last row lock and its pending events (see
/// `scope::write_pending_events`).
pub async fn log_trips(
    conn: &mut PgConnection,
    tenant: &str,
    rejected: &[String],
    now: Millis,
) -> Result<()> {
    if rejected.is_empty() {
        return Ok(());
    }
    sqlx::query(
        "INSERT INTO events (tenant, proposal_id, kind, state, created_at)
         SELECT p.tenant, p.id, 'BREAKER_TRIPPED', p.state, $3
         FROM unnest($2::text[]) WITH ORDINALITY AS j(id, ord)
         JOIN proposals AS p ON p.tenant = $1 AND p.id = j.id
         JOIN tenants AS t ON t.name = p.tenant
         WHERE p.state = 'rejected'
           -- CASE: the count runs only where the breaker is on, and walks only
           -- the operator's recent rejections (a partial index).
           AND CASE WHEN t.breaker_threshold > 0 THEN
                 (SELECT COUNT(*) FROM proposals AS q
                  WHERE q.tenant = p.tenant AND q.operator = p.operator AND q.state = 'rejected'
                    AND q.decided_at > GREATEST($3 - t.breaker_window_ms,
                        COALESCE((SELECT r.reset_at FROM breaker_resets AS r
                                  WHERE r.tenant = p.tenant AND r.operator = p.operator), 0))
                    AND (q.decided_at < p.decided_at
                         OR (q.decided_at = p.decided_at AND q.id COLLATE \"C\" <= p.id)))
               ELSE -1 END = t.breaker_threshold
         ORDER BY j.ord",
    )
    .bind(tenant)
    .bind(rejected)
    .bind(now)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

#[tracing::instrument(name = "store.postgres.reset_breaker", skip(pool))]
pub async fn reset(pool: &PgPool, tenant: &str, operator: &str) -> Result<()> {
    let mut tx = scope::tenant(pool, tenant).await?;
    let exists: Option<i32> = sqlx::query_scalar("SELECT 1 FROM tenants WHERE name = $1")
        .bind(tenant)
        .fetch_optional(&mut *tx)
        .await?;
    if exists.is_none() {
        return Err(StoreError::NotFound(format!("tenant `{tenant}`")));
    }
    sqlx::query(
        "INSERT INTO breaker_resets (tenant, operator, reset_at) VALUES ($1, $2, $3)
         ON CONFLICT (tenant, operator) DO UPDATE SET reset_at = excluded.reset_at",
    )
    .bind(tenant)
    .bind(operator)
    .bind(now_ms())
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(())
}

/// Every tenant's resets since `since` (the breaker rebuild at start).
pub async fn resets(pool: &PgPool, since: Millis) -> Result<Vec<BreakerReset>> {
    let mut tx = scope::system(pool).await?;
    let rows: Vec<(String, String, Millis)> = sqlx::query_as(
        "SELECT tenant, operator, reset_at FROM breaker_resets
         WHERE reset_at >= $1 ORDER BY reset_at",
    )
    .bind(since)
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(rows
        .into_iter()
        .map(|(tenant, operator, reset_at)| BreakerReset {
            tenant,
            operator,
            reset_at,
        })
        .collect())
}

/// Every tenant's rejections since `since` (the breaker rebuild at start).
pub async fn rejections(pool: &PgPool, since: Millis) -> Result<Vec<RecentRejection>> {
    let mut tx = scope::system(pool).await?;
    let rows: Vec<(String, String, Millis)> = sqlx::query_as(
        "SELECT tenant, operator, decided_at FROM proposals
         WHERE state = 'rejected' AND decided_at >= $1 ORDER BY decided_at",
    )
    .bind(since)
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(rows
        .into_iter()
        .map(|(tenant, operator, decided_at)| RecentRejection {
            tenant,
            operator,
            decided_at,
        })
        .collect())
}
