//! The writer's own thread. A write transaction is a run of statements, each
//! handed to the connection's thread and its answer back to the task that
//! waits for it; on the server's runtime that task queues behind request
//! handlers for every one of them, and the single writer stays held all the
//! while. The hot write paths (submission groups, a review batch's start and
//! decisions, the embedded queue's leases and acks, the audit log's inserts)
//! run here instead, one job after another on one acquisition of the writer;
//! jobs that follow each other do not give the connection back and take it
//! again (the pool checks a returned connection: one more hand-off).
//!
//! Those jobs are synchronous ([`SqliteWriter::run`]): they run their
//! statements on this thread, on the writer's own SQLite handle, which sqlx
//! lends out for the purpose (`lock_handle`), through `rusqlite`. No statement
//! is handed to another thread, and a run of such jobs keeps its statements
//! prepared. A review batch's facts are read here too, in a read transaction
//! between writes: a few hundred microseconds of SQLite's work, against ~1.3 ms
//! of hand-offs on a reader. The rest of the store keeps sqlx, through the
//! pool. BENCHMARKS.md has what the thread and the synchronous jobs gain on
//! the 10,000 × 32 benchmark.

use std::panic::AssertUnwindSafe;

use sqlx::{SqliteConnection, SqlitePool, pool::PoolConnection};
use tokio::sync::{mpsc, oneshot};

/// How many jobs in a row may keep the writer before it goes back to the pool
/// (the writers that do not run here, such as the admin writes, get their
/// turn at least this often; they also get it whenever no job waits).
const HOLD_AT_MOST: usize = 32;

/// How long a run of jobs keeps the handle locked waiting for the next one (a
/// review batch's jobs come a millisecond or two apart).
const LINGER: std::time::Duration = std::time::Duration::from_millis(5);

/// The single writer connection and the thread its hot paths run on.
#[derive(Debug, Clone)]
pub struct SqliteWriter {
    pool: SqlitePool,
    jobs: mpsc::UnboundedSender<Job>,
}

/// A job got no answer: it panicked (the thread serves on), or the thread is
/// gone (it ends only when its last handle does).
#[derive(Debug, thiserror::Error)]
#[error("the SQLite write job did not finish (it panicked, or the write thread stopped)")]
pub struct WriteThreadStopped;

/// The writer's own SQLite handle, for a job that runs its statements on the
/// write thread itself (no hand-off to the connection's thread per statement),
/// or why it could not be had.
pub type Handle<'c> = Result<&'c mut rusqlite::Connection, crate::StoreError>;

/// A job on the handle; `false` if it panicked.
type Job = Box<dyn for<'c> FnOnce(Handle<'c>) -> bool + Send>;

/// Runs the jobs one after another, on one acquisition of the writer while
/// they keep coming: taking the connection from the pool and giving it back
/// are hand-offs of their own (the pool checks a returned connection).
async fn serve(pool: SqlitePool, mut jobs: mpsc::UnboundedReceiver<Job>) {
    let mut held: Option<PoolConnection<sqlx::Sqlite>> = None;
    let mut in_a_row = 0;
    loop {
        let job = match jobs.try_recv() {
            Ok(job) => job,
            Err(mpsc::error::TryRecvError::Empty) => {
                held = None;
                match jobs.recv().await {
                    Some(job) => job,
                    None => return,
                }
            }
            Err(mpsc::error::TryRecvError::Disconnected) => return,
        };
        if in_a_row >= HOLD_AT_MOST {
            held = None;
        }
        let conn = match &mut held {
            Some(conn) => conn,
            None => match pool.acquire().await {
                Ok(conn) => {
                    in_a_row = 0;
                    held.insert(conn)
                }
                Err(error) => {
                    job(Err(error.into()));
                    continue;
                }
            },
        };
        in_a_row += 1;
        if !serve_run(conn, job, &mut jobs, &mut in_a_row).await {
            held = None;
        }
    }
}

