//! The decision log: the sequencer's appends, queries, verification reads and
//! checkpoints.

use std::collections::HashMap;

use async_trait::async_trait;
use countersign_domain::audit::time_index::{self, SequenceWindow};
use countersign_domain::audit::{AuditEntry, AuditFilter, Checkpoint, StoredEntry, chain};
use rusqlite::{Connection, OptionalExtension, params, types::Value};

use super::SqliteStore;
use crate::rows::{
    CheckpointRow, Columns, HEAD_COLUMNS, Head, NamedRows, STORED_ENTRY_COLUMNS, checkpoint_from,
    entry_from_row, head_from, record_from_row, stored_entry_from_row,
};
use crate::{AuditLog, Result, StoreError};

/// The entries that extend the logs, from one snapshot.
///
/// An append reads and chains the decisions on a reader: only the insert
/// ([`write_next`]) takes the one writer, for as long as it writes (the
/// chaining, ~60 µs a decision, would hold every submission and review
/// behind it). The write commits only if the log's progress is still what
/// the reader saw; if another append got there first, the round starts again
/// from what it wrote.
pub struct NextEntries {
    /// The progress mark they were chained from, and the one they move it to.
    from: i64,
    through: i64,
    /// How many, and each one's columns in [`write_next`]'s order (made
    /// here, off the writer).
    pub count: u64,
    entries: Vec<[Value; 15]>,
}

/// The next up to `limit` decisions not in their tenant's log, in the order
/// they committed, chained; `None` when every decision is in its log.
#[tracing::instrument(name = "store.sqlite.append_audit", level = "debug", skip_all)]
pub fn chain_next(conn: &mut Connection, limit: u32) -> Result<Option<NextEntries>> {
    let tx = conn.transaction()?;
    let from: i64 = tx.query_row("SELECT through FROM audit_progress WHERE id = 1", [], |r| {
        r.get(0)
    })?;
    let mut statement = tx.prepare_cached(
        "SELECT d.rowid AS decision_rowid, d.*, p.action, p.target, p.operator, p.submitted_by,
                p.blast_radius
         FROM decisions d CROSS JOIN proposals p ON p.id = d.proposal_id
         WHERE d.rowid > ?1 ORDER BY d.rowid LIMIT ?2",
    )?;
    let rows = statement.named_rows(params![from, limit], |row| {
        Ok((row.int("decision_rowid")?, record_from_row(row)))
    })?;
    let Some(&(through, _)) = rows.last() else {
        return Ok(None);
    };

    let mut heads: HashMap<String, Head> = HashMap::new();
    let mut entries = Vec::with_capacity(rows.len());
    for (_, record) in rows {
        let record = record?;
        let head = match heads.get(&record.tenant) {
            Some(head) => *head,
            None => head_in(&tx, &record.tenant)?,
        };
        let next = Head {
            size: head.size + 1,
            digest: chain(&head.digest, &record.leaf_hash()),
            tide: head.tide.next(record.decided_at),
        };
        heads.insert(record.tenant.clone(), next);
        let (sequence, digest) = (next.size, next.digest);
        let canonical = record.canonical_json();
        entries.push([
            Value::Text(record.tenant),
            Value::Integer(i64::try_from(sequence).unwrap_or(i64::MAX)),
            Value::Text(record.proposal_id),
            Value::Integer(record.decided_at),
            Value::Text(record.action),
            Value::Text(record.target),
            Value::Text(record.operator),
            Value::Text(record.submitted_by),
            Value::Text(record.outcome.as_str().to_owned()),
            Value::Text(record.blast_radius.as_str().to_owned()),
            record.sop_id.map_or(Value::Null, Value::Text),
            Value::Text(canonical),
            Value::Text(hex::encode(digest)),
            Value::Integer(next.tide.decided_max),
            Value::Integer(next.tide.lateness_max),
        ]);
    }
    Ok(Some(NextEntries {
        from,
        through,
        count: entries.len() as u64,
        entries,
    }))
}

