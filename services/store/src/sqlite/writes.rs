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
//! Those jobs are synchronous ([`SqliteWriter::run_sync`]): they run their
//! statements on this thread, on the writer's own SQLite handle, which sqlx
//! lends out for the purpose (`lock_handle`), through `rusqlite`. No statement
//! is handed to another thread, and a run of such jobs keeps its statements
//! prepared. A review batch's facts are read here too, in a read transaction
//! between writes: a few hundred microseconds of SQLite's work, against ~1.3 ms
//! of hand-offs on a reader. The rest of the store keeps sqlx ([`SqliteWriter::run`], the
//! pool). Measured on the 10,000 × 32 benchmark: 1,800–2,160 → 2,280–2,450
//! decisions/s with the thread (session 11); the synchronous jobs took the
//! writer's time per decision from about 0.31 to 0.24 ms (session 12).

use std::{future::Future, panic::AssertUnwindSafe, pin::Pin};

use futures::FutureExt;

use sqlx::{SqliteConnection, SqlitePool, pool::PoolConnection};
use tokio::sync::{mpsc, oneshot};
use tracing::Instrument;

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The writer connection a job is given, or why it could not be had.
pub type Connection<'c> = Result<&'c mut SqliteConnection, sqlx::Error>;

/// A job's work; `false` if it panicked (the connection is then given back to
/// the pool, which rolls back whatever it left open).
type Job = Box<dyn for<'c> FnOnce(Connection<'c>) -> BoxFuture<'c, bool> + Send>;

/// How many jobs in a row may keep the writer before it goes back to the pool
/// (the writers that do not run here, such as the audit sequencer, get their
/// turn at least this often; they also get it whenever no job waits).
const HOLD_AT_MOST: usize = 32;

/// How long a run of synchronous jobs keeps the handle locked waiting for the
/// next one (a review batch's jobs come a millisecond or two apart).
const LINGER: std::time::Duration = std::time::Duration::from_millis(5);

/// The single writer connection and the thread its hot paths run on.
#[derive(Debug, Clone)]
pub struct SqliteWriter {
    pool: SqlitePool,
    jobs: mpsc::UnboundedSender<Work>,
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
type SyncJob = Box<dyn for<'c> FnOnce(Handle<'c>) -> bool + Send>;

enum Work {
    Async(Job),
    Sync(SyncJob),
}

/// Runs the jobs one after another, on one acquisition of the writer while
/// they keep coming: taking the connection from the pool and giving it back
/// are hand-offs of their own (the pool checks a returned connection).
async fn serve(pool: SqlitePool, mut jobs: mpsc::UnboundedReceiver<Work>) {
    let mut held: Option<PoolConnection<sqlx::Sqlite>> = None;
    let mut in_a_row = 0;
    // A job taken while a run of synchronous jobs was being served.
    let mut next: Option<Work> = None;
    loop {
        let work = match next.take().map_or_else(|| jobs.try_recv(), Ok) {
            Ok(work) => work,
            Err(mpsc::error::TryRecvError::Empty) => {
                held = None;
                match jobs.recv().await {
                    Some(work) => work,
                    None => return,
                }
            }
            Err(mpsc::error::TryRecvError::Disconnected) => return,
        };
        if in_a_row >= HOLD_AT_MOST {
            held = None;
        }
        if held.is_none() {
            in_a_row = 0;
            match pool.acquire().await {
                Ok(conn) => held = Some(conn),
                Err(error) => {
                    match work {
                        Work::Async(job) => {
                            let _ = job(Err(error)).await;
                        }
                        Work::Sync(job) => {
                            let _ = job(Err(error.into()));
                        }
                    }
                    continue;
                }
            }
        }
        in_a_row += 1;
        let conn = held.as_mut().expect("held above");
        let clean = match work {
            Work::Async(job) => job(Ok(&mut **conn)).await,
            Work::Sync(job) => serve_sync(conn, job, &mut jobs, &mut next, &mut in_a_row).await,
        };
        if !clean {
            held = None;
        }
    }
}

