//! Row → domain mappings both backends share: their decision and audit-log
//! columns have the same names and types, so one mapping serves both.

use countersign_domain::{
    Decision, GateResult,
    audit::{AuditEntry, AuditRecord, Checkpoint, EMPTY_HEAD, Hash, Proposed, parse_hash},
};
use sqlx::Row;

use crate::{Result, StoreError};

fn corrupt(what: String) -> StoreError {
    StoreError::Corrupt(what)
}

/// The columns a mapping reads, on either backend's rows.
pub(crate) trait Columns {
    fn text(&self, column: &str) -> Result<String>;
    fn opt_text(&self, column: &str) -> Result<Option<String>>;
    fn int(&self, column: &str) -> Result<i64>;
    fn opt_int(&self, column: &str) -> Result<Option<i64>>;
}

macro_rules! columns {
    ($row:ty) => {
        impl Columns for $row {
            fn text(&self, column: &str) -> Result<String> {
                Ok(self.try_get(column)?)
            }
            fn opt_text(&self, column: &str) -> Result<Option<String>> {
                Ok(self.try_get(column)?)
            }
            fn int(&self, column: &str) -> Result<i64> {
                Ok(self.try_get(column)?)
            }
            fn opt_int(&self, column: &str) -> Result<Option<i64>> {
                Ok(self.try_get(column)?)
            }
        }
    };
}
columns!(sqlx::postgres::PgRow);
columns!(sqlx::sqlite::SqliteRow);

/// A `decisions` row (its `sequence` and `digest` come from the audit log).
pub(crate) fn decision_from_row(row: &impl Columns) -> Result<Decision> {
    let id = row.text("proposal_id")?;
    let outcome = row.text("outcome")?;
    Ok(Decision {
        outcome: outcome
            .parse()
            .map_err(|e| corrupt(format!("decision {id}: {e}")))?,
        reason: row.text("reason")?,
        agent_message: row.text("agent_message")?,
        sop_id: row.opt_text("sop_id")?,
        sop_version: row.opt_int("sop_version")?.map(|v| v as u32),
        rollback_path: row.opt_text("rollback_path")?,
        gates: serde_json::from_str::<Vec<GateResult>>(&row.text("gates_json")?)
            .map_err(|e| corrupt(format!("decision {id} gates: {e}")))?,
        missing_gates: serde_json::from_str(&row.text("missing_gates_json")?)
            .map_err(|e| corrupt(format!("decision {id} missing gates: {e}")))?,
        reviewer: row.text("reviewer")?,
        decided_at: row.int("decided_at")?,
        summary: row.text("summary")?,
        sequence: 0,
        digest: String::new(),
        review_latency_ms: row.int("review_latency_ms")?.max(0) as u64,
    })
}

/// A decision joined with its proposal's columns: the record the log appends.
pub(crate) fn record_from_row(row: &impl Columns) -> Result<AuditRecord> {
    let proposal_id = row.text("proposal_id")?;
    let proposed = Proposed {
        tenant: row.text("tenant")?,
        action: row.text("action")?,
        target: row.text("target")?,
        operator: row.text("operator")?,
        submitted_by: row.text("submitted_by")?,
        blast_radius: row
            .text("blast_radius")?
            .parse()
            .map_err(|e| corrupt(format!("proposal {proposal_id}: {e}")))?,
        proposal_id,
    };
    Ok(AuditRecord::new(proposed, decision_from_row(row)?))
}

/// An `audit_log` row: sequence, digest and the record.
pub(crate) fn entry_from_row(row: &impl Columns) -> Result<AuditEntry> {
    let sequence = row.int("sequence")?;
    Ok(AuditEntry {
        sequence: sequence as u64,
        digest: row.text("digest")?,
        record: serde_json::from_str(&row.text("record")?)
            .map_err(|e| corrupt(format!("audit entry {sequence}: {e}")))?,
    })
}

/// The head of a tenant's log from its newest `(sequence, digest)` row;
/// `(0, zeros)` for an empty log.
pub(crate) fn head_from(tenant: &str, newest: Option<(i64, String)>) -> Result<(u64, Hash)> {
    match newest {
        None => Ok((0, EMPTY_HEAD)),
        Some((sequence, digest)) => {
            let digest = parse_hash(&digest)
                .ok_or_else(|| corrupt(format!("audit entry {sequence} of {tenant}: digest")))?;
            Ok((sequence as u64, digest))
        }
    }
}

/// The `(size, head_digest, signed_at, public_key, signature)` of a stored checkpoint.
pub(crate) type CheckpointRow = (i64, String, i64, String, String);

pub(crate) fn checkpoint_from(tenant: &str, row: CheckpointRow) -> Checkpoint {
    let (size, head_digest, signed_at, public_key, signature) = row;
    Checkpoint {
        tenant: tenant.to_owned(),
        size: size as u64,
        head_digest,
        signed_at,
        public_key,
        signature,
    }
}