/// Writes `next` if the progress mark is still where it was chained from;
/// `false` (nothing written) if it moved.
pub fn write_next(conn: &mut Connection, next: NextEntries) -> Result<bool> {
    let tx = conn.transaction()?;
    let moved = tx
        .prepare_cached("UPDATE audit_progress SET through = ?2 WHERE id = 1 AND through = ?1")?
        .execute([next.from, next.through])?;
    if moved != 1 {
        return Ok(false);
    }
    let mut insert = tx.prepare_cached(
        "INSERT INTO audit_log (tenant, sequence, proposal_id, decided_at, action, target,
             operator, submitted_by, outcome, blast_radius, sop_id, record, digest,
             decided_max, lateness_max)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
    )?;
    for entry in next.entries {
        insert.execute(rusqlite::params_from_iter(entry))?;
    }
    drop(insert);
    tx.commit()?;
    Ok(true)
}

fn head_in(conn: &Connection, tenant: &str) -> Result<Head> {
    let newest = conn
        .prepare_cached(&format!(
            "SELECT {HEAD_COLUMNS} FROM audit_log WHERE tenant = ? ORDER BY sequence DESC LIMIT 1"
        ))?
        .query_row([tenant], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })
        .optional()?;
    head_from(tenant, newest)
}

/// The newest entry's `(sequence, digest)`; `(0, zeros)` for an empty log.
pub fn head(conn: &Connection, tenant: &str) -> Result<(u64, String)> {
    let head = head_in(conn, tenant)?;
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
/// SQLite's unary `+`, so the planner walks the selective index, whose
/// entries carry the coarse columns (migration 0024): the walk reads no row
/// of an entry it turns away.
#[tracing::instrument(name = "store.sqlite.list_audit", skip(conn, filter))]
pub fn list(
    conn: &mut Connection,
    tenant: &str,
    filter: &AuditFilter,
    before: Option<u64>,
    limit: u32,
) -> Result<Vec<AuditEntry>> {
    // One read transaction: the bounds and the page see the same log.
    let tx = conn.transaction()?;
    let timed = filter.decided_from.is_some() || filter.decided_until.is_some();
    let window = if timed {
        match sequence_window(&tx, tenant, filter)? {
            Some(window) => Some(window),
            None => return Ok(Vec::new()),
        }
    } else {
        None
    };
    let (sql, values) = list_query(tenant, filter, window, before, limit);
    let mut page = tx.prepare_cached(&sql)?;
    page.named_rows(rusqlite::params_from_iter(values), |row| {
        entry_from_row(row)
    })
}

/// The query of one page of `list` and its values: the rowids of the page
/// along one index, then their entries.
fn list_query(
    tenant: &str,
    filter: &AuditFilter,
    window: Option<SequenceWindow>,
    before: Option<u64>,
    limit: u32,
) -> (String, Vec<Value>) {
    let timed = window.is_some();
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

    let mut sql = String::from(
        "SELECT sequence, digest, record FROM audit_log WHERE rowid IN (
             SELECT rowid FROM audit_log WHERE tenant = ?",
    );
    let mut values: Vec<Value> = vec![tenant.to_owned().into()];
    if let Some(SequenceWindow { low, high }) = window {
        sql.push_str(" AND sequence BETWEEN ? AND ?");
        values.extend([Value::from(low as i64), Value::from(high as i64)]);
    }
    let mut and = |condition: String, value: Value| {
        sql.push_str(&format!(" AND {condition} ?"));
        values.push(value);
    };
    let equal = [
        ("action", filter.action.clone()),
        ("target", filter.target.clone()),
        ("operator", filter.operator.clone()),
        ("submitted_by", filter.submitted_by.clone()),
        ("sop_id", filter.sop_id.clone()),
        (
            "outcome",
            filter.outcome.map(|outcome| outcome.as_str().to_owned()),
        ),
        (
            "blast_radius",
            filter.blast_radius.map(|radius| radius.as_str().to_owned()),
        ),
    ];
    for (column, value) in equal {
        if let Some(value) = value {
            let coarse = if matches!(column, "outcome" | "blast_radius") {
                coarse
            } else {
                ""
            };
            and(format!("{coarse}{column} ="), value.into());
        }
    }
    if let Some(from) = filter.decided_from {
        and("+decided_at >=".into(), from.into());
    }
    if let Some(until) = filter.decided_until {
        and("+decided_at <".into(), until.into());
    }
    if let Some(before) = before {
        and(
            "sequence <".into(),
            i64::try_from(before).unwrap_or(i64::MAX).into(),
        );
    }
    sql.push_str(" ORDER BY sequence DESC LIMIT ?) ORDER BY sequence DESC");
    values.push(i64::from(limit).into());
    (sql, values)
}

/// The sequences the filter's time range can hold; None when it holds none.
fn sequence_window(
    conn: &Connection,
    tenant: &str,
    filter: &AuditFilter,
) -> Result<Option<SequenceWindow>> {
    let head = head_in(conn, tenant)?;
    let seeks = time_index::seeks(
        filter.decided_from,
        filter.decided_until,
        head.tide.lateness_max,
    );
    let first = |seek: Option<i64>| -> Result<Option<u64>> {
        let Some(seek) = seek else { return Ok(None) };
        let sequence: Option<i64> = conn
            .prepare_cached(
                "SELECT sequence FROM audit_log WHERE tenant = ? AND decided_max >= ?
                 ORDER BY decided_max, sequence LIMIT 1",
            )?
            .query_row(params![tenant, seek], |r| r.get(0))
            .optional()?;
        Ok(sequence.map(|s| s as u64))
    };
    let low = first(seeks.low_seek)?;
    let high = first(seeks.high_seek)?;
    Ok(SequenceWindow::from_seeks(seeks, low, high, head.size))
}

/// The entry of one proposal's decision, once the sequencer has appended it.
pub fn get(conn: &Connection, tenant: &str, proposal_id: &str) -> Result<Option<AuditEntry>> {
    conn.prepare_cached(
        "SELECT sequence, digest, record FROM audit_log WHERE tenant = ? AND proposal_id = ?",
    )?
    .named_row([tenant, proposal_id], |row| entry_from_row(row))
}

/// Entries after `after`, oldest first, exactly as stored, each with the
/// copies of its record's fields (its filter columns, decision and proposal).
pub fn range(conn: &Connection, tenant: &str, after: u64, limit: u32) -> Result<Vec<StoredEntry>> {
    conn.prepare_cached(&format!(
        "SELECT {STORED_ENTRY_COLUMNS} FROM audit_log a
         LEFT JOIN decisions d ON d.proposal_id = a.proposal_id
         LEFT JOIN proposals p ON p.id = a.proposal_id
         WHERE a.tenant = ? AND a.sequence > ? ORDER BY a.sequence LIMIT ?"
    ))?
    .named_rows(
        params![tenant, i64::try_from(after).unwrap_or(i64::MAX), limit],
        |row| stored_entry_from_row(row),
    )
}

/// Keeps `checkpoint` unless the tenant already has one of at least its size
/// (the log has not grown since), in one statement; returns the checkpoint
/// kept: `checkpoint`, or the newest one there was.
pub fn save_checkpoint(conn: &Connection, checkpoint: &Checkpoint) -> Result<Checkpoint> {
    let size = i64::try_from(checkpoint.size).unwrap_or(i64::MAX);
    let saved = conn
        .prepare_cached(
            "INSERT INTO audit_checkpoints (tenant, size, head_digest, signed_at, public_key,
                 signature)
             SELECT ?1, ?2, ?3, ?4, ?5, ?6
             WHERE NOT EXISTS (SELECT 1 FROM audit_checkpoints WHERE tenant = ?1 AND size >= ?2)
             ON CONFLICT DO NOTHING",
        )?
        .execute(params![
            checkpoint.tenant,
            size,
            checkpoint.head_digest,
            checkpoint.signed_at,
            checkpoint.public_key,
            checkpoint.signature
        ])?;
    if saved == 1 {
        return Ok(checkpoint.clone());
    }
    latest_checkpoint(conn, &checkpoint.tenant)?
        .ok_or_else(|| StoreError::NotFound(format!("a checkpoint of `{}`", checkpoint.tenant)))
}

