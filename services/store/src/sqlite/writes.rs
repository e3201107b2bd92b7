//! The writer's own thread. SQLite has one writer; this thread owns the
//! store's only write connection and runs every write on it, one job after
//! another ([`SqliteWriter::run`]): a job is a synchronous closure that runs
//! its statements here, on this thread, so no statement is handed to another
//! thread and back (a transaction is a run of statements; handing each to a
//! connection's thread and its answer back to a task on the server's runtime,
//! which queues behind request handlers, held the single writer for all those
//! hand-offs). A caller hands its job over once and hears back once. The
//! connection keeps its statements prepared from job to job. A review batch's
//! facts are read here too, in a read transaction between writes: a few
//! hundred microseconds of SQLite's work, against the hand-offs to a reader.
//! BENCHMARKS.md has what the thread and the synchronous jobs gain on the
//! 10,000 × 32 benchmark.

use std::panic::AssertUnwindSafe;
use std::sync::mpsc;

use rusqlite::Connection;
use tokio::sync::oneshot;

/// The thread the single writer connection lives on.
#[derive(Debug, Clone)]
pub struct SqliteWriter {
    jobs: mpsc::Sender<Job>,
}

/// A job got no answer: it panicked (the thread serves on), or the thread is
/// gone (it ends only when its last handle does).
#[derive(Debug, thiserror::Error)]
#[error("the SQLite write job did not finish (it panicked, or the write thread stopped)")]
pub struct WriteThreadStopped;

/// A job on the connection; `false` if it panicked.
type Job = Box<dyn FnOnce(&mut Connection) -> bool + Send>;

/// Runs the jobs one after another until every handle is gone.
fn serve(mut conn: Connection, jobs: mpsc::Receiver<Job>) {
    let mut rows = super::accounting::RowCounter::install(&conn);
    for job in jobs {
        // A job that panicked has answered no one; its caller hears
        // `WriteThreadStopped` from the dropped reply.
        let _ = job(&mut conn);
        // Never carry a transaction a job left open into the next job's writes
        // (which would commit it).
        if !conn.is_autocommit() {
            let _ = conn.execute_batch("ROLLBACK");
        }
        rows.settle(&conn);
    }
}

impl SqliteWriter {
    /// Starts the thread on `conn`; it ends once every handle to it is gone,
    /// and closes the connection.
    pub(crate) fn start(conn: Connection) -> std::io::Result<Self> {
        let (jobs, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("countersign-sqlite-writes".into())
            .spawn(move || serve(conn, rx))?;
        Ok(SqliteWriter { jobs })
    }

    /// Runs `job` on the write thread, with the writer's connection, in the
    /// caller's span. Jobs run one at a time, in the order they came; a
    /// transaction the job leaves open is rolled back; a job that panics
    /// answers [`WriteThreadStopped`] and the thread serves on.
    pub(crate) async fn run<T, F>(&self, job: F) -> Result<T, WriteThreadStopped>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> T + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let span = tracing::Span::current();
        let job: Job = Box::new(move |conn| {
            let _in_span = span.enter();
            match std::panic::catch_unwind(AssertUnwindSafe(|| job(conn))) {
                Ok(done) => {
                    let _ = reply.send(done);
                    true
                }
                Err(_) => false,
            }
        });
        self.jobs.send(job).map_err(|_| WriteThreadStopped)?;
        answer.await.map_err(|_| WriteThreadStopped)
    }

