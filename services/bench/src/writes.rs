//! What a measured run wrote, per decision: the rows, the index entries they
//! touched, and the bytes the database wrote for them.
//!
//! Embedded: rows by table and operation from the server's
//! `countersign_sqlite_rows_written_total` (SQLite's update hook on the
//! writer, triggers' rows included); the bytes the server's SQLite threads
//! wrote (`wchar` of `/proc/<pid>/task/*/io`: WAL frames and the checkpoints
//! that copy them into the database file; only the writer writes); the
//! transactions it committed (`countersign_sqlite_commits_total`). Production:
//! PostgreSQL's own counts for the run's database (`pg_stat_user_tables`:
//! inserted, updated, of them heap-only (HOT), deleted), the WAL it wrote
//! (`pg_current_wal_lsn()` before and after: the whole cluster's, so a run
//! beside other work on it counts that work too), its transactions
//! (`pg_stat_database`) and, where `pg_stat_statements` is loaded, its
//! statements.
//!
//! Index entries are an estimate from the schema: every row inserted,
//! updated or deleted counts one entry in each index of its table (SQLite's
//! partial indexes as if the row matched, and updates as if they moved every
//! indexed column: an upper bound); on PostgreSQL inserts and updates that
//! are not HOT, each in every index (a delete leaves its entries to vacuum).

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context;
use sqlx::{Connection, PgConnection, Row, SqliteConnection};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::server::Server;

/// Rows written to one table.
#[derive(Debug, Clone, Copy, Default)]
struct TableRows {
    inserted: f64,
    updated: f64,
    /// Updates that touched no index (PostgreSQL's heap-only tuples).
    hot_updated: f64,
    deleted: f64,
}

/// The counters at one moment.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    tables: BTreeMap<String, TableRows>,
    log_bytes: f64,
    transactions: Option<f64>,
    statements: Option<f64>,
}

/// SQLite's sequencer appends to the audit log just after the decisions: an
/// embedded snapshot waits this long for it.
const SETTLE_EMBEDDED: Duration = Duration::from_millis(1500);

/// A PostgreSQL backend publishes its counts when it goes idle, but no more
/// than once a second: one that published less than a second before holds
/// the rest until its idle timer fires, 10 s later (`PGSTAT_IDLE_INTERVAL`).
/// Under load every pooled connection is in that case, so a snapshot waits
/// out the timer, or the previous phase's last rows land in the window.
const SETTLE_POSTGRES: Duration = Duration::from_millis(11_000);

impl Snapshot {
    /// The counters now, once the writes before this call have settled.
    pub async fn take(server: &Server) -> anyhow::Result<Snapshot> {
        match &server.production {
            Some(production) => {
                tokio::time::sleep(SETTLE_POSTGRES).await;
                postgres(&production.owner_url).await
            }
            None => {
                tokio::time::sleep(SETTLE_EMBEDDED).await;
                embedded(server).await
            }
        }
    }
}

async fn embedded(server: &Server) -> anyhow::Result<Snapshot> {
    let text = scrape(&server.metrics).await?;
    let mut tables: BTreeMap<String, TableRows> = BTreeMap::new();
    let mut commits = None;
    for line in text.lines() {
        if let Some(value) = line.strip_prefix("countersign_sqlite_commits_total ") {
            commits = value.trim().parse::<f64>().ok();
            continue;
        }
        let Some(rest) = line.strip_prefix("countersign_sqlite_rows_written_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let label = |name: &str| {
            labels
                .split(',')
                .find_map(|l| l.strip_prefix(&format!("{name}=\"")))
                .map(|v| v.trim_end_matches('"').to_owned())
        };
        let (Some(table), Some(op), Ok(value)) =
            (label("table"), label("op"), value.parse::<f64>())
        else {
            continue;
        };
        let rows = tables.entry(table).or_default();
        match op.as_str() {
            "insert" => rows.inserted += value,
            "delete" => rows.deleted += value,
            // Updates, and the WITHOUT ROWID tables' rows of any kind.
            _ => rows.updated += value,
        }
    }
    Ok(Snapshot {
        tables,
        log_bytes: sqlite_thread_bytes(server.pid()),
        transactions: commits,
        statements: None,
    })
}

/// `GET /metrics` over HTTP/1.0 on `addr`; the body.
async fn scrape(addr: &str) -> anyhow::Result<String> {
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .with_context(|| format!("reaching the metrics endpoint {addr}"))?;
    stream
        .write_all(format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    Ok(response
        .split_once("\r\n\r\n")
        .map_or(response.as_str(), |(_, body)| body)
        .to_owned())
}

/// Bytes written by the server's SQLite threads (`countersign-sqlite-…`,
/// `countersign-sql` once the kernel has cut the name to 15 bytes).
fn sqlite_thread_bytes(pid: u32) -> f64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0.0;
    };
    tasks
        .flatten()
        .filter(|task| {
            std::fs::read_to_string(task.path().join("comm"))
                .is_ok_and(|comm| comm.starts_with("countersign-sql"))
        })
        .filter_map(|task| std::fs::read_to_string(task.path().join("io")).ok())
        .filter_map(|io| {
            io.lines()
                .find_map(|l| l.strip_prefix("wchar:"))
                .and_then(|v| v.trim().parse::<f64>().ok())
        })
        .sum()
}

