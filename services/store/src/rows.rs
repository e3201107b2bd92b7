//! Row → domain mappings both backends share: their SOP, target, decision and
//! audit-log columns have the same names and types, so one mapping serves
//! both drivers' rows (sqlx's for PostgreSQL, rusqlite's for SQLite).

use countersign_domain::{
    Decision, Event, EventKind, GateResult, Proposal, ProposalState, Sop, Target,
    audit::{
        AuditEntry, AuditRecord, Checkpoint, DecisionColumns, EMPTY_HEAD, Hash, LogColumns,
        ProposalColumns, Proposed, StoredCopies, StoredEntry, parse_hash, time_index::Tide,
    },
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
    fn flag(&self, column: &str) -> Result<bool>;
}

macro_rules! columns {
    ($row:ty, $get:ident) => {
        impl Columns for $row {
            fn text(&self, column: &str) -> Result<String> {
                Ok(self.$get(column)?)
            }
            fn opt_text(&self, column: &str) -> Result<Option<String>> {
                Ok(self.$get(column)?)
            }
            fn int(&self, column: &str) -> Result<i64> {
                Ok(self.$get(column)?)
            }
            fn opt_int(&self, column: &str) -> Result<Option<i64>> {
                Ok(self.$get(column)?)
            }
            fn flag(&self, column: &str) -> Result<bool> {
                Ok(self.$get(column)?)
            }
        }
    };
}
columns!(sqlx::postgres::PgRow, try_get);

/// A statement's column names, each with its place, looked up by hash.
/// rusqlite's own lookup by name compares the name with every column's at
/// each read: about 800 comparisons for a log entry read with its decision
/// and proposal (40 columns), the larger part of such a read's time
/// (BENCHMARKS.md, "2026-12-07 (at fdc772d …)"). Where two columns share a
/// name, the first is the one read.
#[derive(Debug)]
pub(crate) struct ColumnNames(std::collections::HashMap<String, usize>);

impl ColumnNames {
    pub(crate) fn of(statement: &rusqlite::Statement<'_>) -> ColumnNames {
        let mut names = std::collections::HashMap::with_capacity(statement.column_count());
        for (index, name) in statement.column_names().into_iter().enumerate() {
            names.entry(name.to_owned()).or_insert(index);
        }
        ColumnNames(names)
    }

    /// `row`, of the statement these are the names of, read by name.
    pub(crate) fn row<'a, 'stmt>(&'a self, row: &'a rusqlite::Row<'stmt>) -> Named<'a, 'stmt> {
        Named { row, names: self }
    }

    /// The first row `statement` (whose names these are) answers, mapped by
    /// `map`; `None` without one. For a statement run again and again with
    /// the names read once.
    pub(crate) fn first_row<T>(
        &self,
        statement: &mut rusqlite::Statement<'_>,
        params: impl rusqlite::Params,
        map: impl FnOnce(&Named<'_, '_>) -> Result<T>,
    ) -> Result<Option<T>> {
        let mut rows = statement.query(params)?;
        match rows.next()? {
            Some(row) => Ok(Some(map(&self.row(row))?)),
            None => Ok(None),
        }
    }

    fn index(&self, column: &str) -> Result<usize> {
        self.0
            .get(column)
            .copied()
            .ok_or_else(|| corrupt(format!("no column `{column}`")))
    }
}

/// A SQLite row read by column name through its statement's [`ColumnNames`].
pub(crate) struct Named<'a, 'stmt> {
    row: &'a rusqlite::Row<'stmt>,
    names: &'a ColumnNames,
}

impl Named<'_, '_> {
    /// The column `column` as `T`.
    pub(crate) fn get<T: rusqlite::types::FromSql>(&self, column: &str) -> Result<T> {
        Ok(self.row.get(self.names.index(column)?)?)
    }
}

impl Columns for Named<'_, '_> {
    fn text(&self, column: &str) -> Result<String> {
        self.get(column)
    }
    fn opt_text(&self, column: &str) -> Result<Option<String>> {
        self.get(column)
    }
    fn int(&self, column: &str) -> Result<i64> {
        self.get(column)
    }
    fn opt_int(&self, column: &str) -> Result<Option<i64>> {
        self.get(column)
    }
    fn flag(&self, column: &str) -> Result<bool> {
        self.get(column)
    }
}

