//! The decision log: the sequencer's appends, queries, verification reads and
//! checkpoints.

use std::collections::HashMap;

use countersign_domain::audit::{AuditEntry, AuditFilter, Checkpoint, Hash, StoredEntry, chain};
use sqlx::{QueryBuilder, Row, Sqlite, SqlitePool};

use crate::Result;
use crate::rows::{CheckpointRow, checkpoint_from, entry_from_row, head_from, record_from_row};

/// Appends up to `limit` decisions that are not in their tenant's log yet, in
/// the order they committed, in one transaction; returns how many.
#[tracing::instrument(name = "store.sqlite.append_audit", level = "debug", skip(writer))]
pub async fn append(writer: &SqlitePool, limit: u32) -> Result<u64> {
    let mut tx = writer.begin().await?;
    let through: i64 = sqlx::query_scalar("SELECT through FROM audit_progress WHERE id = 1")
        .fetch_one(&mut *tx)
        .await?;
    let rows = sqlx::query(
        "SELECT d.rowid AS decision_rowid, d.*, p.action, p.target, p.operator, p.submitted_by,
                p.blast_radius
         FROM decisions d CROSS JOIN proposals p ON p.id = d.proposal_id
         WHERE d.rowid > ?1 ORDER BY d.rowid LIMIT ?2",
    )
    .bind(through)
    .bind(i64::from(limit))
    .fetch_all(&mut *tx)
    .await?;
    let Some(last) = rows.last() else {
        return Ok(0);
    };
    let last: i64 = last.try_get("decision_rowid")?;

    let mut heads: HashMap<String, (u64, Hash)> = HashMap::new();
    let mut entries = Vec::with_capacity(rows.len());
    for row in &rows {
        let record = record_from_row(row)?;
        let head = match heads.get(&record.tenant) {
            Some(head) => *head,
            None => head_in(&mut tx, &record.tenant).await?,
        };
        let sequence = head.0 + 1;
        let digest = chain(&head.1, &record.leaf_hash());
        heads.insert(record.tenant.clone(), (sequence, digest));
        entries.push(serde_json::json!({
            "tenant": record.tenant,
            "sequence": sequence,
            "proposal_id": record.proposal_id,
            "decided_at": record.decided_at,
            "action": record.action,
            "target": record.target,
            "operator": record.operator,
            "submitted_by": record.submitted_by,
            "outcome": record.outcome.as_str(),
            "blast_radius": record.blast_radius.as_str(),
            "sop_id": record.sop_id,
            "record": record.canonical_json(),
            "digest": hex::encode(digest),
        }));
    }
    let appended = entries.len() as u64;
    sqlx::query(
        "INSERT INTO audit_log (tenant, sequence, proposal_id, decided_at, action, target,
             operator, submitted_by, outcome, blast_radius, sop_id, record, digest)
         SELECT json_extract(value, '$.tenant'), json_extract(value, '$.sequence'),
                json_extract(value, '$.proposal_id'), json_extract(value, '$.decided_at'),
                json_extract(value, '$.action'), json_extract(value, '$.target'),
                json_extract(value, '$.operator'), json_extract(value, '$.submitted_by'),
                json_extract(value, '$.outcome'), json_extract(value, '$.blast_radius'),
                json_extract(value, '$.sop_id'), json_extract(value, '$.record'),
                json_extract(value, '$.digest')
         FROM json_each(?1)",
    )
    .bind(serde_json::Value::Array(entries).to_string())
    .execute(&mut *tx)
    .await?;
    sqlx::query("UPDATE audit_progress SET through = ?1 WHERE id = 1")
        .bind(last)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(appended)
}

async fn head_in(conn: &mut sqlx::SqliteConnection, tenant: &str) -> Result<(u64, Hash)> {
    let row: Option<(i64, String)> = sqlx::query_as(
        "SELECT sequence, digest FROM audit_log WHERE tenant = ? ORDER BY sequence DESC LIMIT 1",
    )
    .bind(tenant)
    .fetch_optional(&mut *conn)
    .await?;
    head_from(tenant, row)
}

/// The newest entry's `(sequence, digest)`; `(0, zeros)` for an empty log.
pub async fn head(reader: &SqlitePool, tenant: &str) -> Result<(u64, String)> {
    let mut conn = reader.acquire().await?;
    let (size, digest) = head_in(&mut conn, tenant).await?;
    Ok((size, hex::encode(digest)))
}

