//! A decision's rows written alone: the floor of what the storage itself asks
//! of a decision on this machine, measured in the same run as the scenario.
//!
//! The rows are the ones the contract keeps for every decision: the proposal,
//! its state changes, its events, its decision and its audit entry. They go
//! into tables with the schema's own columns and indexes and nothing else: no
//! trigger, foreign key, row-level security, queue entry, cursor counter or
//! read (no facts, no fan-out, no check at commit). They are written as the
//! run's path writes them ([`Path`]): a Submit that waits is decided as it is
//! stored (the proposal inserted decided, its two events and its decision in
//! one transaction, the audit append in another); a queued one takes two
//! state changes (REVIEWING, then decided) and three events, one transaction
//! a step (the submissions' group, the reviews' start, their record, the
//! audit append). Each step's rows in one statement a table, as many
//! decisions a transaction as the run has clients: every decision a closed
//! loop of that width has in flight rides every commit, the most a group
//! commit could share. So the figure is a floor, a rate no server on these
//! rows can pass; the run's own rate and its database's CPU a decision are
//! read beside it.
//!
//! Embedded: one connection (the store has one writer) on a SQLite file
//! migrated by the run's `countersign` and stripped of its triggers, in WAL
//! mode with `synchronous=FULL` as the store runs. PostgreSQL: copies of the
//! tables (`LIKE … INCLUDING ALL`: columns, defaults, checks and indexes) in
//! the run's database, written by `pgbench` with prepared statements from as
//! many clients as the pgbench baseline, and dropped afterwards.

use std::{
    collections::BTreeMap,
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use sqlx::{
    ConnectOptions, Connection, PgConnection,
    sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous},
};

use crate::production::{Production, pgbench_binary};

/// The first proposal number: every id has the same number of digits, so ids
/// sort as they are made, as ULIDs do.
const FIRST: i64 = 1_000_000_000_000;

/// What the rows alone came to.
pub struct RowsFloor {
    pub decisions_per_s: f64,
    /// PostgreSQL's CPU milliseconds a decision (none embedded, or when the
    /// reading failed).
    pub postgres_cpu_ms: Option<f64>,
}

impl RowsFloor {
    pub fn baselines(&self) -> BTreeMap<String, f64> {
        let mut baselines =
            BTreeMap::from([("decision_rows_alone_per_s".to_owned(), self.decisions_per_s)]);
        if let Some(ms) = self.postgres_cpu_ms {
            baselines.insert(
                "decision_rows_alone_postgres_cpu_ms_per_decision".to_owned(),
                ms,
            );
        }
        baselines
    }
}

/// A batch's proposals, PENDING (queued for the reviewers). Each statement's
/// text has `{t}` before every table name and `{b}` for the batch's first
/// number.
const PROPOSALS_PENDING: &str = "INSERT INTO {t}proposals (id, tenant, action, class, target,
     blast_radius, operator, spec_json, spec_digest, state, submitted_by, created_at, updated_at,
     suppressed_retries)
 SELECT 'P' || (CAST({b} AS BIGINT) + n), 'default', 'bench_restart', 'write',
     'bench-' || ((CAST({b} AS BIGINT) + n) % 50), 'single_device', 'bench',
     '{spec}', '{digest}', 'pending', 'bench', CAST({b} AS BIGINT) + n,
     CAST({b} AS BIGINT) + n, 0
 FROM g";

/// A batch's proposals, inserted decided.
const PROPOSALS_DECIDED: &str = "INSERT INTO {t}proposals (id, tenant, action, class, target,
     blast_radius, operator, spec_json, spec_digest, state, submitted_by, created_at, updated_at,
     suppressed_retries, review_started_at, decided_at)
 SELECT 'P' || (CAST({b} AS BIGINT) + n), 'default', 'bench_restart', 'write',
     'bench-' || ((CAST({b} AS BIGINT) + n) % 50), 'single_device', 'bench',
     '{spec}', '{digest}', 'approved', 'bench', CAST({b} AS BIGINT) + n,
     CAST({b} AS BIGINT) + n, 0, CAST({b} AS BIGINT) + n, CAST({b} AS BIGINT) + n + 1
 FROM g";