/// A statement's rows mapped by column name ([`Named`]).
pub(crate) trait NamedRows {
    /// Every row, each mapped by `map`.
    fn named_rows<T>(
        &mut self,
        params: impl rusqlite::Params,
        map: impl FnMut(&Named<'_, '_>) -> Result<T>,
    ) -> Result<Vec<T>>;

    /// The first row (of a DML statement's `RETURNING`, every change made),
    /// mapped by `map`; `None` without one.
    fn named_row<T>(
        &mut self,
        params: impl rusqlite::Params,
        map: impl FnOnce(&Named<'_, '_>) -> Result<T>,
    ) -> Result<Option<T>>;

    /// The row a statement always answers (an `INSERT … RETURNING`), mapped
    /// by `map`.
    fn named_one<T>(
        &mut self,
        params: impl rusqlite::Params,
        map: impl FnOnce(&Named<'_, '_>) -> Result<T>,
    ) -> Result<T> {
        self.named_row(params, map)?
            .ok_or_else(|| rusqlite::Error::QueryReturnedNoRows.into())
    }
}

impl NamedRows for rusqlite::Statement<'_> {
    fn named_rows<T>(
        &mut self,
        params: impl rusqlite::Params,
        mut map: impl FnMut(&Named<'_, '_>) -> Result<T>,
    ) -> Result<Vec<T>> {
        let names = ColumnNames::of(self);
        let mut rows = self.query(params)?;
        let mut out = Vec::new();
        while let Some(row) = rows.next()? {
            out.push(map(&names.row(row))?);
        }
        Ok(out)
    }

    fn named_row<T>(
        &mut self,
        params: impl rusqlite::Params,
        map: impl FnOnce(&Named<'_, '_>) -> Result<T>,
    ) -> Result<Option<T>> {
        ColumnNames::of(self).first_row(self, params, map)
    }
}

/// A SQLite row kept past its statement (rusqlite's rows borrow theirs):
/// the column names it was read with, its values.
pub(crate) struct OwnedRow {
    columns: std::sync::Arc<ColumnNames>,
    values: Vec<rusqlite::types::Value>,
}

impl OwnedRow {
    /// Every row of a statement whose parameters are bound.
    pub(crate) fn all(statement: &mut rusqlite::CachedStatement<'_>) -> Result<Vec<OwnedRow>> {
        let columns = std::sync::Arc::new(ColumnNames::of(statement));
        let count = statement.column_count();
        let mut rows = statement.raw_query();
        let mut out = Vec::new();
        while let Some(row) = rows.next()? {
            let values = (0..count)
                .map(|i| row.get::<_, rusqlite::types::Value>(i))
                .collect::<rusqlite::Result<_>>()?;
            out.push(OwnedRow {
                columns: columns.clone(),
                values,
            });
        }
        Ok(out)
    }

    fn value(&self, column: &str) -> Result<&rusqlite::types::Value> {
        Ok(&self.values[self.columns.index(column)?])
    }

    fn mistyped(column: &str, value: &rusqlite::types::Value) -> StoreError {
        corrupt(format!(
            "column `{column}`: {:?} is not the type stored there",
            value.data_type()
        ))
    }
}

impl Columns for OwnedRow {
    fn text(&self, column: &str) -> Result<String> {
        self.opt_text(column)?
            .ok_or_else(|| corrupt(format!("column `{column}` is NULL")))
    }
    fn opt_text(&self, column: &str) -> Result<Option<String>> {
        use rusqlite::types::Value;
        match self.value(column)? {
            Value::Text(text) => Ok(Some(text.clone())),
            Value::Null => Ok(None),
            other => Err(Self::mistyped(column, other)),
        }
    }
    fn int(&self, column: &str) -> Result<i64> {
        self.opt_int(column)?
            .ok_or_else(|| corrupt(format!("column `{column}` is NULL")))
    }
    fn opt_int(&self, column: &str) -> Result<Option<i64>> {
        use rusqlite::types::Value;
        match self.value(column)? {
            Value::Integer(n) => Ok(Some(*n)),
            Value::Null => Ok(None),
            other => Err(Self::mistyped(column, other)),
        }
    }
    fn flag(&self, column: &str) -> Result<bool> {
        Ok(self.int(column)? != 0)
    }
}

/// A row's columns under a prefix: a joined table's, aliased `d_outcome`, …
/// beside another table's `*` whose names they would clash with.
pub(crate) struct Prefixed<'r, R>(pub &'r R, pub &'static str);

