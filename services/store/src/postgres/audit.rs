//! The decision log on PostgreSQL: the sequencer's appends (decisions in
//! commit order, see migrations/postgres/0005 and 0010), queries, verification reads
//! and checkpoints, each in its tenant's row-level-security scope.

use async_trait::async_trait;
use countersign_domain::audit::time_index::{self, SequenceWindow};
use countersign_domain::audit::{AuditEntry, AuditFilter, Checkpoint, StoredEntry, chain};
use sqlx::{PgConnection, Postgres, QueryBuilder, Row};

use super::{PostgresStore, scope};
use crate::rows::{
    CheckpointRow, HEAD_COLUMNS, Head, STORED_ENTRY_COLUMNS, checkpoint_from, entry_from_row,
    head_from, record_from_row, stored_entry_from_row,
};
use crate::{AuditLog, Result, StoreError};

/// The sequencer's read: the next decisions in commit order.
#[doc(hidden)]
pub const NEXT_DECISIONS: &str = "
SELECT d.commit_order, d.*, p.action, p.target, p.operator, p.submitted_by, p.blast_radius
FROM decisions d JOIN proposals p ON p.id = d.proposal_id AND p.tenant = d.tenant
WHERE d.commit_order > $1 ORDER BY d.commit_order LIMIT $2";

/// Set in the sequencer's transaction (whose other statements are keyed
/// lookups) before [`NEXT_DECISIONS`]: walk the commit-order index in order.
/// The planner takes the row-level-security predicate (`tenant = … OR scope =
/// 'system'`) to keep ~0.5% of rows, so it expected a handful of decisions past
/// `through` and chose to scan and sort them all: 3 s per batch of 1,000 with
/// 1,000,000 decisions (the log fell behind at ~400 entries/s), 48 ms walking
/// the index. Planned for its parameters each time (`scope::CUSTOM_PLANS`).
#[doc(hidden)]
pub const IN_COMMIT_ORDER: &str = "SELECT set_config('enable_seqscan', 'off', true),
    set_config('enable_bitmapscan', 'off', true), set_config('enable_sort', 'off', true),
    set_config('max_parallel_workers_per_gather', '0', true),
    set_config('plan_cache_mode', 'force_custom_plan', true)";

async fn head_in(conn: &mut PgConnection, tenant: &str) -> Result<Head> {
    let row = sqlx::query_as(&format!(
        "SELECT {HEAD_COLUMNS} FROM audit_log WHERE tenant = $1 ORDER BY sequence DESC LIMIT 1"
    ))
    .bind(tenant)
    .fetch_optional(&mut *conn)
    .await?;
    head_from(tenant, row)
}

/// The sequences the filter's time range can hold (`time_index`); None when
/// it holds none.
async fn sequence_window(
    conn: &mut PgConnection,
    tenant: &str,
    filter: &AuditFilter,
) -> Result<Option<SequenceWindow>> {
    let head = head_in(conn, tenant).await?;
    let seeks = time_index::seeks(
        filter.decided_from,
        filter.decided_until,
        head.tide.lateness_max,
    );
    let mut first = async |seek: Option<i64>| -> Result<Option<u64>> {
        let Some(seek) = seek else { return Ok(None) };
        let sequence: Option<i64> = sqlx::query_scalar(
            "SELECT sequence FROM audit_log WHERE tenant = $1 AND decided_max >= $2
             ORDER BY decided_max, sequence LIMIT 1",
        )
        .bind(tenant)
        .bind(seek)
        .fetch_optional(&mut *conn)
        .await?;
        Ok(sequence.map(|s| s as u64))
    };
    let low = first(seeks.low_seek).await?;
    let high = first(seeks.high_seek).await?;
    Ok(SequenceWindow::from_seeks(seeks, low, high, head.size))
}

async fn latest_in(conn: &mut PgConnection, tenant: &str) -> Result<Option<Checkpoint>> {
    let row: Option<CheckpointRow> = sqlx::query_as(
        "SELECT size, head_digest, signed_at, public_key, signature FROM audit_checkpoints
         WHERE tenant = $1 ORDER BY signed_at DESC, size DESC LIMIT 1",
    )
    .bind(tenant)
    .fetch_optional(&mut *conn)
    .await?;
    Ok(row.map(|row| checkpoint_from(tenant, row)))
}

