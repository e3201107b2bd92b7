//! Suppressed retries and operator breakers.

use async_trait::async_trait;
use countersign_domain::Millis;
use rusqlite::{Connection, params};

use super::SqliteStore;
use crate::{
    BreakerReset, RecentRejection, Result, ReviewKey, StoreError, StoreEvent, Suppressions,
    facts::by_tenant,
    now_ms,
    recording::{Breakers, Write},
};

#[tracing::instrument(name = "store.sqlite.record_suppressed", skip_all, fields(proposals = counts.len()))]
pub fn record(conn: &mut Connection, counts: Vec<(ReviewKey, u64)>) -> Result<()> {
    if counts.is_empty() {
        return Ok(());
    }
    let batch: Vec<serde_json::Value> = counts
        .iter()
        .map(|(k, n)| serde_json::json!([k.tenant, k.id, n]))
        .collect();
    let batch = serde_json::Value::Array(batch).to_string();
    let now = now_ms();
    let tx = conn.transaction()?;
    tx.prepare_cached(
        "UPDATE proposals SET suppressed_retries = suppressed_retries + batch.n
         FROM (SELECT json_extract(value, '$[0]') AS tenant, json_extract(value, '$[1]') AS id,
                      json_extract(value, '$[2]') AS n FROM json_each(?1)) AS batch
         WHERE proposals.tenant = batch.tenant AND proposals.id = batch.id",
    )?
    .execute([&batch])?;
    tx.prepare_cached(
        "INSERT INTO events (tenant, proposal_id, kind, state, created_at)
         SELECT p.tenant, p.id, 'SUPPRESSED', p.state, ?2
         FROM json_each(?1) AS j JOIN proposals AS p
           ON p.tenant = json_extract(j.value, '$[0]') AND p.id = json_extract(j.value, '$[1]')",
    )?
    .execute(params![batch, now])?;
    tx.commit()?;
    Ok(())
}

/// Tenant `?1`'s breaker rule, and the last reset of each of operators `?2`
/// (a JSON array): one row per operator.
const BREAKERS: &str = "
SELECT o.value, t.breaker_threshold, t.breaker_window_ms, COALESCE(r.reset_at, 0)
FROM tenants AS t
CROSS JOIN (SELECT DISTINCT value FROM json_each(?2)) AS o
LEFT JOIN breaker_resets AS r ON r.tenant = t.name AND r.operator = o.value
WHERE t.name = ?1";

/// Tenant `?1`'s rejections by operators `?2` (a JSON array) decided after
/// `?3`: one range of a partial index per operator.
const REJECTIONS: &str = "
SELECT operator, decided_at, id FROM proposals INDEXED BY proposals_operator_rejections
WHERE tenant = ?1 AND operator IN (SELECT value FROM json_each(?2)) AND state = 'rejected'
  AND decided_at > ?3";