pub fn latest_checkpoint(conn: &Connection, tenant: &str) -> Result<Option<Checkpoint>> {
    let row: Option<CheckpointRow> = conn
        .prepare_cached(
            "SELECT size, head_digest, signed_at, public_key, signature FROM audit_checkpoints
             WHERE tenant = ? ORDER BY signed_at DESC, size DESC LIMIT 1",
        )?
        .query_row([tenant], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .optional()?;
    Ok(row.map(|row| checkpoint_from(tenant, row)))
}

/// The newest checkpoint of any tenant.
pub fn newest_checkpoint(conn: &Connection) -> Result<Option<Checkpoint>> {
    let row: Option<(String, CheckpointRow)> = conn
        .prepare_cached(
            "SELECT tenant, size, head_digest, signed_at, public_key, signature
             FROM audit_checkpoints ORDER BY signed_at DESC LIMIT 1",
        )?
        .query_row([], |r| {
            Ok((
                r.get(0)?,
                (r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?),
            ))
        })
        .optional()?;
    Ok(row.map(|(tenant, row)| checkpoint_from(&tenant, row)))
}

#[async_trait]
impl AuditLog for SqliteStore {
    async fn append_audit(&self, limit: u32) -> Result<u64> {
        loop {
            let Some(next) = self.read(move |conn| chain_next(conn, limit)).await? else {
                return Ok(0);
            };
            let appended = next.count;
            if self.write(move |conn| write_next(conn, next)).await? {
                return Ok(appended);
            }
        }
    }

    async fn list_audit(
        &self,
        tenant: &str,
        filter: &AuditFilter,
        before: Option<u64>,
        limit: u32,
    ) -> Result<Vec<AuditEntry>> {
        let (tenant, filter) = (tenant.to_owned(), filter.clone());
        self.read(move |conn| list(conn, &tenant, &filter, before, limit))
            .await
    }

    async fn get_audit(&self, tenant: &str, proposal_id: &str) -> Result<Option<AuditEntry>> {
        let (tenant, proposal_id) = (tenant.to_owned(), proposal_id.to_owned());
        self.read(move |conn| get(conn, &tenant, &proposal_id))
            .await
    }

    async fn audit_range(&self, tenant: &str, after: u64, limit: u32) -> Result<Vec<StoredEntry>> {
        let tenant = tenant.to_owned();
        self.read(move |conn| range(conn, &tenant, after, limit))
            .await
    }

    async fn audit_head(&self, tenant: &str) -> Result<(u64, String)> {
        let tenant = tenant.to_owned();
        self.read(move |conn| head(conn, &tenant)).await
    }

    async fn save_checkpoint(&self, checkpoint: &Checkpoint) -> Result<Checkpoint> {
        let checkpoint = checkpoint.clone();
        self.write(move |conn| save_checkpoint(conn, &checkpoint))
            .await
    }

    async fn latest_checkpoint(&self, tenant: &str) -> Result<Option<Checkpoint>> {
        let tenant = tenant.to_owned();
        self.read(move |conn| latest_checkpoint(conn, &tenant))
            .await
    }

    async fn newest_checkpoint(&self) -> Result<Option<Checkpoint>> {
        self.read(|conn| newest_checkpoint(conn)).await
    }
}

#[cfg(test)]
mod tests {
    use countersign_domain::{BlastRadius, DecisionOutcome, audit::AuditFilter};

    use crate::sqlite::tests::plan_of;

    /// Sets one field of a filter.
    type Set = fn(&mut AuditFilter);

    /// A page under a selective filter with a coarse one beside it walks the
    /// selective filter's index and reads whether each entry matches from
    /// that index alone (COVERING: no row is read until the page's own), so
    /// the entries the coarse filter turns away cost no page reads of their
    /// rows over a long log.
    #[tokio::test]
    async fn a_selective_filter_with_a_coarse_one_is_answered_from_its_index() {
        let selective: [(&str, Set); 5] = [
            ("audit_by_action", |f| f.action = Some("restart".into())),
            ("audit_by_target", |f| f.target = Some("db-1".into())),
            ("audit_by_operator", |f| f.operator = Some("bot".into())),
            ("audit_by_submitter", |f| f.submitted_by = Some("ci".into())),
            ("audit_by_sop", |f| f.sop_id = Some("SOP-1".into())),
        ];
        let coarse: [Set; 3] = [
            |f| f.outcome = Some(DecisionOutcome::Reject),
            |f| f.blast_radius = Some(BlastRadius::Cluster),
            |f| {
                f.outcome = Some(DecisionOutcome::Approve);
                f.blast_radius = Some(BlastRadius::SingleDevice);
            },
        ];
        for (index, narrow) in selective {
            for widen in coarse {
                for before in [None, Some(500)] {
                    let mut filter = AuditFilter::default();
                    narrow(&mut filter);
                    widen(&mut filter);
                    let (sql, _) = super::list_query("acme", &filter, None, before, 100);
                    let steps = plan_of(&sql).await;
                    let walk =
                        format!("SEARCH audit_log USING COVERING INDEX {index} (tenant=? AND ");
                    assert!(
                        steps.iter().any(|step| step.starts_with(&walk)),
                        "{filter:?}: {steps:?}"
                    );
                }
            }
        }
    }
}