impl<R: Columns> Prefixed<'_, R> {
    fn name(&self, column: &str) -> String {
        format!("{}{column}", self.1)
    }
}

impl<R: Columns> Columns for Prefixed<'_, R> {
    fn text(&self, column: &str) -> Result<String> {
        self.0.text(&self.name(column))
    }
    fn opt_text(&self, column: &str) -> Result<Option<String>> {
        self.0.opt_text(&self.name(column))
    }
    fn int(&self, column: &str) -> Result<i64> {
        self.0.int(&self.name(column))
    }
    fn opt_int(&self, column: &str) -> Result<Option<i64>> {
        self.0.opt_int(&self.name(column))
    }
    fn flag(&self, column: &str) -> Result<bool> {
        self.0.flag(&self.name(column))
    }
}

fn malformed(what: &str, e: impl std::fmt::Display) -> StoreError {
    corrupt(format!("{what}: {e}"))
}

/// A tenant row.
pub(crate) fn tenant_from_row(row: &impl Columns) -> Result<crate::Tenant> {
    Ok(crate::Tenant {
        name: row.text("name")?,
        created_at: row.int("created_at")?,
        policy: countersign_domain::TenantPolicy {
            parallel_window_ms: row.int("parallel_window_ms")?,
            allow_force_approve_no_sop: row.flag("allow_force_approve_no_sop")?,
            breaker_threshold: row.int("breaker_threshold")?.clamp(0, i64::from(u32::MAX)) as u32,
            breaker_window_ms: row.int("breaker_window_ms")?,
            receipt_ttl_ms: row.int("receipt_ttl_ms")?,
        },
    })
}

/// A proposal row, without its decision (read apart).
pub(crate) fn proposal_from_row(row: &impl Columns) -> Result<Proposal> {
    let id = row.text("id")?;
    let spec = serde_json::from_str(&row.text("spec_json")?)
        .map_err(|e| StoreError::Corrupt(format!("proposal {id}: spec: {e}")))?;
    let state = row
        .text("state")?
        .parse::<ProposalState>()
        .map_err(|e| StoreError::Corrupt(format!("proposal {id}: {e}")))?;
    Ok(Proposal {
        tenant: row.text("tenant")?,
        spec,
        state,
        submitted_by: row.text("submitted_by")?,
        submitted_by_person: row.opt_text("submitted_by_person")?,
        created_at: row.int("created_at")?,
        updated_at: row.int("updated_at")?,
        decision: None,
        suppressed_retries: row.int("suppressed_retries")?.max(0) as u64,
        cancel_reason: row.opt_text("cancel_reason")?,
        id,
    })
}

/// An event row's own columns (`ev_position`, `ev_cursor`, `ev_kind`,
/// `ev_state`, `ev_at`), as an event of `proposal` (read from the same row).
/// An `events` row's head: its `cursor` (the log position), `tenant`,
/// `proposal_id` and `kind`.
pub(crate) fn event_head_from_row(row: &impl Columns) -> Result<crate::EventHead> {
    let kind = row.text("kind")?;
    Ok(crate::EventHead {
        position: row.int("cursor")? as u64,
        tenant: row.text("tenant")?,
        proposal_id: row.text("proposal_id")?,
        kind: kind
            .parse()
            .map_err(|e| StoreError::Corrupt(format!("event kind {kind}: {e}")))?,
    })
}

pub(crate) fn event_from_row(row: &impl Columns, proposal: Proposal) -> Result<Event> {
    let position = row.int("ev_position")?;
    let corrupt = |e: countersign_domain::names::UnknownName| {
        StoreError::Corrupt(format!("event {position}: {e}"))
    };
    let kind: EventKind = row.text("ev_kind")?.parse().map_err(corrupt)?;
    let state: ProposalState = row.text("ev_state")?.parse().map_err(corrupt)?;
    Ok(Event::at(
        position as u64,
        row.int("ev_cursor")? as u64,
        kind,
        state,
        row.int("ev_at")?,
        proposal,
    ))
}

