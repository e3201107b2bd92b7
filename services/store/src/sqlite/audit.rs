//! The decision log: the sequencer's appends, queries, verification reads and
//! checkpoints.

use std::collections::HashMap;

use countersign_domain::audit::time_index::{self, SequenceWindow};
use countersign_domain::audit::{AuditEntry, AuditFilter, Checkpoint, StoredEntry, chain};
use sqlx::{QueryBuilder, Row, Sqlite, SqliteConnection, SqlitePool};

use super::writes::SqliteWriter;
use crate::rows::{
    CheckpointRow, HEAD_COLUMNS, Head, STORED_ENTRY_COLUMNS, checkpoint_from, entry_from_row,
    head_from, record_from_row, stored_entry_from_row,
};
use crate::{Result, StoreError};

/// Appends up to `limit` decisions that are not in their tenant's log yet, in
/// the order they committed, in one transaction; returns how many.
///
/// The decisions are read and chained on a reader: only the insert takes the
/// one writer, for as long as it writes (the chaining, ~60 µs a decision,
/// used to hold every submission and review behind it). The write commits
/// only if the log's progress is still what the reader saw; if another append
/// got there first, the round starts again from what it wrote.
#[tracing::instrument(name = "store.sqlite.append_audit", level = "debug", skip_all)]
pub async fn append(reader: &SqlitePool, writer: &SqliteWriter, limit: u32) -> Result<u64> {
    loop {
        let Some(next) = chain_next(reader, limit).await? else {
            return Ok(0);
        };
        let appended = next.count;
        let written = writer.run(move |conn| write_next(conn?, next)).await??;
        if written {
            return Ok(appended);
        }
    }
}

/// The entries that extend the logs, from one snapshot.
struct NextEntries {
    /// The progress mark they were chained from, and the one they move it to.
    from: i64,
    through: i64,
    /// How many, and their JSON array (serialized here, off the writer).
    count: u64,
    entries: String,
}

async fn chain_next(reader: &SqlitePool, limit: u32) -> Result<Option<NextEntries>> {
    let mut tx = reader.begin().await?;
    let from: i64 = sqlx::query_scalar("SELECT through FROM audit_progress WHERE id = 1")
        .fetch_one(&mut *tx)
        .await?;
    let rows = sqlx::query(
        "SELECT d.rowid AS decision_rowid, d.*, p.action, p.target, p.operator, p.submitted_by,
                p.blast_radius
         FROM decisions d CROSS JOIN proposals p ON p.id = d.proposal_id
         WHERE d.rowid > ?1 ORDER BY d.rowid LIMIT ?2",
    )
    .bind(from)
    .bind(i64::from(limit))
    .fetch_all(&mut *tx)
    .await?;
    let Some(last) = rows.last() else {
        return Ok(None);
    };
    let through: i64 = last.try_get("decision_rowid")?;

    let mut heads: HashMap<String, Head> = HashMap::new();
    let mut entries = Vec::with_capacity(rows.len());
    for row in &rows {
        let record = record_from_row(row)?;
        let head = match heads.get(&record.tenant) {
            Some(head) => *head,
            None => head_in(&mut tx, &record.tenant).await?,
        };
        let next = Head {
            size: head.size + 1,
            digest: chain(&head.digest, &record.leaf_hash()),
            tide: head.tide.next(record.decided_at),
        };
        heads.insert(record.tenant.clone(), next);
        let (sequence, digest) = (next.size, next.digest);
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
            "decided_max": next.tide.decided_max,
            "lateness_max": next.tide.lateness_max,
        }));
    }
    Ok(Some(NextEntries {
        from,
        through,
        count: entries.len() as u64,
        entries: serde_json::Value::Array(entries).to_string(),
    }))
}

/// Writes `next` if the progress mark is still where it was chained from;
/// `false` (nothing written) if it moved.
fn write_next(conn: &mut rusqlite::Connection, next: NextEntries) -> Result<bool> {
    let tx = conn.transaction()?;
    let moved = tx
        .prepare_cached("UPDATE audit_progress SET through = ?2 WHERE id = 1 AND through = ?1")?
        .execute([next.from, next.through])?;
    if moved != 1 {
        return Ok(false);
    }
    tx.prepare_cached(
        "INSERT INTO audit_log (tenant, sequence, proposal_id, decided_at, action, target,
             operator, submitted_by, outcome, blast_radius, sop_id, record, digest,
             decided_max, lateness_max)
         SELECT json_extract(value, '$.tenant'), json_extract(value, '$.sequence'),
                json_extract(value, '$.proposal_id'), json_extract(value, '$.decided_at'),
                json_extract(value, '$.action'), json_extract(value, '$.target'),
                json_extract(value, '$.operator'), json_extract(value, '$.submitted_by'),
                json_extract(value, '$.outcome'), json_extract(value, '$.blast_radius'),
                json_extract(value, '$.sop_id'), json_extract(value, '$.record'),
                json_extract(value, '$.digest'), json_extract(value, '$.decided_max'),
                json_extract(value, '$.lateness_max')
         FROM json_each(?1)",
    )?
    .execute([next.entries])?;
    tx.commit()?;
    Ok(true)
}

async fn head_in(conn: &mut SqliteConnection, tenant: &str) -> Result<Head> {
    let row = sqlx::query_as(&format!(
        "SELECT {HEAD_COLUMNS} FROM audit_log WHERE tenant = ? ORDER BY sequence DESC LIMIT 1"
    ))
    .bind(tenant)
    .fetch_optional(&mut *conn)
    .await?;
    head_from(tenant, row)
}

/// The newest entry's `(sequence, digest)`; `(0, zeros)` for an empty log.
pub async fn head(reader: &SqlitePool, tenant: &str) -> Result<(u64, String)> {
    let mut conn = reader.acquire().await?;
    let head = head_in(&mut conn, tenant).await?;
    Ok((head.size, hex::encode(head.digest)))
}