/// Runs `first` and the synchronous jobs queued right behind it on the
/// writer's handle, locked out of sqlx's connection thread for the run; the
/// first other job is left in `next`. `false` if a job panicked.
async fn serve_sync(
    conn: &mut sqlx::SqliteConnection,
    first: SyncJob,
    jobs: &mut mpsc::UnboundedReceiver<Work>,
    next: &mut Option<Work>,
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
            Ok(work) => Some(work),
            Err(mpsc::error::TryRecvError::Empty) => tokio::time::timeout(LINGER, jobs.recv())
                .await
                .ok()
                .flatten(),
            Err(mpsc::error::TryRecvError::Disconnected) => None,
        };
        match following {
            Some(Work::Sync(following)) => {
                *in_a_row += 1;
                job = following;
            }
            Some(other) => {
                *next = Some(other);
                break true;
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
        let (jobs, rx) = mpsc::unbounded_channel::<Work>();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let served = pool.clone();
        std::thread::Builder::new()
            .name("countersign-sqlite-writes".into())
            .spawn(move || runtime.block_on(serve(served, rx)))?;
        Ok(SqliteWriter { pool, jobs })
    }

    /// The writer pool (one connection).
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// Runs `job` on the write thread with the writer connection (jobs run one
    /// at a time, in the order they came), in the caller's span, and answers
    /// with its output. A job that panics answers [`WriteThreadStopped`] too,
    /// and the thread serves on.
    pub async fn run<T, F>(&self, job: F) -> Result<T, WriteThreadStopped>
    where
        T: Send + 'static,
        F: for<'c> FnOnce(Connection<'c>) -> BoxFuture<'c, T> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let span = tracing::Span::current();
        let job: Job = Box::new(move |conn| {
            Box::pin(
                async move {
                    // A panic ends this job only: the thread keeps serving.
                    match AssertUnwindSafe(job(conn)).catch_unwind().await {
                        Ok(done) => {
                            let _ = reply.send(done);
                            true
                        }
                        Err(_) => false,
                    }
                }
                .instrument(span),
            )
        });
        self.jobs
            .send(Work::Async(job))
            .map_err(|_| WriteThreadStopped)?;
        answer.await.map_err(|_| WriteThreadStopped)
    }

    /// Runs `job` on the write thread itself, with the writer's own SQLite
    /// handle: its statements are not handed to another thread one by one.
    /// Jobs run one at a time with the others, in the order they came; a
    /// transaction the job leaves open is rolled back; a job that panics
    /// answers [`WriteThreadStopped`] and the thread serves on.
    pub async fn run_sync<T, F>(&self, job: F) -> Result<T, WriteThreadStopped>
    where
        T: Send + 'static,
        F: for<'c> FnOnce(Handle<'c>) -> T + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let span = tracing::Span::current();
        let job: SyncJob = Box::new(move |conn| {
            let _in_span = span.enter();
            match std::panic::catch_unwind(AssertUnwindSafe(|| job(conn))) {
                Ok(done) => {
                    let _ = reply.send(done);
                    true
                }
                Err(_) => false,
            }
        });
        self.jobs
            .send(Work::Sync(job))
            .map_err(|_| WriteThreadStopped)?;
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
    async fn a_job_runs_on_the_write_thread_with_the_writer_connection() {
        let writer = writer().await;
        let caller = std::thread::current().id();
        let (thread, name, answer) = writer
            .run(|conn| {
                Box::pin(async move {
                    let current = std::thread::current();
                    let answer: i64 = sqlx::query_scalar("SELECT 41 + 1")
                        .fetch_one(conn.unwrap())
                        .await
                        .unwrap();
                    (current.id(), current.name().map(str::to_owned), answer)
                })
            })
            .await
            .unwrap();
        assert_ne!(thread, caller);
        assert_eq!(name.as_deref(), Some("countersign-sqlite-writes"));
        assert_eq!(answer, 42);
    }

    /// A panicking job fails only its caller (who hears `Unavailable`, never
    /// a result); the thread goes on serving the next.
    #[tokio::test]
    async fn a_job_that_panics_fails_its_caller_and_the_thread_serves_on() {
        let writer = writer().await;
        let panicked = writer
            .run(|_| {
                Box::pin(async {
                    if std::hint::black_box(true) {
                        panic!("a job panicked");
                    }
                    1
                })
            })
            .await;
        assert!(matches!(panicked, Err(WriteThreadStopped)));
        let answer = writer
            .run(|conn| Box::pin(async move { conn.is_ok() }))
            .await
            .unwrap();
        assert!(answer);
        let error: crate::StoreError = WriteThreadStopped.into();
        assert!(matches!(error, crate::StoreError::Unavailable(_)));
    }

    #[tokio::test]
    async fn a_sync_job_runs_on_the_write_thread_with_the_writers_own_handle() {
        let writer = writer().await;
        let (name, answer) = writer
            .run_sync(|conn| {
                let answer: i64 = conn
                    .unwrap()
                    .query_row("SELECT 41 + 1", [], |r| r.get(0))
                    .unwrap();
                (std::thread::current().name().map(str::to_owned), answer)
            })
            .await
            .unwrap();
        assert_eq!(name.as_deref(), Some("countersign-sqlite-writes"));
        assert_eq!(answer, 42);
    }

    /// A writer whose database has a table `t (n INTEGER)`.
    async fn writer_with_table() -> SqliteWriter {
        let writer = writer().await;
        writer
            .run_sync(|conn| {
                conn.unwrap()
                    .execute_batch("CREATE TABLE t (n INTEGER)")
                    .unwrap()
            })
            .await
            .unwrap();
        writer
    }

    async fn count(writer: &SqliteWriter) -> i64 {
        writer
            .run(|conn| {
                Box::pin(async move {
                    sqlx::query_scalar("SELECT COUNT(*) FROM t")
                        .fetch_one(conn.unwrap())
                        .await
                        .unwrap()
                })
            })
            .await
            .unwrap()
    }

    /// What a job leaves uncommitted is never seen, and never carried into
    /// the next job's writes (which would commit it).
    #[tokio::test]
    async fn a_transaction_a_sync_job_leaves_open_is_rolled_back() {
        let writer = writer_with_table().await;
        writer
            .run_sync(|conn| {
                conn.unwrap()
                    .execute_batch("BEGIN; INSERT INTO t VALUES (1);")
                    .unwrap()
            })
            .await
            .unwrap();
        writer
            .run_sync(|conn| {
                conn.unwrap()
                    .execute("INSERT INTO t VALUES (2)", [])
                    .unwrap()
            })
            .await
            .unwrap();
        assert_eq!(count(&writer).await, 1, "only the second job's row");
    }

    #[tokio::test]
    async fn a_sync_job_that_panics_fails_its_caller_and_the_thread_serves_on() {
        let writer = writer_with_table().await;
        let panicked = writer
            .run_sync(|conn| {
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
    }

    /// Synchronous and asynchronous jobs share one queue: each runs after
    /// every job sent before it.
    #[tokio::test]
    async fn sync_and_async_jobs_run_in_the_order_they_came() {
        let writer = writer_with_table().await;
        let mut jobs: Vec<BoxFuture<'_, ()>> = Vec::new();
        let writer = &writer;
        for n in 0..60_i64 {
            if n % 3 == 0 {
                jobs.push(Box::pin(async move {
                    writer
                        .run(move |conn| {
                            Box::pin(async move {
                                sqlx::query("INSERT INTO t VALUES (?)")
                                    .bind(n)
                                    .execute(conn.unwrap())
                                    .await
                                    .unwrap();
                            })
                        })
                        .await
                        .unwrap()
                }));
            } else {
                jobs.push(Box::pin(async move {
                    writer
                        .run_sync(move |conn| {
                            conn.unwrap()
                                .execute("INSERT INTO t VALUES (?)", [n])
                                .unwrap();
                        })
                        .await
                        .unwrap()
                }));
            }
        }
        // `join_all` polls them in order: each is sent at its first poll.
        futures::future::join_all(jobs).await;
        let order: Vec<i64> = writer
            .run_sync(|conn| {
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
