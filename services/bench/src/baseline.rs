//! This machine's own limits, measured in the same run as the scenario.

use std::time::{Duration, Instant};

use sqlx::{
    ConnectOptions,
    sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous},
};

/// Single-row inserts per second into SQLite (WAL, synchronous=FULL, as the
/// embedded store runs), one row per transaction, one connection, for `span`.
pub async fn sqlite_insert_rate(span: Duration) -> anyhow::Result<f64> {
    let dir = tempfile::tempdir()?;
    let mut conn = SqliteConnectOptions::new()
        .filename(dir.path().join("baseline.db"))
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Full)
        .connect()
        .await?;
    sqlx::query(
        "CREATE TABLE t (id INTEGER PRIMARY KEY, tenant TEXT NOT NULL, body TEXT NOT NULL)",
    )
    .execute(&mut conn)
    .await?;
    let body = "x".repeat(200);
    let started = Instant::now();
    let mut rows = 0u64;
    while started.elapsed() < span {
        sqlx::query("INSERT INTO t (tenant, body) VALUES (?, ?)")
            .bind("bench")
            .bind(&body)
            .execute(&mut conn)
            .await?;
        rows += 1;
    }
    Ok(rows as f64 / started.elapsed().as_secs_f64())
}