    /// Runs `job` as [`SqliteWriter::run`] does, but its commit does not wait
    /// for the disk (`synchronous = NORMAL` for this job alone, then the
    /// connection's own setting again, even if the job panics): for writes
    /// a crash may take back because everything that depends on them
    /// recovers without them (the queue's leases and acks). The log is
    /// written in order and the next commit that waits syncs all of it, so
    /// no durable write ever stands on one that was lost.
    pub(crate) async fn run_unsynced<T, F>(&self, job: F) -> Result<T, WriteThreadStopped>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> T + Send + 'static,
    {
        self.run(move |conn| {
            let own: i64 = conn
                .pragma_query_value(None, "synchronous", |r| r.get(0))
                .unwrap_or(SYNCHRONOUS_FULL);
            let _ = conn.pragma_update(None, "synchronous", SYNCHRONOUS_NORMAL);
            let done = std::panic::catch_unwind(AssertUnwindSafe(|| job(&mut *conn)));
            let _ = conn.pragma_update(None, "synchronous", own);
            done.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
        .await
    }
}

/// SQLite's `synchronous` levels, as the pragma reads and takes them.
const SYNCHRONOUS_NORMAL: i64 = 1;
const SYNCHRONOUS_FULL: i64 = 2;

impl From<WriteThreadStopped> for crate::StoreError {
    fn from(stopped: WriteThreadStopped) -> Self {
        crate::StoreError::Unavailable(stopped.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writer() -> SqliteWriter {
        SqliteWriter::start(Connection::open_in_memory().unwrap()).unwrap()
    }

    #[tokio::test]
    async fn a_job_runs_on_the_write_thread_with_the_writers_own_handle() {
        let writer = writer();
        let caller = std::thread::current().id();
        let (thread, name, answer) = writer
            .run(|conn| {
                let answer: i64 = conn.query_row("SELECT 41 + 1", [], |r| r.get(0)).unwrap();
                let current = std::thread::current();
                (current.id(), current.name().map(str::to_owned), answer)
            })
            .await
            .unwrap();
        assert_ne!(thread, caller);
        assert_eq!(name.as_deref(), Some("countersign-sqlite-writes"));
        assert_eq!(answer, 42);
    }

    /// A writer whose database has a table `t (n INTEGER)`.
    async fn writer_with_table() -> SqliteWriter {
        let writer = writer();
        writer
            .run(|conn| conn.execute_batch("CREATE TABLE t (n INTEGER)").unwrap())
            .await
            .unwrap();
        writer
    }

    /// The rows of `t` as a later job sees them.
    async fn count(writer: &SqliteWriter) -> i64 {
        writer
            .run(|conn| conn.query_row("SELECT COUNT(*) FROM t", [], |r| r.get(0)))
            .await
            .unwrap()
            .unwrap()
    }

    /// The level of `synchronous` a job runs with.
    fn level(conn: &mut Connection) -> i64 {
        conn.pragma_query_value(None, "synchronous", |r| r.get(0))
            .unwrap()
    }

    /// An unsynced job commits without waiting for the disk; the jobs after
    /// it wait again, also after an unsynced job that panicked.
    #[tokio::test]
    async fn only_an_unsynced_job_commits_without_waiting_for_the_disk() {
        let writer = writer();
        writer
            .run(|conn| conn.pragma_update(None, "synchronous", "FULL").unwrap())
            .await
            .unwrap();
        assert_eq!(
            writer.run_unsynced(level).await.unwrap(),
            SYNCHRONOUS_NORMAL
        );
        assert_eq!(writer.run(level).await.unwrap(), SYNCHRONOUS_FULL);
        let panicked = writer
            .run_unsynced(|_: &mut Connection| -> () { panic!("a job that fails") })
            .await;
        assert!(panicked.is_err());
        assert_eq!(writer.run(level).await.unwrap(), SYNCHRONOUS_FULL);
        // A connection set to NORMAL keeps it.
        writer
            .run(|conn| conn.pragma_update(None, "synchronous", "NORMAL").unwrap())
            .await
            .unwrap();
        writer.run_unsynced(level).await.unwrap();
        assert_eq!(writer.run(level).await.unwrap(), SYNCHRONOUS_NORMAL);
    }

    /// What a job leaves uncommitted is never seen, and never carried into
    /// the next job's writes (which would commit it).
    #[tokio::test]
    async fn a_transaction_a_job_leaves_open_is_rolled_back() {
        let writer = writer_with_table().await;
        writer
            .run(|conn| {
                conn.execute_batch("BEGIN; INSERT INTO t VALUES (1);")
                    .unwrap()
            })
            .await
            .unwrap();
        writer
            .run(|conn| conn.execute("INSERT INTO t VALUES (2)", []).unwrap())
            .await
            .unwrap();
        assert_eq!(count(&writer).await, 1, "only the second job's row");
    }

    /// A panicking job fails only its caller (who hears `Unavailable`, never
    /// a result) and leaves nothing written; the thread serves on.
    #[tokio::test]
    async fn a_job_that_panics_fails_its_caller_and_the_thread_serves_on() {
        let writer = writer_with_table().await;
        let panicked = writer
            .run(|conn| {
                let tx = conn.transaction().unwrap();
                tx.execute("INSERT INTO t VALUES (1)", []).unwrap();
                if std::hint::black_box(true) {
                    panic!("a job panicked mid-transaction");
                }
                tx.commit().unwrap();
            })
            .await;
        assert!(matches!(panicked, Err(WriteThreadStopped)));
        assert_eq!(count(&writer).await, 0, "the panicked job's insert is gone");
        let answer = writer.run(|conn| conn.is_autocommit()).await.unwrap();
        assert!(answer);
        let error: crate::StoreError = WriteThreadStopped.into();
        assert!(matches!(error, crate::StoreError::Unavailable(_)));
    }

    /// Each job runs after every job sent before it.
    #[tokio::test]
    async fn jobs_run_in_the_order_they_came() {
        let writer = writer_with_table().await;
        let writer = &writer;
        let jobs = (0..60_i64).map(|n| async move {
            writer
                .run(move |conn| {
                    conn.execute("INSERT INTO t VALUES (?)", [n]).unwrap();
                })
                .await
                .unwrap()
        });
        // `join_all` polls them in order: each is sent at its first poll.
        futures::future::join_all(jobs).await;
        let order: Vec<i64> = writer
            .run(|conn| {
                let mut statement = conn.prepare("SELECT n FROM t ORDER BY rowid").unwrap();
                statement
                    .query_map([], |r| r.get(0))
                    .unwrap()
                    .collect::<rusqlite::Result<_>>()
                    .unwrap()
            })
            .await
            .unwrap();
        assert_eq!(order, (0..60).collect::<Vec<_>>());
    }
}