/// A `sops` row.
pub(crate) fn sop_from_row(row: &impl Columns) -> Result<Sop> {
    let id = row.text("id")?;
    let radius = row.text("max_blast_radius")?;
    let selector = row.text("selector_json")?;
    let version = row.int("version")?;
    Ok(Sop {
        action: row.text("action")?,
        title: row.text("title")?,
        covers: row.text("covers")?,
        rollback_path: row.text("rollback_path")?,
        max_blast_radius: radius
            .parse()
            .map_err(|e| malformed(&format!("sop {id}"), e))?,
        selector: serde_json::from_str(&selector)
            .map_err(|e| malformed(&format!("sop {id} selector"), e))?,
        version: u32::try_from(version).map_err(|e| malformed(&format!("sop {id} version"), e))?,
        retired: row.flag("retired")?,
        updated_at: row.int("updated_at")?,
        id,
    })
}

/// A `targets` row.
pub(crate) fn target_from_row(row: &impl Columns) -> Result<Target> {
    let id = row.text("id")?;
    let status = row.text("status")?;
    let labels = row.text("labels_json")?;
    Ok(Target {
        status: status
            .parse()
            .map_err(|e| malformed(&format!("target {id}"), e))?,
        labels: serde_json::from_str(&labels)
            .map_err(|e| malformed(&format!("target {id} labels"), e))?,
        updated_at: row.int("updated_at")?,
        id,
    })
}

/// A `decisions` row (its `sequence` and `digest` come from the audit log),
/// with its model review: all of it is in the audit record.
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
        route_id: row.opt_text("route_id")?,
        votes: row
            .opt_text("votes_json")?
            .map(|json| serde_json::from_str(&json))
            .transpose()
            .map_err(|e| corrupt(format!("decision {id} votes: {e}")))?
            .unwrap_or_default(),
        model: crate::model::review_from_row(row, || format!("decision {id}"))?,
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

/// The select list of [`stored_entry_from_row`]: an `audit_log` row `a` with
/// its decision `d` and proposal `p` (both LEFT JOINed: a missing row is
/// NULL), the joined tables' columns prefixed `d_` and `p_`.
pub(crate) const STORED_ENTRY_COLUMNS: &str = "a.sequence, a.digest, a.record, a.tenant,
    a.proposal_id, a.decided_at, a.action, a.target, a.operator, a.submitted_by, a.outcome,
    a.blast_radius, a.sop_id, a.decided_max, a.lateness_max,
    d.proposal_id AS d_proposal_id, d.tenant AS d_tenant, d.outcome AS d_outcome,
    d.reason AS d_reason, d.agent_message AS d_agent_message, d.sop_id AS d_sop_id,
    d.sop_version AS d_sop_version, d.rollback_path AS d_rollback_path,
    d.gates_json AS d_gates_json, d.missing_gates_json AS d_missing_gates_json,
    d.reviewer AS d_reviewer, d.decided_at AS d_decided_at, d.summary AS d_summary,
    d.review_latency_ms AS d_review_latency_ms, d.route_id AS d_route_id,
    d.votes_json AS d_votes_json, d.model_json AS d_model_json,
    p.id AS p_id, p.tenant AS p_tenant, p.state AS p_state, p.action AS p_action,
    p.target AS p_target, p.operator AS p_operator, p.submitted_by AS p_submitted_by,
    p.blast_radius AS p_blast_radius";

/// An entry exactly as stored, with the copies of its record's fields kept
/// beside it ([`STORED_ENTRY_COLUMNS`]).
pub(crate) fn stored_entry_from_row(row: &impl Columns) -> Result<StoredEntry> {
    let log = LogColumns {
        tenant: row.text("tenant")?,
        proposal_id: row.text("proposal_id")?,
        decided_at: row.int("decided_at")?,
        action: row.text("action")?,
        target: row.text("target")?,
        operator: row.text("operator")?,
        submitted_by: row.text("submitted_by")?,
        outcome: row.text("outcome")?,
        blast_radius: row.text("blast_radius")?,
        sop_id: row.opt_text("sop_id")?,
        decided_max: row.int("decided_max")?,
        lateness_max: row.int("lateness_max")?,
    };
    let d = Prefixed(row, "d_");
    let decision = match d.opt_text("proposal_id")? {
        None => None,
        Some(_) => Some(DecisionColumns {
            tenant: d.text("tenant")?,
            outcome: d.text("outcome")?,
            reason: d.text("reason")?,
            agent_message: d.text("agent_message")?,
            sop_id: d.opt_text("sop_id")?,
            sop_version: d.opt_int("sop_version")?,
            rollback_path: d.opt_text("rollback_path")?,
            gates_json: d.text("gates_json")?,
            missing_gates_json: d.text("missing_gates_json")?,
            reviewer: d.text("reviewer")?,
            decided_at: d.int("decided_at")?,
            summary: d.text("summary")?,
            review_latency_ms: d.int("review_latency_ms")?,
            route_id: d.opt_text("route_id")?,
            votes_json: d.opt_text("votes_json")?,
            model_json: d.opt_text("model_json")?,
        }),
    };
    let p = Prefixed(row, "p_");
    let proposal = match p.opt_text("id")? {
        None => None,
        Some(_) => Some(ProposalColumns {
            tenant: p.text("tenant")?,
            state: p.text("state")?,
            action: p.text("action")?,
            target: p.text("target")?,
            operator: p.text("operator")?,
            submitted_by: p.text("submitted_by")?,
            blast_radius: p.text("blast_radius")?,
        }),
    };
    Ok(StoredEntry {
        sequence: row.int("sequence")? as u64,
        digest: row.text("digest")?,
        record: row.text("record")?,
        copies: Some(StoredCopies {
            log,
            decision,
            proposal,
        }),
    })
}