async fn postgres(owner_url: &str) -> anyhow::Result<Snapshot> {
    // A connection of its own: a snapshot of the statistics is per transaction.
    let mut conn = PgConnection::connect(owner_url).await?;
    let mut tables = BTreeMap::new();
    for row in sqlx::query(
        "SELECT relname::text, n_tup_ins::float8, n_tup_upd::float8, n_tup_hot_upd::float8,
                n_tup_del::float8
         FROM pg_stat_user_tables",
    )
    .fetch_all(&mut conn)
    .await?
    {
        tables.insert(
            row.try_get::<String, _>(0)?,
            TableRows {
                inserted: row.try_get(1)?,
                updated: row.try_get(2)?,
                hot_updated: row.try_get(3)?,
                deleted: row.try_get(4)?,
            },
        );
    }
    let log_bytes: f64 =
        sqlx::query_scalar("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::float8")
            .fetch_one(&mut conn)
            .await?;
    let transactions: f64 = sqlx::query_scalar(
        "SELECT (xact_commit + xact_rollback)::float8 FROM pg_stat_database
         WHERE datname = current_database()",
    )
    .fetch_one(&mut conn)
    .await?;
    // Absent unless the cluster preloads the extension and the database has it.
    let statements: Option<f64> = sqlx::query_scalar(
        "SELECT sum(calls)::float8 FROM pg_stat_statements
         WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())",
    )
    .fetch_one(&mut conn)
    .await
    .ok()
    .flatten();
    conn.close().await.ok();
    Ok(Snapshot {
        tables,
        log_bytes,
        transactions: Some(transactions),
        statements,
    })
}

/// Indexes per table, from the schema.
async fn indexes(server: &Server) -> anyhow::Result<BTreeMap<String, f64>> {
    let query = match server.production {
        Some(_) => {
            "SELECT relname::text, COUNT(*)::float8 FROM pg_stat_user_indexes GROUP BY relname"
        }
        None => {
            "SELECT tbl_name, CAST(COUNT(*) AS REAL) FROM sqlite_master WHERE type = 'index'
             GROUP BY tbl_name"
        }
    };
    let rows = match &server.production {
        Some(production) => {
            let mut conn = PgConnection::connect(&production.owner_url).await?;
            let rows: Vec<(String, f64)> = sqlx::query_as(query).fetch_all(&mut conn).await?;
            conn.close().await.ok();
            rows
        }
        None => {
            let file = server.data_dir.path().join("countersign.db");
            let url = format!("sqlite://{}?mode=ro", file.display());
            let mut conn = SqliteConnection::connect(&url).await?;
            let rows: Vec<(String, f64)> = sqlx::query_as(query).fetch_all(&mut conn).await?;
            conn.close().await.ok();
            rows
        }
    };
    Ok(rows.into_iter().collect())
}

/// What was written between `before` and `after`, per decision: the totals
/// (`rows`, `index_entries`, `log_bytes`, `transactions`, `statements`) and
/// each table's rows by operation (`rows <table> <op>`) with its indexes.
pub async fn per_decision(
    server: &Server,
    before: &Snapshot,
    after: &Snapshot,
    decisions: u64,
) -> anyhow::Result<BTreeMap<String, f64>> {
    let indexes = indexes(server).await?;
    let production = server.production.is_some();
    let n = decisions.max(1) as f64;
    let mut out = BTreeMap::new();
    let (mut rows, mut entries) = (0.0, 0.0);
    for (table, now) in &after.tables {
        let then = before.tables.get(table).copied().unwrap_or_default();
        let d = TableRows {
            inserted: now.inserted - then.inserted,
            updated: now.updated - then.updated,
            hot_updated: now.hot_updated - then.hot_updated,
            deleted: now.deleted - then.deleted,
        };
        let written = d.inserted + d.updated + d.deleted;
        if written <= 0.0 {
            continue;
        }
        let per_row = indexes.get(table).copied().unwrap_or_default();
        let touched = if production {
            (d.inserted + d.updated - d.hot_updated) * per_row
        } else {
            written * per_row
        };
        rows += written;
        entries += touched;
        for (op, value) in [
            ("insert", d.inserted),
            ("update", d.updated),
            ("delete", d.deleted),
        ] {
            if value > 0.0 {
                out.insert(format!("rows {table} {op}"), value / n);
            }
        }
        if production && d.hot_updated > 0.0 {
            out.insert(format!("rows {table} hot update"), d.hot_updated / n);
        }
        out.insert(
            format!("index entries {table} ({per_row} indexes)"),
            touched / n,
        );
    }
    out.insert("rows".into(), rows / n);
    out.insert("index_entries".into(), entries / n);
    out.insert("log_bytes".into(), (after.log_bytes - before.log_bytes) / n);
    if let (Some(a), Some(b)) = (after.transactions, before.transactions) {
        // The snapshots' own few statements are counted too: nothing beside
        // thousands of decisions.
        out.insert("transactions".into(), (a - b) / n);
    }
    if let (Some(a), Some(b)) = (after.statements, before.statements) {
        out.insert("statements".into(), (a - b) / n);
    }
    Ok(out)
}