/// Newest first, entries below `before` (a sequence) that match `filter`.
///
/// The filters pick the rows in an inner query that reads indexes only (each
/// filter column is indexed with the sequence); the records, about a
/// kilobyte each, are read for the page alone. A time range becomes a range
/// of sequences first (two index seeks, `time_index`), so every query walks
/// an index in sequence order; where a selective filter is given, the coarse
/// ones (outcome, blast radius, time) are kept off the index choice with
/// SQLite's unary `+`, so the planner walks the selective index.
#[tracing::instrument(name = "store.sqlite.list_audit", skip(reader, filter))]
pub async fn list(
    reader: &SqlitePool,
    tenant: &str,
    filter: &AuditFilter,
    before: Option<u64>,
    limit: u32,
) -> Result<Vec<AuditEntry>> {
    // One read transaction: the bounds and the page see the same log.
    let mut tx = reader.begin().await?;
    let timed = filter.decided_from.is_some() || filter.decided_until.is_some();
    let window = if timed {
        match sequence_window(&mut tx, tenant, filter).await? {
            Some(window) => Some(window),
            None => return Ok(Vec::new()),
        }
    } else {
        None
    };
    let selective = [
        &filter.action,
        &filter.target,
        &filter.operator,
        &filter.submitted_by,
        &filter.sop_id,
    ]
    .iter()
    .any(|f| f.is_some());
    let coarse = if selective || timed { "+" } else { "" };

    let mut q: QueryBuilder<Sqlite> = QueryBuilder::new(
        "SELECT sequence, digest, record FROM audit_log WHERE rowid IN (
             SELECT rowid FROM audit_log WHERE tenant = ",
    );
    q.push_bind(tenant.to_owned());
    if let Some(SequenceWindow { low, high }) = window {
        q.push(" AND sequence BETWEEN ")
            .push_bind(low as i64)
            .push(" AND ")
            .push_bind(high as i64);
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
        q.push(" AND +decided_at >= ").push_bind(from);
    }
    if let Some(until) = filter.decided_until {
        q.push(" AND +decided_at < ").push_bind(until);
    }
    if let Some(before) = before {
        q.push(" AND sequence < ")
            .push_bind(i64::try_from(before).unwrap_or(i64::MAX));
    }
    q.push(" ORDER BY sequence DESC LIMIT ")
        .push_bind(i64::from(limit));
    q.push(") ORDER BY sequence DESC");
    let rows = q.build().fetch_all(&mut *tx).await?;
    tx.commit().await?;
    rows.iter().map(entry_from_row).collect()
}

/// The sequences the filter's time range can hold; None when it holds none.
async fn sequence_window(
    conn: &mut SqliteConnection,
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
            "SELECT sequence FROM audit_log WHERE tenant = ? AND decided_max >= ?
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

/// Entries after `after`, oldest first, exactly as stored, each with the
/// copies of its record's fields (its filter columns, decision and proposal).
pub async fn range(
    reader: &SqlitePool,
    tenant: &str,
    after: u64,
    limit: u32,
) -> Result<Vec<StoredEntry>> {
    let rows = sqlx::query(&format!(
        "SELECT {STORED_ENTRY_COLUMNS} FROM audit_log a
         LEFT JOIN decisions d ON d.proposal_id = a.proposal_id
         LEFT JOIN proposals p ON p.id = a.proposal_id
         WHERE a.tenant = ? AND a.sequence > ? ORDER BY a.sequence LIMIT ?"
    ))
    .bind(tenant)
    .bind(i64::try_from(after).unwrap_or(i64::MAX))
    .bind(i64::from(limit))
    .fetch_all(reader)
    .await?;
    rows.iter().map(stored_entry_from_row).collect()
}

/// Keeps `checkpoint` unless the tenant already has one of at least its size
/// (the log has not grown since), in one statement; returns the checkpoint
/// kept: `checkpoint`, or the newest one there was.
pub async fn save_checkpoint(writer: &SqlitePool, checkpoint: &Checkpoint) -> Result<Checkpoint> {
    let size = i64::try_from(checkpoint.size).unwrap_or(i64::MAX);
    let saved = sqlx::query(
        "INSERT INTO audit_checkpoints (tenant, size, head_digest, signed_at, public_key, signature)
         SELECT ?1, ?2, ?3, ?4, ?5, ?6
         WHERE NOT EXISTS (SELECT 1 FROM audit_checkpoints WHERE tenant = ?1 AND size >= ?2)
         ON CONFLICT DO NOTHING",
    )
    .bind(&checkpoint.tenant)
    .bind(size)
    .bind(&checkpoint.head_digest)
    .bind(checkpoint.signed_at)
    .bind(&checkpoint.public_key)
    .bind(&checkpoint.signature)
    .execute(writer)
    .await?;
    if saved.rows_affected() == 1 {
        return Ok(checkpoint.clone());
    }
    latest_checkpoint(writer, &checkpoint.tenant)
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("a checkpoint of `{}`", checkpoint.tenant)))
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

/// The newest checkpoint of any tenant.
pub async fn newest_checkpoint(reader: &SqlitePool) -> Result<Option<Checkpoint>> {
    let row: Option<(String, i64, String, i64, String, String)> = sqlx::query_as(
        "SELECT tenant, size, head_digest, signed_at, public_key, signature
         FROM audit_checkpoints ORDER BY signed_at DESC LIMIT 1",
    )
    .fetch_optional(reader)
    .await?;
    Ok(row.map(|(tenant, size, head, at, key, signature)| {
        checkpoint_from(&tenant, (size, head, at, key, signature))
    }))
}