/// Runs `first` and the jobs queued right behind it on the writer's handle,
/// locked out of sqlx's connection thread for the run. `false` if a job
/// panicked (the connection then goes back to the pool).
async fn serve_run(
    conn: &mut SqliteConnection,
    first: Job,
    jobs: &mut mpsc::UnboundedReceiver<Job>,
    in_a_row: &mut usize,
) -> bool {
    let mut locked = match conn.lock_handle().await {
        Ok(locked) => locked,
        Err(error) => return first(Err(error.into())),
    };
    #[allow(unsafe_code)]
    // SAFETY: the handle is valid while `locked` lives, and no other thread
    // uses it meanwhile (sqlx's connection thread waits on the lock);
    // `from_handle` does not close it, and `raw` is dropped before `locked`.
    let raw = unsafe { rusqlite::Connection::from_handle(locked.as_raw_handle().as_ptr()) };
    let mut raw = match raw {
        Ok(raw) => raw,
        Err(error) => return first(Err(error.into())),
    };
    // Room for every statement the hot paths run (about fifteen).
    raw.set_prepared_statement_cache_capacity(32);
    let mut job = first;
    let clean = loop {
        let finished = job(Ok(&mut raw));
        // Never hand the connection back inside a transaction a job left open.
        if !raw.is_autocommit() {
            let _ = raw.execute_batch("ROLLBACK");
        }
        if !finished {
            break false;
        }
        if *in_a_row >= HOLD_AT_MOST {
            break true;
        }
        // The next job, waiting a little for it: a run keeps the handle's
        // statements prepared, which a new run prepares again.
        let following = match jobs.try_recv() {
            Ok(job) => Some(job),
            Err(mpsc::error::TryRecvError::Empty) => tokio::time::timeout(LINGER, jobs.recv())
                .await
                .ok()
                .flatten(),
            Err(mpsc::error::TryRecvError::Disconnected) => None,
        };
        match following {
            Some(following) => {
                *in_a_row += 1;
                job = following;
            }
            None => break true,
        }
    };
    drop(raw);
    drop(locked);
    clean
}

impl SqliteWriter {
    /// Starts the thread; it ends once every handle to it is gone.
    pub(crate) fn start(pool: SqlitePool) -> std::io::Result<Self> {
        let (jobs, rx) = mpsc::unbounded_channel::<Job>();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let served = pool.clone();
        std::thread::Builder::new()
            .name("countersign-sqlite-writes".into())
            .spawn(move || runtime.block_on(serve(served, rx)))?;
        Ok(SqliteWriter { pool, jobs })
    }

    /// The writer pool (one connection), for the writes that do not run here.
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// Runs `job` on the write thread itself, with the writer's own SQLite
    /// handle, in the caller's span: its statements are not handed to another
    /// thread one by one. Jobs run one at a time, in the order they came; a
    /// transaction the job leaves open is rolled back; a job that panics
    /// answers [`WriteThreadStopped`] and the thread serves on.
    pub async fn run<T, F>(&self, job: F) -> Result<T, WriteThreadStopped>
    where
        T: Send + 'static,
        F: for<'c> FnOnce(Handle<'c>) -> T + Send + 'static,
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
}

impl From<WriteThreadStopped> for crate::StoreError {
    fn from(stopped: WriteThreadStopped) -> Self {
        crate::StoreError::Unavailable(stopped.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn writer() -> SqliteWriter {
        let pool = sqlx::SqlitePool::connect("sqlite::memory:").await.unwrap();
        SqliteWriter::start(pool).unwrap()
    }

    #[tokio::test]
    async fn a_job_runs_on_the_write_thread_with_the_writers_own_handle() {
        let writer = writer().await;
        let caller = std::thread::current().id();
        let (thread, name, answer) = writer
            .run(|conn| {
                let answer: i64 = conn
                    .unwrap()
                    .query_row("SELECT 41 + 1", [], |r| r.get(0))
                    .unwrap();
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
        let writer = writer().await;
        writer
            .run(|conn| {
                conn.unwrap()
                    .execute_batch("CREATE TABLE t (n INTEGER)")
                    .unwrap()
            })
            .await
            .unwrap();
        writer
    }

    /// The rows of `t` as sqlx's side of the connection (the pool) sees them.
    async fn count(writer: &SqliteWriter) -> i64 {
        sqlx::query_scalar("SELECT COUNT(*) FROM t")
            .fetch_one(writer.pool())
            .await
            .unwrap()
    }

    /// What a job leaves uncommitted is never seen, and never carried into
    /// the next job's writes (which would commit it).
    #[tokio::test]
    async fn a_transaction_a_job_leaves_open_is_rolled_back() {
        let writer = writer_with_table().await;
        writer
            .run(|conn| {
                conn.unwrap()
                    .execute_batch("BEGIN; INSERT INTO t VALUES (1);")
                    .unwrap()
            })
            .await
            .unwrap();
        writer
            .run(|conn| {
                conn.unwrap()
                    .execute("INSERT INTO t VALUES (2)", [])
                    .unwrap()
            })
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
                let tx = conn.unwrap().transaction().unwrap();
                tx.execute("INSERT INTO t VALUES (1)", []).unwrap();
                if std::hint::black_box(true) {
                    panic!("a job panicked mid-transaction");
                }
                tx.commit().unwrap();
            })
            .await;
        assert!(matches!(panicked, Err(WriteThreadStopped)));
        assert_eq!(count(&writer).await, 0, "the panicked job's insert is gone");
        let answer = writer.run(|conn| conn.is_ok()).await.unwrap();
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
                    conn.unwrap()
                        .execute("INSERT INTO t VALUES (?)", [n])
                        .unwrap();
                })
                .await
                .unwrap()
        });
        // `join_all` polls them in order: each is sent at its first poll.
        futures::future::join_all(jobs).await;
        let order: Vec<i64> = writer
            .run(|conn| {
                let conn = conn.unwrap();
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