const SUBMITTED: &str = "INSERT INTO {t}events (cursor, tenant, proposal_id, kind, state,
     created_at, tenant_cursor)
 SELECT (CAST({b} AS BIGINT) + n) * 3, 'default', 'P' || (CAST({b} AS BIGINT) + n),
     'SUBMITTED', 'pending', CAST({b} AS BIGINT) + n, (CAST({b} AS BIGINT) + n) * 3
 FROM g";

const REVIEW_STARTED: [&str; 2] = [
    "UPDATE {t}proposals SET state = 'reviewing', review_started_at = updated_at + 1,
         updated_at = updated_at + 1
     WHERE id IN (SELECT 'P' || (CAST({b} AS BIGINT) + n) FROM g)",
    "INSERT INTO {t}events (cursor, tenant, proposal_id, kind, state, created_at, tenant_cursor)
     SELECT (CAST({b} AS BIGINT) + n) * 3 + 1, 'default', 'P' || (CAST({b} AS BIGINT) + n),
         'REVIEW_STARTED', 'reviewing', CAST({b} AS BIGINT) + n + 1,
         (CAST({b} AS BIGINT) + n) * 3 + 1
     FROM g",
];

const DECIDED_STATE: &str = "UPDATE {t}proposals SET state = 'approved',
     decided_at = updated_at + 7, updated_at = updated_at + 7
 WHERE id IN (SELECT 'P' || (CAST({b} AS BIGINT) + n) FROM g)";

const DECISIONS: &str = "INSERT INTO {t}decisions (proposal_id, tenant, outcome, reason,
     agent_message, sop_id, sop_version, rollback_path, gates_json, missing_gates_json, reviewer,
     decided_at, summary, review_latency_ms)
 SELECT 'P' || (CAST({b} AS BIGINT) + n), 'default', 'approve', 'every gate passed',
     'Approved.', 'SOP-BENCH', 1, 'start it again', '{gates}', '[]', 'countersign-1/0',
     CAST({b} AS BIGINT) + n + 8, '{summary}', 7
 FROM g";

const DECIDED_EVENTS: &str = "INSERT INTO {t}events (cursor, tenant, proposal_id, kind, state,
     created_at, tenant_cursor)
 SELECT (CAST({b} AS BIGINT) + n) * 3 + 2, 'default', 'P' || (CAST({b} AS BIGINT) + n),
     'APPROVED', 'approved', CAST({b} AS BIGINT) + n + 8, (CAST({b} AS BIGINT) + n) * 3 + 2
 FROM g";

const AUDIT: &str = "INSERT INTO {t}audit_log (tenant, sequence, proposal_id, decided_at,
     action, target, operator, submitted_by, outcome, blast_radius, sop_id, record, digest,
     decided_max, lateness_max)
 SELECT 'default', CAST({b} AS BIGINT) + n, 'P' || (CAST({b} AS BIGINT) + n),
     CAST({b} AS BIGINT) + n + 8, 'bench_restart',
     'bench-' || ((CAST({b} AS BIGINT) + n) % 50), 'bench', 'bench', 'approve',
     'single_device', 'SOP-BENCH', '{record}', '{digest}', CAST({b} AS BIGINT) + n + 8, 0
 FROM g";

/// Which path's rows, as the run's Submit takes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// A Submit that waits: decided in the transaction that stores it.
    DecidedAsStored,
    /// Queued for the reviewers: stored, its review started, recorded.
    Queued,
}

impl Path {
    /// The path's transactions, each its statements.
    fn steps(self) -> Vec<Vec<&'static str>> {
        match self {
            Path::DecidedAsStored => vec![
                vec![PROPOSALS_DECIDED, SUBMITTED, DECISIONS, DECIDED_EVENTS],
                vec![AUDIT],
            ],
            Path::Queued => vec![
                vec![PROPOSALS_PENDING, SUBMITTED],
                REVIEW_STARTED.to_vec(),
                vec![DECIDED_STATE, DECISIONS, DECIDED_EVENTS],
                vec![AUDIT],
            ],
        }
    }
}

