//! Suppressed retries and operator breakers.

use countersign_domain::Millis;
use sqlx::SqlitePool;

use crate::{BreakerReset, RecentRejection, Result, ReviewKey, StoreError, now_ms};

#[tracing::instrument(name = "store.sqlite.record_suppressed", skip_all, fields(proposals = counts.len()))]
pub async fn record(writer: &SqlitePool, counts: Vec<(ReviewKey, u64)>) -> Result<()> {
    if counts.is_empty() {
        return Ok(());
    }
    let batch: Vec<serde_json::Value> = counts
        .iter()
        .map(|(k, n)| serde_json::json!([k.tenant, k.id, n]))
        .collect();
    let batch = serde_json::Value::Array(batch).to_string();
    let now = now_ms();
    let mut tx = writer.begin().await?;
    sqlx::query(
        "UPDATE proposals SET suppressed_retries = suppressed_retries + batch.n
         FROM (SELECT json_extract(value, '$[0]') AS tenant, json_extract(value, '$[1]') AS id,
                      json_extract(value, '$[2]') AS n FROM json_each(?1)) AS batch
         WHERE proposals.tenant = batch.tenant AND proposals.id = batch.id",
    )
    .bind(&batch)
    .execute(&mut *tx)
    .await?;
    sqlx::query(
        "INSERT INTO events (tenant, proposal_id, kind, state, created_at)
         SELECT p.tenant, p.id, 'SUPPRESSED', p.state, ?2
         FROM json_each(?1) AS j JOIN proposals AS p
           ON p.tenant = json_extract(j.value, '$[0]') AND p.id = json_extract(j.value, '$[1]')",
    )
    .bind(&batch)
    .bind(now)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(())
}

/// Logs BREAKER_TRIPPED for each just-rejected proposal that is exactly its
/// operator's threshold-th rejection in the tenant's window since the last
/// reset. Runs inside the transaction that records the rejections.
pub fn log_trips(conn: &rusqlite::Connection, rejected: &[[&str; 2]], now: Millis) -> Result<()> {
    if rejected.is_empty() {
        return Ok(());
    }
    conn.prepare_cached(
        "INSERT INTO events (tenant, proposal_id, kind, state, created_at)
         SELECT p.tenant, p.id, 'BREAKER_TRIPPED', p.state, ?2
         FROM json_each(?1) AS j
         CROSS JOIN proposals AS p
           ON p.id = json_extract(j.value, '$[1]') AND p.tenant = json_extract(j.value, '$[0]')
         CROSS JOIN tenants AS t ON t.name = p.tenant
         WHERE p.state = 'rejected'
           -- CASE: the count runs only where the breaker is on, and walks only
           -- the operator's recent rejections (a partial index).
           AND CASE WHEN t.breaker_threshold > 0 THEN
                 (SELECT COUNT(*) FROM proposals AS q INDEXED BY proposals_operator_rejections
                  WHERE q.tenant = p.tenant AND q.operator = p.operator AND q.state = 'rejected'
                    AND q.decided_at > MAX(?2 - t.breaker_window_ms,
                        COALESCE((SELECT r.reset_at FROM breaker_resets AS r
                                  WHERE r.tenant = p.tenant AND r.operator = p.operator), 0))
                    AND (q.decided_at < p.decided_at OR (q.decided_at = p.decided_at AND q.id <= p.id)))
               ELSE -1 END = t.breaker_threshold",
    )?
    .execute(rusqlite::params![
        serde_json::to_string(rejected).map_err(|e| StoreError::Corrupt(e.to_string()))?,
        now
    ])?;
    Ok(())
}

pub async fn reset(writer: &SqlitePool, tenant: &str, operator: &str) -> Result<()> {
    let exists: Option<i64> = sqlx::query_scalar("SELECT 1 FROM tenants WHERE name = ?")
        .bind(tenant)
        .fetch_optional(writer)
        .await?;
    if exists.is_none() {
        return Err(StoreError::NotFound(format!("tenant `{tenant}`")));
    }
    sqlx::query(
        "INSERT INTO breaker_resets (tenant, operator, reset_at) VALUES (?, ?, ?)
         ON CONFLICT (tenant, operator) DO UPDATE SET reset_at = excluded.reset_at",
    )
    .bind(tenant)
    .bind(operator)
    .bind(now_ms())
    .execute(writer)
    .await?;
    Ok(())
}

pub async fn resets(reader: &SqlitePool, since: Millis) -> Result<Vec<BreakerReset>> {
    let rows: Vec<(String, String, Millis)> = sqlx::query_as(
        "SELECT tenant, operator, reset_at FROM breaker_resets
         WHERE reset_at >= ? ORDER BY reset_at",
    )
    .bind(since)
    .fetch_all(reader)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(tenant, operator, reset_at)| BreakerReset {
            tenant,
            operator,
            reset_at,
        })
        .collect())
}

pub async fn rejections(reader: &SqlitePool, since: Millis) -> Result<Vec<RecentRejection>> {
    let rows: Vec<(String, String, Millis)> = sqlx::query_as(
        "SELECT tenant, operator, decided_at FROM proposals
         WHERE state = 'rejected' AND decided_at >= ? ORDER BY decided_at",
    )
    .bind(since)
    .fetch_all(reader)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(tenant, operator, decided_at)| RecentRejection {
            tenant,
            operator,
            decided_at,
        })
        .collect())
}