#[async_trait]
impl AuditLog for PostgresStore {
    /// Appends up to `limit` decisions not yet in their tenant's log, in commit
    /// order, in one transaction; returns how many. Sequencers take turns on the
    /// progress row.
    #[tracing::instrument(name = "store.postgres.append_audit", level = "debug", skip(self))]
    async fn append_audit(&self, limit: u32) -> Result<u64> {
        // Reading every tenant's new decisions is a system-scope read; each
        // tenant's entries are then written in that tenant's scope.
        let mut tx = scope::system(&self.pool).await?;
        let through: i64 =
            sqlx::query_scalar("SELECT through FROM audit_progress WHERE id = 1 FOR UPDATE")
                .fetch_one(&mut *tx)
                .await?;
        sqlx::query(IN_COMMIT_ORDER).execute(&mut *tx).await?;
        let rows = sqlx::query(NEXT_DECISIONS)
            .bind(through)
            .bind(i64::from(limit))
            .fetch_all(&mut *tx)
            .await?;
        let Some(last) = rows.last() else {
            return Ok(0);
        };
        let last: i64 = last.try_get("commit_order")?;
        let records = rows
            .iter()
            .map(record_from_row)
            .collect::<Result<Vec<_>>>()?;

        let groups = scope::by_tenant(&records, |r| r.tenant.as_str());
        for (tenant, indices) in groups {
            scope::enter_tenant(&mut tx, &tenant).await?;
            let mut head = head_in(&mut tx, &tenant).await?;
            let mut insert: QueryBuilder<Postgres> = QueryBuilder::new(
                "INSERT INTO audit_log (tenant, sequence, proposal_id, decided_at, action, target,
                     operator, submitted_by, outcome, blast_radius, sop_id, record, digest,
                     decided_max, lateness_max) ",
            );
            insert.push_values(indices.iter().map(|&i| &records[i]), |mut row, record| {
                head = Head {
                    size: head.size + 1,
                    digest: chain(&head.digest, &record.leaf_hash()),
                    tide: head.tide.next(record.decided_at),
                };
                row.push_bind(record.tenant.clone())
                    .push_bind(head.size as i64)
                    .push_bind(record.proposal_id.clone())
                    .push_bind(record.decided_at)
                    .push_bind(record.action.clone())
                    .push_bind(record.target.clone())
                    .push_bind(record.operator.clone())
                    .push_bind(record.submitted_by.clone())
                    .push_bind(record.outcome.as_str())
                    .push_bind(record.blast_radius.as_str())
                    .push_bind(record.sop_id.clone())
                    .push_bind(record.canonical_json())
                    .push_bind(hex::encode(head.digest))
                    .push_bind(head.tide.decided_max)
                    .push_bind(head.tide.lateness_max);
            });
            insert.build().execute(&mut *tx).await?;
        }
        sqlx::query("UPDATE audit_progress SET through = $1 WHERE id = 1")
            .bind(last)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(records.len() as u64)
    }

    async fn audit_head(&self, tenant: &str) -> Result<(u64, String)> {
        let mut tx = scope::tenant(&self.pool, tenant).await?;
        let head = head_in(&mut tx, tenant).await?;
        tx.commit().await?;
        Ok((head.size, hex::encode(head.digest)))
    }

    #[tracing::instrument(name = "store.postgres.list_audit", skip(self, filter))]
    async fn list_audit(
        &self,
        tenant: &str,
        filter: &AuditFilter,
        before: Option<u64>,
        limit: u32,
    ) -> Result<Vec<AuditEntry>> {
        let mut tx = scope::tenant(&self.pool, tenant).await?;
        let timed = filter.decided_from.is_some() || filter.decided_until.is_some();
        let window = if timed {
            match sequence_window(&mut tx, tenant, filter).await? {
                Some(window) => Some(window),
                None => return Ok(Vec::new()),
            }
        } else {
            None
        };
        let mut q: QueryBuilder<Postgres> =
            QueryBuilder::new("SELECT sequence, digest, record FROM audit_log WHERE tenant = ");
        q.push_bind(tenant.to_owned());
        if let Some(SequenceWindow { low, high }) = window {
            q.push(" AND sequence BETWEEN ")
                .push_bind(low as i64)
                .push(" AND ")
                .push_bind(high as i64);
        }
        let mut eq = |column: &str, value: &Option<String>| {
            if let Some(value) = value {
                q.push(format!(" AND {column} = ")).push_bind(value.clone());
            }
        };
        eq("action", &filter.action);
        eq("target", &filter.target);
        eq("operator", &filter.operator);
        eq("submitted_by", &filter.submitted_by);
        eq("sop_id", &filter.sop_id);
        eq("outcome", &filter.outcome.map(|o| o.as_str().to_owned()));
        eq(
            "blast_radius",
            &filter.blast_radius.map(|r| r.as_str().to_owned()),
        );
        if let Some(from) = filter.decided_from {
            q.push(" AND decided_at >= ").push_bind(from);
        }
        if let Some(until) = filter.decided_until {
            q.push(" AND decided_at < ").push_bind(until);
        }
        if let Some(before) = before {
            q.push(" AND sequence < ")
                .push_bind(i64::try_from(before).unwrap_or(i64::MAX));
        }
        q.push(" ORDER BY sequence DESC LIMIT ")
            .push_bind(i64::from(limit));
        let rows = q.build().fetch_all(&mut *tx).await?;
        tx.commit().await?;
        rows.iter().map(entry_from_row).collect()
    }

    async fn get_audit(&self, tenant: &str, proposal_id: &str) -> Result<Option<AuditEntry>> {
        let mut tx = scope::tenant(&self.pool, tenant).await?;
        let row = sqlx::query(
            "SELECT sequence, digest, record FROM audit_log WHERE tenant = $1 AND proposal_id = $2",
        )
        .bind(tenant)
        .bind(proposal_id)
        .fetch_optional(&mut *tx)
        .await?;
        tx.commit().await?;
        row.as_ref().map(entry_from_row).transpose()
    }

    /// Entries after `after`, oldest first, exactly as stored, each with the
    /// copies of its record's fields (its filter columns, decision and proposal).
    async fn audit_range(&self, tenant: &str, after: u64, limit: u32) -> Result<Vec<StoredEntry>> {
        let mut tx = scope::tenant(&self.pool, tenant).await?;
        let rows = sqlx::query(&format!(
            "SELECT {STORED_ENTRY_COLUMNS} FROM audit_log a
             LEFT JOIN decisions d ON d.proposal_id = a.proposal_id
             LEFT JOIN proposals p ON p.id = a.proposal_id
             WHERE a.tenant = $1 AND a.sequence > $2 ORDER BY a.sequence LIMIT $3"
        ))
        .bind(tenant)
        .bind(i64::try_from(after).unwrap_or(i64::MAX))
        .bind(i64::from(limit))
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        rows.iter().map(stored_entry_from_row).collect()
    }

    /// Keeps `checkpoint` unless the tenant already has one of at least its size
    /// (the log has not grown since); returns the checkpoint kept: `checkpoint`,
    /// or the newest one there was. Saves of one tenant take turns (a
    /// transaction-level advisory lock on the tenant), so two at once keep one.
    async fn save_checkpoint(&self, checkpoint: &Checkpoint) -> Result<Checkpoint> {
        let mut tx = scope::tenant(&self.pool, &checkpoint.tenant).await?;
        sqlx::query("SELECT pg_advisory_xact_lock(73102913, hashtext($1))")
            .bind(&checkpoint.tenant)
            .execute(&mut *tx)
            .await?;
        let saved = sqlx::query(
            "INSERT INTO audit_checkpoints (tenant, size, head_digest, signed_at, public_key, signature)
             SELECT $1, $2, $3, $4, $5, $6
             WHERE NOT EXISTS (SELECT 1 FROM audit_checkpoints WHERE tenant = $1 AND size >= $2)
             ON CONFLICT DO NOTHING",
        )
        .bind(&checkpoint.tenant)
        .bind(i64::try_from(checkpoint.size).unwrap_or(i64::MAX))
        .bind(&checkpoint.head_digest)
        .bind(checkpoint.signed_at)
        .bind(&checkpoint.public_key)
        .bind(&checkpoint.signature)
        .execute(&mut *tx)
        .await?;
        let kept = if saved.rows_affected() == 1 {
            Some(checkpoint.clone())
        } else {
            latest_in(&mut tx, &checkpoint.tenant).await?
        };
        tx.commit().await?;
        kept.ok_or_else(|| StoreError::NotFound(format!("a checkpoint of `{}`", checkpoint.tenant)))
    }

    async fn latest_checkpoint(&self, tenant: &str) -> Result<Option<Checkpoint>> {
        let mut tx = scope::tenant(&self.pool, tenant).await?;
        let latest = latest_in(&mut tx, tenant).await?;
        tx.commit().await?;
        Ok(latest)
    }

    /// The newest checkpoint of any tenant (a system-scope read).
    async fn newest_checkpoint(&self) -> Result<Option<Checkpoint>> {
        let mut tx = scope::system(&self.pool).await?;
        let row: Option<(String, i64, String, i64, String, String)> = sqlx::query_as(
            "SELECT tenant, size, head_digest, signed_at, public_key, signature
             FROM audit_checkpoints ORDER BY signed_at DESC LIMIT 1",
        )
        .fetch_optional(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(row.map(|(tenant, size, head, at, key, signature)| {
            checkpoint_from(&tenant, (size, head, at, key, signature))
        }))
    }
}