/// The newest entry of a tenant's log: its sequence, digest and running time
/// values (`services/domain/src/audit/time_index.rs`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Head {
    pub size: u64,
    pub digest: Hash,
    pub tide: Tide,
}

/// The columns `head_from` reads, in this order.
pub(crate) const HEAD_COLUMNS: &str = "sequence, digest, decided_max, lateness_max";

/// The head of a tenant's log from its newest row (`HEAD_COLUMNS`); size 0,
/// zero digest, for an empty log.
pub(crate) fn head_from(tenant: &str, newest: Option<(i64, String, i64, i64)>) -> Result<Head> {
    match newest {
        None => Ok(Head {
            size: 0,
            digest: EMPTY_HEAD,
            tide: Tide::before_first(),
        }),
        Some((sequence, digest, decided_max, lateness_max)) => {
            let digest = parse_hash(&digest)
                .ok_or_else(|| corrupt(format!("audit entry {sequence} of {tenant}: digest")))?;
            Ok(Head {
                size: sequence as u64,
                digest,
                tide: Tide {
                    decided_max,
                    lateness_max,
                },
            })
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

#[cfg(test)]
mod sqlite_row_tests {
    use super::*;

    /// Facts are read into owned rows: a value of the wrong type, a NULL
    /// where a value must be, or a missing column is an error for the
    /// reviews that read it, never a default.
    #[test]
    fn an_owned_row_reads_its_columns_by_name_and_refuses_what_does_not_fit() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        let mut statement = conn
            .prepare_cached("SELECT 'a' AS t, NULL AS n, 7 AS i, 'x' AS word, 0 AS no")
            .unwrap();
        let rows = OwnedRow::all(&mut statement).unwrap();
        let row = &rows[0];
        assert_eq!(row.text("t").unwrap(), "a");
        assert_eq!(row.opt_text("n").unwrap(), None);
        assert_eq!(row.opt_int("n").unwrap(), None);
        assert_eq!(row.int("i").unwrap(), 7);
        assert!(row.flag("i").unwrap());
        assert!(!row.flag("no").unwrap());
        for refused in [
            row.text("n").err(),
            row.int("word").err(),
            row.text("i").err(),
            row.text("missing").err(),
        ] {
            assert!(
                matches!(refused, Some(StoreError::Corrupt(_))),
                "{refused:?}"
            );
        }
    }

    /// A column is read by its name, the first of two that share it; a name
    /// the statement lacks is an error naming it, never another column.
    #[test]
    fn a_named_row_reads_each_column_by_its_own_name() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        let mut statement = conn
            .prepare("SELECT 'first' AS tenant, 7 AS n, NULL AS gone, 'second' AS tenant")
            .unwrap();
        let read = statement
            .named_row([], |row| {
                Ok((
                    row.text("tenant")?,
                    row.int("n")?,
                    row.opt_text("gone")?,
                    row.text("missing").unwrap_err().to_string(),
                ))
            })
            .unwrap()
            .unwrap();
        assert_eq!(read.0, "first");
        assert_eq!(read.1, 7);
        assert_eq!(read.2, None);
        assert!(read.3.contains("`missing`"), "{}", read.3);
        let none = conn
            .prepare("SELECT 1 AS n WHERE 0")
            .unwrap()
            .named_row([], |row| row.int("n"))
            .unwrap();
        assert_eq!(none, None);
    }
}
