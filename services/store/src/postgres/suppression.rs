//! Suppressed retries and operator breakers.

use async_trait::async_trait;
use countersign_domain::Millis;
use sqlx::PgConnection;

use super::{PostgresStore, scope};
use crate::{
    BreakerReset, RecentRejection, Result, ReviewKey, StoreError, StoreEvent, Suppressions, now_ms,
    recording::Breakers,
};

/// Tenant `$1`'s breaker rule, and the last reset of each of operators `$2`:
/// one row per operator.
const BREAKERS: &str = "SELECT o.operator, t.breaker_threshold, t.breaker_window_ms,
        COALESCE(r.reset_at, 0)
     FROM tenants AS t
     CROSS JOIN unnest($2::text[]) AS o(operator)
     LEFT JOIN breaker_resets AS r ON r.tenant = t.name AND r.operator = o.operator
     WHERE t.name = $1";

/// Tenant `$1`'s rejections by operators `$2` decided after `$3` (a range of
/// the partial index per operator).
#[doc(hidden)]
pub const REJECTIONS: &str = "SELECT operator, decided_at, id FROM proposals
     WHERE tenant = $1 AND operator = ANY($2) AND state = 'rejected' AND decided_at > $3";

/// Of `rejected` (one tenant's just-rejected proposals: id and operator),
/// those that trip their operator's breaker (`recording::Breakers::trips`).
/// One statement reads the rule and the operators' resets and, where the
/// breaker is on, one more their rejections of the window. Runs in the
/// tenant's scope, inside the transaction that records the rejections, after
/// it has taken the event log's lock: a rejection another transaction
/// committed first is counted.
pub async fn trips(
    conn: &mut PgConnection,
    tenant: &str,
    rejected: &[(&str, &str)],
    now: Millis,
) -> Result<Vec<String>> {
    let mut operators: Vec<&str> = rejected.iter().map(|(_, operator)| *operator).collect();
    operators.sort_unstable();
    operators.dedup();
    let rows = sqlx::query_as(BREAKERS)
        .bind(tenant)
        .bind(&operators)
        .fetch_all(&mut *conn)
        .await?;
    let Some(breakers) = Breakers::from_rows(rows) else {
        return Ok(Vec::new());
    };
    let Some(since) = breakers.rule.window_start(now) else {
        return Ok(Vec::new());
    };
    let rejections = sqlx::query_as(REJECTIONS)
        .bind(tenant)
        .bind(&operators)
        .bind(since)
        .fetch_all(&mut *conn)
        .await?;
    Ok(breakers.trips(rejections, rejected, now))
}

/// Logs BREAKER_TRIPPED for `ids` (of `tenant`, in that order), in its scope,
/// after the transaction's last row lock and its pending events (see
/// `scope::write_pending_events`).
pub async fn log_trips(
    conn: &mut PgConnection,
    tenant: &str,
    ids: &[String],
    now: Millis,
) -> Result<()> {
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    log_events(conn, "BREAKER_TRIPPED", tenant, &ids, now).await
}

/// Logs a `kind` event for each of `ids` (of `tenant`, in that order), with
/// the proposal's state as it is.
async fn log_events(
    conn: &mut PgConnection,
    kind: &str,
    tenant: &str,
    ids: &[&str],
    now: Millis,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO events (tenant, proposal_id, kind, state, created_at)
         SELECT p.tenant, p.id, $4, p.state, $3
         FROM unnest($2::text[]) WITH ORDINALITY AS j(id, ord)
         JOIN proposals AS p ON p.tenant = $1 AND p.id = j.id
         ORDER BY j.ord",
    )
    .bind(tenant)
    .bind(ids)
    .bind(now)
    .bind(kind)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

#[async_trait]
impl Suppressions for PostgresStore {
    #[tracing::instrument(name = "store.postgres.record_suppressed", skip_all, fields(proposals = counts.len()))]
    async fn record_suppressed(&self, counts: Vec<(ReviewKey, u64)>) -> Result<()> {
        let now = now_ms();
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
        let Some((first, _, _)) = groups.first() else {
            return Ok(());
        };
        let mut scoped = scope::TenantScope::default();
        let mut tx = scoped.begin(&self.pool, first).await?;
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
            log_events(&mut tx, "SUPPRESSED", tenant, ids, now).await?;
        }
        tx.commit().await?;
        // Wake the fan-out: the SUPPRESSED events are in the log.
        self.publish(StoreEvent::suppressed());
        Ok(())
    }

    #[tracing::instrument(name = "store.postgres.reset_breaker", skip(self))]
    async fn reset_breaker(&self, tenant: &str, operator: &str) -> Result<()> {
        let mut tx = scope::tenant(&self.pool, tenant).await?;
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
    async fn breaker_resets(&self, since: Millis) -> Result<Vec<BreakerReset>> {
        let mut tx = scope::system(&self.pool).await?;
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
    async fn rejections_since(&self, since: Millis) -> Result<Vec<RecentRejection>> {
        let mut tx = scope::system(&self.pool).await?;
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
}