/// The numbers 1..=batch as `g(n)`, in SQL both backends read.
fn series(batch: i64) -> String {
    format!("WITH RECURSIVE g(n) AS (VALUES (1) UNION ALL SELECT n + 1 FROM g WHERE n < {batch}) ")
}

/// One statement of a [`Path`]'s steps for a backend: `tables` before every table
/// name, `base` for the batch's first number. Its literals put no colon right
/// before a word (pgbench would read `:word` as one of its variables).
fn statement(text: &str, tables: &str, base: &str, batch: i64) -> String {
    let gates = (["sop", "target_state", "no_parallel_operation", "rollback", "blast_radius"])
        .map(|gate| {
            format!(r#"{{"gate": "{gate}", "passed": true, "detail": "{gate} holds for bench-37 under SOP-BENCH v1"}}"#)
        })
        .join(",");
    let summary = "Decision - approve\n\nGates\n- sop ✓\n- target_state ✓\n- no_parallel_operation ✓\n- rollback ✓\n- blast_radius ✓";
    let spec = r#"{"action": "bench_restart", "class": "write", "target": "bench-37", "parameters": {"n": 37.0}, "reason": "benchmark", "blast_radius": "single_device", "operator": "bench", "context_summary": "", "incident_id": "", "labels": {}, "rollback_plan": "", "force_approve_no_sop": false, "idempotency_key": ""}"#;
    // An audit record is the decision as JSON, about 1.7 KB.
    let record = format!(r#"{{"decision": "{}"}}"#, "r".repeat(1_700));
    format!(
        "{}{}",
        series(batch),
        text.replace("{t}", tables)
            .replace("{b}", base)
            .replace("{spec}", spec)
            .replace("{digest}", &"8f".repeat(32))
            .replace("{gates}", &format!("[{gates}]"))
            .replace("{summary}", summary)
            .replace("{record}", &record)
    )
}

/// The rows alone on the run's backend, `batch` decisions a transaction, for
/// `span`.
pub async fn measure(
    production: Option<&Production>,
    binary: &std::path::Path,
    path: Path,
    pgbench_clients: u32,
    batch: u64,
    span: Duration,
) -> anyhow::Result<RowsFloor> {
    let batch = i64::try_from(batch.max(1)).unwrap_or(i64::MAX);
    match production {
        None => sqlite(binary, path, batch, span).await,
        Some(p) => postgres(p, path, pgbench_clients, batch, span).await,
    }
}

async fn sqlite(
    binary: &std::path::Path,
    path: Path,
    batch: i64,
    span: Duration,
) -> anyhow::Result<RowsFloor> {
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("rows.db");
    let output = Command::new(binary)
        .arg("migrate")
        .arg("--data-dir")
        .arg(dir.path())
        .arg("--database-url")
        .arg(format!("sqlite://{}", file.display()))
        .output()
        .context("running countersign migrate")?;
    if !output.status.success() {
        bail!(
            "countersign migrate: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let mut conn = SqliteConnectOptions::new()
        .filename(&file)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Full)
        .foreign_keys(false)
        .connect()
        .await?;
    let triggers: Vec<String> =
        sqlx::query_scalar("SELECT name FROM sqlite_master WHERE type = 'trigger'")
            .fetch_all(&mut conn)
            .await?;
    for trigger in triggers {
        sqlx::query(&format!("DROP TRIGGER \"{trigger}\""))
            .execute(&mut conn)
            .await?;
    }
    let steps: Vec<Vec<String>> = path
        .steps()
        .iter()
        .map(|step| step.iter().map(|s| statement(s, "", "?1", batch)).collect())
        .collect();
    let started = Instant::now();
    let mut base = FIRST;
    while started.elapsed() < span {
        for step in &steps {
            let mut tx = conn.begin().await?;
            for sql in step {
                sqlx::query(sql).bind(base).execute(&mut *tx).await?;
            }
            tx.commit().await?;
        }
        base += batch;
    }
    let decided = (base - FIRST) as f64;
    Ok(RowsFloor {
        decisions_per_s: decided / started.elapsed().as_secs_f64(),
        postgres_cpu_ms: None,
    })
}

/// The tables written, as copies in the run's database.
const TABLES: [&str; 4] = ["proposals", "events", "decisions", "audit_log"];
const PREFIX: &str = "bench_rows_";

async fn postgres(
    p: &Production,
    path: Path,
    clients: u32,
    batch: i64,
    span: Duration,
) -> anyhow::Result<RowsFloor> {
    let mut conn = PgConnection::connect(&p.owner_url).await?;
    for table in TABLES {
        sqlx::query(&format!(
            "CREATE TABLE {PREFIX}{table} (LIKE {table} INCLUDING ALL)"
        ))
        .execute(&mut conn)
        .await?;
    }
    // Drawn by the server's trigger in the schema; a sequence of the copy's own here.
    sqlx::raw_sql(&format!(
        "CREATE SEQUENCE {PREFIX}commit_order;
         ALTER TABLE {PREFIX}decisions ALTER COLUMN commit_order
             SET DEFAULT nextval('{PREFIX}commit_order');
         CREATE SEQUENCE {PREFIX}batches START {} INCREMENT {batch} MINVALUE {}",
        FIRST, FIRST
    ))
    .execute(&mut conn)
    .await?;
    let measured = pgbench(p, path, clients, batch, span).await;
    let mut drop = String::new();
    for table in TABLES {
        drop.push_str(&format!("DROP TABLE {PREFIX}{table}; "));
    }
    drop.push_str(&format!(
        "DROP SEQUENCE {PREFIX}commit_order, {PREFIX}batches;"
    ));
    sqlx::raw_sql(&drop).execute(&mut conn).await?;
    measured
}

async fn pgbench(
    p: &Production,
    path: Path,
    clients: u32,
    batch: i64,
    span: Duration,
) -> anyhow::Result<RowsFloor> {
    let mut script = format!("SELECT nextval('{PREFIX}batches') AS b \\gset\n");
    for step in path.steps() {
        script.push_str("BEGIN;\n");
        for sql in step {
            // pgbench reads one statement a line, to its semicolon.
            let one_line = statement(sql, PREFIX, ":b", batch).replace('\n', " ");
            script.push_str(&one_line);
            script.push_str(";\n");
        }
        script.push_str("COMMIT;\n");
    }
    let file = tempfile::NamedTempFile::new()?;
    std::fs::write(file.path(), script)?;
    let seconds = span.as_secs().max(2);
    let cpu_before = crate::server::cpu_of_processes("postgres");
    let output = Command::new(pgbench_binary())
        .args(["-n", "-M", "prepared", "-c", &clients.to_string()])
        .args([
            "-j",
            &clients.min(4).to_string(),
            "-T",
            &seconds.to_string(),
        ])
        .arg("-f")
        .arg(file.path())
        .arg(&p.owner_url)
        .output()
        .context("running pgbench (install postgresql-client)")?;
    let text = String::from_utf8_lossy(&output.stdout);
    let failed = String::from_utf8_lossy(&output.stderr);
    let scripts = crate::production::parse_pgbench_tps(&text)
        .with_context(|| format!("pgbench printed no tps: {text}{failed}"))?;
    if failed.contains("aborted") {
        bail!("pgbench: {failed}");
    }
    // The backends' time is the postmaster's once it has reaped them.
    let mut cpu_ms = 0.0;
    for _ in 0..40 {
        cpu_ms = (crate::server::cpu_of_processes("postgres") - cpu_before) * 1000.0;
        if cpu_ms > 0.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let decisions_per_s = scripts * batch as f64;
    let decided = decisions_per_s * seconds as f64;
    Ok(RowsFloor {
        decisions_per_s,
        postgres_cpu_ms: (cpu_ms > 0.0).then(|| cpu_ms / decided.max(1.0)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const BATCH: i64 = 10;

    /// pgbench substitutes `:name` wherever it appears, string literals too:
    /// the statements name no variable but the batch's.
    #[test]
    fn the_statements_name_no_pgbench_variable_but_the_batch() {
        let steps = [Path::Queued, Path::DecidedAsStored].map(Path::steps);
        for step in steps.iter().flatten() {
            for sql in step {
                let text = statement(sql, PREFIX, ":b", BATCH);
                let variables: Vec<&str> = text
                    .match_indices(':')
                    .filter(|(at, _)| {
                        let after = &text[at + 1..];
                        let before = text[..*at].chars().last();
                        before != Some(':')
                            && after.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                    })
                    .map(|(at, _)| &text[at..(at + 2).min(text.len())])
                    .collect();
                assert!(
                    variables.iter().all(|v| *v == ":b"),
                    "{variables:?} in {text}"
                );
                assert!(text.contains(":b"), "{text}");
            }
        }
    }

    /// Each path's statements write `BATCH` rows into an embedded schema's
    /// tables, and every row the contract keeps for a decision is there: the
    /// queued path's three events, the decided-as-stored path's two.
    #[tokio::test]
    async fn the_rows_of_a_batch_are_the_contracts_rows_of_each_decision() {
        for (path, events) in [(Path::Queued, 3), (Path::DecidedAsStored, 2)] {
            let mut conn = SqliteConnectOptions::new()
                .in_memory(true)
                .foreign_keys(false)
                .connect()
                .await
                .unwrap();
            for table in TABLES {
                let columns = match table {
                    "proposals" => {
                        "id TEXT PRIMARY KEY, tenant, action, class, target, blast_radius,
                         operator, spec_json, spec_digest, state, submitted_by, created_at,
                         updated_at, suppressed_retries, review_started_at, decided_at"
                    }
                    "events" => {
                        "cursor INTEGER PRIMARY KEY, tenant, proposal_id, kind, state,
                         created_at, tenant_cursor"
                    }
                    "decisions" => {
                        "proposal_id TEXT PRIMARY KEY, tenant, outcome, reason, agent_message,
                         sop_id, sop_version, rollback_path, gates_json, missing_gates_json,
                         reviewer, decided_at, summary, review_latency_ms"
                    }
                    _ => {
                        "tenant, sequence, proposal_id UNIQUE, decided_at, action, target,
                         operator, submitted_by, outcome, blast_radius, sop_id, record, digest,
                         decided_max, lateness_max"
                    }
                };
                sqlx::query(&format!("CREATE TABLE {table} ({columns})"))
                    .execute(&mut conn)
                    .await
                    .unwrap();
            }
            for step in path.steps() {
                for sql in step {
                    sqlx::query(&statement(sql, "", "?1", BATCH))
                        .bind(FIRST)
                        .execute(&mut conn)
                        .await
                        .unwrap();
                }
            }
            async fn count(conn: &mut sqlx::SqliteConnection, sql: &str) -> i64 {
                sqlx::query_scalar(sql).fetch_one(conn).await.unwrap()
            }
            let approved = "SELECT COUNT(*) FROM proposals WHERE state = 'approved'
                            AND review_started_at IS NOT NULL AND decided_at IS NOT NULL";
            assert_eq!(count(&mut conn, approved).await, BATCH, "{path:?}");
            assert_eq!(
                count(&mut conn, "SELECT COUNT(*) FROM events").await,
                events * BATCH,
                "{path:?}"
            );
            let kinds = "SELECT COUNT(DISTINCT kind) FROM events";
            assert_eq!(count(&mut conn, kinds).await, events, "{path:?}");
            let decisions = "SELECT COUNT(*) FROM decisions";
            assert_eq!(count(&mut conn, decisions).await, BATCH, "{path:?}");
            let audit = "SELECT COUNT(*) FROM audit_log";
            assert_eq!(count(&mut conn, audit).await, BATCH, "{path:?}");
        }
    }
}