/// Logs BREAKER_TRIPPED for each rejection among `writes` that trips its
/// operator's breaker (`recording::Breakers::trips`), inside the transaction
/// that records them, after their state changes. Per tenant, one statement
/// reads the rule and the operators' resets and, where the breaker is on, one
/// more their rejections of the window.
pub fn log_trips(conn: &Connection, writes: &[Write<'_>], now: Millis) -> Result<()> {
    let rejected: Vec<&Write<'_>> = writes.iter().filter(|w| w.rejects()).collect();
    // Indices into `rejected` of the rejections that trip.
    let mut tripped = Vec::new();
    for (tenant, indices) in by_tenant(&rejected, |w| w.key.tenant.as_str()) {
        let group: Vec<(&str, &str)> = indices
            .iter()
            .map(|&i| (rejected[i].key.id.as_str(), rejected[i].operator.as_str()))
            .collect();
        let operators: Vec<&str> = group.iter().map(|(_, operator)| *operator).collect();
        let operators = serde_json::to_string(&operators).expect("names serialize");
        let rows = conn
            .prepare_cached(BREAKERS)?
            .query_map(rusqlite::params![tenant, operators], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        let Some(breakers) = Breakers::from_rows(rows) else {
            continue;
        };
        let Some(since) = breakers.rule.window_start(now) else {
            continue;
        };
        let rejections = conn
            .prepare_cached(REJECTIONS)?
            .query_map(rusqlite::params![tenant, operators, since], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        let ids = breakers.trips(rejections, &group, now);
        tripped.extend(
            indices
                .into_iter()
                .filter(|&i| ids.contains(&rejected[i].key.id)),
        );
    }
    if tripped.is_empty() {
        return Ok(());
    }
    // In the batch's order.
    tripped.sort_unstable();
    let tripped: Vec<[&str; 2]> = tripped
        .into_iter()
        .map(|i| [rejected[i].key.tenant.as_str(), rejected[i].key.id.as_str()])
        .collect();
    conn.prepare_cached(
        "INSERT INTO events (tenant, proposal_id, kind, state, created_at)
         SELECT p.tenant, p.id, 'BREAKER_TRIPPED', p.state, ?2
         FROM json_each(?1) AS j
         CROSS JOIN proposals AS p
           ON p.id = json_extract(j.value, '$[1]') AND p.tenant = json_extract(j.value, '$[0]')",
    )?
    .execute(rusqlite::params![
        serde_json::to_string(&tripped).expect("keys serialize"),
        now
    ])?;
    Ok(())
}

pub fn reset(conn: &Connection, tenant: &str, operator: &str) -> Result<()> {
    let exists = conn
        .prepare_cached("SELECT 1 FROM tenants WHERE name = ?")?
        .exists([tenant])?;
    if !exists {
        return Err(StoreError::NotFound(format!("tenant `{tenant}`")));
    }
    conn.prepare_cached(
        "INSERT INTO breaker_resets (tenant, operator, reset_at) VALUES (?, ?, ?)
         ON CONFLICT (tenant, operator) DO UPDATE SET reset_at = excluded.reset_at",
    )?
    .execute(params![tenant, operator, now_ms()])?;
    Ok(())
}

pub fn resets(conn: &Connection, since: Millis) -> Result<Vec<BreakerReset>> {
    conn.prepare_cached(
        "SELECT tenant, operator, reset_at FROM breaker_resets
         WHERE reset_at >= ? ORDER BY reset_at",
    )?
    .query_map([since], |row| {
        Ok(BreakerReset {
            tenant: row.get(0)?,
            operator: row.get(1)?,
            reset_at: row.get(2)?,
        })
    })?
    .collect::<rusqlite::Result<_>>()
    .map_err(Into::into)
}

pub fn rejections(conn: &Connection, since: Millis) -> Result<Vec<RecentRejection>> {
    conn.prepare_cached(
        "SELECT tenant, operator, decided_at FROM proposals
         WHERE state = 'rejected' AND decided_at >= ? ORDER BY decided_at",
    )?
    .query_map([since], |row| {
        Ok(RecentRejection {
            tenant: row.get(0)?,
            operator: row.get(1)?,
            decided_at: row.get(2)?,
        })
    })?
    .collect::<rusqlite::Result<_>>()
    .map_err(Into::into)
}

#[async_trait]
impl Suppressions for SqliteStore {
    async fn record_suppressed(&self, counts: Vec<(ReviewKey, u64)>) -> Result<()> {
        self.write(move |conn| record(conn, counts)).await?;
        // Wake the fan-out: the SUPPRESSED events are in the log.
        self.publish(Some(StoreEvent::suppressed()));
        Ok(())
    }

    async fn reset_breaker(&self, tenant: &str, operator: &str) -> Result<()> {
        let (tenant, operator) = (tenant.to_owned(), operator.to_owned());
        self.write(move |conn| reset(conn, &tenant, &operator))
            .await
    }

    async fn breaker_resets(&self, since: Millis) -> Result<Vec<BreakerReset>> {
        self.read(move |conn| resets(conn, since)).await
    }

    async fn rejections_since(&self, since: Millis) -> Result<Vec<RecentRejection>> {
        self.read(move |conn| rejections(conn, since)).await
    }
}

#[cfg(test)]
mod tests {
    use crate::sqlite::tests::plan_of;

    /// The tenant and each operator's reset are read by key, an operator's
    /// rejections as one range of the partial index.
    #[tokio::test]
    async fn the_breakers_are_read_by_key_and_index_range() {
        let mut searches = Vec::new();
        for query in [super::BREAKERS, super::REJECTIONS] {
            for step in plan_of(query).await {
                assert!(
                    !(step.starts_with("SCAN") && step.contains("proposals")),
                    "{step}"
                );
                if step.starts_with("SEARCH") {
                    searches.push(step);
                }
            }
        }
        assert_eq!(
            searches,
            [
                "SEARCH t USING INDEX sqlite_autoindex_tenants_1 (name=?)",
                "SEARCH r USING INDEX sqlite_autoindex_breaker_resets_1 (tenant=? AND operator=?) LEFT-JOIN",
                "SEARCH proposals USING INDEX proposals_operator_rejections (tenant=? AND operator=? AND decided_at>?)",
            ]
        );
    }
}
