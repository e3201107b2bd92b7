//! The rows the writer writes, counted on `/metrics` as
//! `countersign_sqlite_rows_written_total{table, op}`: what the benchmark
//! divides by its decisions (rows, and with the schema's indexes per table,
//! the index entries they touch). SQLite's update hook names the table and
//! the operation of every row a statement or a trigger inserts, updates or
//! deletes in a rowid table; the rows of WITHOUT ROWID tables, which it does
//! not report, are the connection's change count less the hook's
//! (`table="without_rowid"`). Rows of a transaction rolled back are counted
//! too: they were written. The transactions it commits are counted as
//! `countersign_sqlite_commits_total` (SQLite's commit hook, which sees
//! every commit, explicit or of a statement on its own).

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

use metrics::Counter;
use rusqlite::{Connection, hooks::Action};

const ROWS_WRITTEN: &str = "countersign_sqlite_rows_written_total";
const COMMITS: &str = "countersign_sqlite_commits_total";

/// The counts of one connection, from [`RowCounter::install`] on.
pub(crate) struct RowCounter {
    /// Rows the hook has reported.
    hooked: Arc<AtomicU64>,
    /// The connection's change count at the last [`RowCounter::settle`].
    changes: u64,
    /// Rows the hook has reported at the last settle.
    hooked_then: u64,
    without_rowid: Counter,
}

fn operation(action: Action) -> &'static str {
    match action {
        Action::SQLITE_INSERT => "insert",
        Action::SQLITE_UPDATE => "update",
        Action::SQLITE_DELETE => "delete",
        _ => "other",
    }
}

impl RowCounter {
    /// Counts every row `conn` writes from now on.
    pub(crate) fn install(conn: &Connection) -> RowCounter {
        let hooked = Arc::new(AtomicU64::new(0));
        let seen = hooked.clone();
        // One counter per (table, operation), found by a scan of the few the
        // schema has: no allocation once each has been written.
        let mut counters: Vec<(String, &'static str, Counter)> = Vec::new();
        conn.update_hook(Some(
            move |action: Action, _database: &str, table: &str, _rowid: i64| {
                seen.fetch_add(1, Ordering::Relaxed);
                let op = operation(action);
                match counters.iter().find(|(t, o, _)| t == table && *o == op) {
                    Some((_, _, counter)) => counter.increment(1),
                    None => {
                        let counter =
                            metrics::counter!(ROWS_WRITTEN, "table" => table.to_owned(), "op" => op);
                        counter.increment(1);
                        counters.push((table.to_owned(), op, counter));
                    }
                }
            },
        ));
        let commits = metrics::counter!(COMMITS);
        // `false`: the hook lets every commit go through.
        conn.commit_hook(Some(move || {
            commits.increment(1);
            false
        }));
        RowCounter {
            hooked,
            changes: conn.total_changes(),
            hooked_then: 0,
            without_rowid: metrics::counter!(ROWS_WRITTEN, "table" => "without_rowid", "op" => "any"),
        }
    }

    /// Counts the rows of WITHOUT ROWID tables written since the last
    /// settle: the connection's changes the hook did not report.
    pub(crate) fn settle(&mut self, conn: &Connection) {
        let changes = conn.total_changes();
        let hooked = self.hooked.load(Ordering::Relaxed);
        let unseen = changes
            .saturating_sub(self.changes)
            .saturating_sub(hooked - self.hooked_then);
        if unseen > 0 {
            self.without_rowid.increment(unseen);
        }
        (self.changes, self.hooked_then) = (changes, hooked);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows written by statements and by triggers, in rowid tables by table
    /// and operation, in WITHOUT ROWID tables together; each commit once.
    #[test]
    fn every_row_written_is_counted_by_table_and_operation() {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || {
            let conn = Connection::open_in_memory().unwrap();
            conn.execute_batch(
                "CREATE TABLE t (n INTEGER);
                 CREATE TABLE log (n INTEGER);
                 CREATE TABLE tally (k TEXT PRIMARY KEY, n INTEGER) WITHOUT ROWID;
                 CREATE TRIGGER t_logged AFTER INSERT ON t BEGIN
                     INSERT INTO log (n) VALUES (NEW.n);
                     INSERT INTO tally (k, n) VALUES ('t', 1)
                         ON CONFLICT (k) DO UPDATE SET n = n + 1;
                 END;",
            )
            .unwrap();
            let mut counter = RowCounter::install(&conn);
            conn.execute_batch(
                "INSERT INTO t VALUES (1); INSERT INTO t VALUES (2);
                 UPDATE t SET n = n + 1; DELETE FROM t WHERE n = 3;",
            )
            .unwrap();
            conn.execute_batch(
                "BEGIN; INSERT INTO t VALUES (5); INSERT INTO t VALUES (6); COMMIT;",
            )
            .unwrap();
            conn.execute_batch("BEGIN; INSERT INTO t VALUES (7); ROLLBACK;")
                .unwrap();
            counter.settle(&conn);
        });
        let rendered = handle.render();
        for line in [
            r#"countersign_sqlite_rows_written_total{table="t",op="insert"} 5"#,
            r#"countersign_sqlite_rows_written_total{table="log",op="insert"} 5"#,
            r#"countersign_sqlite_rows_written_total{table="t",op="update"} 2"#,
            r#"countersign_sqlite_rows_written_total{table="t",op="delete"} 1"#,
            r#"countersign_sqlite_rows_written_total{table="without_rowid",op="any"} 5"#,
            // Four statements on their own and one transaction; the one
            // rolled back commits nothing.
            "countersign_sqlite_commits_total 5",
        ] {
            assert!(rendered.contains(line), "{line} in\n{rendered}");
        }
    }
}