/// Newest first, entries below `before` (a sequence) that match `filter`.
///
/// The filters pick the rows in an inner query that reads indexes only (each
/// filter column is indexed with the sequence); the records, about a
/// kilobyte each, are read for the page alone. Where a selective filter is
/// given, the coarse ones (outcome, blast radius, time) are kept off the index
/// choice with SQLite's unary `+`, so the planner walks the selective index.
#[tracing::instrument(name = "store.sqlite.list_audit", skip(reader, filter))]
pub async fn list(
    reader: &SqlitePool,
    tenant: &str,
    filter: &AuditFilter,
    before: Option<u64>,
    limit: u32,
) -> Result<Vec<AuditEntry>> {
    let mut q: QueryBuilder<Sqlite> = QueryBuilder::new(
        "SELECT sequence, digest, record FROM audit_log WHERE rowid IN (
             SELECT rowid FROM audit_log WHERE tenant = ",
    );
    q.push_bind(tenant.to_owned());
    let selective = [
        &filter.action,
        &filter.target,
        &filter.operator,
        &filter.submitted_by,
        &filter.sop_id,
    ]
    .iter()
    .any(|f| f.is_some());
    let timed = filter.decided_from.is_some() || filter.decided_until.is_some();
    // A time range alone: its sequence bounds first (from the covering time
    // index, no sort), then a walk down the sequence index between them.
    let bounds = if timed && !selective {
        match sequence_bounds(reader, tenant, filter).await? {
            Some(bounds) => Some(bounds),
            None => return Ok(Vec::new()),
        }
    } else {
        None
    };
    let coarse = if selective || bounds.is_some() {
        "+"
    } else {
        ""
    };
    if let Some((low, high)) = bounds {
        q.push(" AND sequence BETWEEN ")
            .push_bind(low)
            .push(" AND ")
            .push_bind(high);
    }
    let mut eq = |column: &str, value: Option<String>| {
        if let Some(value) = value {
            q.push(format!(" AND {column} = ")).push_bind(value);
        }
    };
    eq("action", filter.action.clone());
    eq("target", filter.target.clone());
    eq("operator", filter.operator.clone());
    eq("submitted_by", filter.submitted_by.clone());
    eq("sop_id", filter.sop_id.clone());
    eq(
        &format!("{coarse}outcome"),
        filter.outcome.map(|outcome| outcome.as_str().to_owned()),
    );
    eq(
        &format!("{coarse}blast_radius"),
        filter.blast_radius.map(|radius| radius.as_str().to_owned()),
    );
    if let Some(from) = filter.decided_from {
        q.push(format!(" AND {coarse}decided_at >= "))
            .push_bind(from);
    }
    if let Some(until) = filter.decided_until {
        q.push(format!(" AND {coarse}decided_at < "))
            .push_bind(until);
    }
    if let Some(before) = before {
        q.push(" AND sequence < ")
            .push_bind(i64::try_from(before).unwrap_or(i64::MAX));
    }
    q.push(" ORDER BY sequence DESC LIMIT ")
        .push_bind(i64::from(limit));
    q.push(") ORDER BY sequence DESC");
    q.build()
        .fetch_all(reader)
        .await?
        .iter()
        .map(entry_from_row)
        .collect()
}

/// The lowest and highest sequence decided within the filter's time range.
async fn sequence_bounds(
    reader: &SqlitePool,
    tenant: &str,
    filter: &AuditFilter,
) -> Result<Option<(i64, i64)>> {
    let (low, high): (Option<i64>, Option<i64>) = sqlx::query_as(
        "SELECT min(sequence), max(sequence) FROM audit_log
         WHERE tenant = ?1 AND decided_at >= ?2 AND decided_at < ?3",
    )
    .bind(tenant)
    .bind(filter.decided_from.unwrap_or(i64::MIN))
    .bind(filter.decided_until.unwrap_or(i64::MAX))
    .fetch_one(reader)
    .await?;
    Ok(low.zip(high))
}

/// The entry of one proposal's decision, once the sequencer has appended it.
pub async fn get(
    reader: &SqlitePool,
    tenant: &str,
    proposal_id: &str,
) -> Result<Option<AuditEntry>> {
    sqlx::query(
        "SELECT sequence, digest, record FROM audit_log WHERE tenant = ? AND proposal_id = ?",
    )
    .bind(tenant)
    .bind(proposal_id)
    .fetch_optional(reader)
    .await?
    .as_ref()
    .map(entry_from_row)
    .transpose()
}

/// Entries after `after`, oldest first, exactly as stored.
pub async fn range(
    reader: &SqlitePool,
    tenant: &str,
    after: u64,
    limit: u32,
) -> Result<Vec<StoredEntry>> {
    let rows: Vec<(i64, String, String)> = sqlx::query_as(
        "SELECT sequence, digest, record FROM audit_log
         WHERE tenant = ? AND sequence > ? ORDER BY sequence LIMIT ?",
    )
    .bind(tenant)
    .bind(i64::try_from(after).unwrap_or(i64::MAX))
    .bind(i64::from(limit))
    .fetch_all(reader)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(sequence, digest, record)| StoredEntry {
            sequence: sequence as u64,
            digest,
            record,
        })
        .collect())
}

pub async fn save_checkpoint(writer: &SqlitePool, checkpoint: &Checkpoint) -> Result<()> {
    sqlx::query(
        "INSERT INTO audit_checkpoints (tenant, size, head_digest, signed_at, public_key, signature)
         VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
    )
    .bind(&checkpoint.tenant)
    .bind(i64::try_from(checkpoint.size).unwrap_or(i64::MAX))
    .bind(&checkpoint.head_digest)
    .bind(checkpoint.signed_at)
    .bind(&checkpoint.public_key)
    .bind(&checkpoint.signature)
    .execute(writer)
    .await?;
    Ok(())
}

pub async fn latest_checkpoint(reader: &SqlitePool, tenant: &str) -> Result<Option<Checkpoint>> {
    let row: Option<CheckpointRow> = sqlx::query_as(
        "SELECT size, head_digest, signed_at, public_key, signature FROM audit_checkpoints
         WHERE tenant = ? ORDER BY signed_at DESC, size DESC LIMIT 1",
    )
    .bind(tenant)
    .fetch_optional(reader)
    .await?;
    Ok(row.map(|row| checkpoint_from(tenant, row)))
}
