//! The readers: a few read-only connections (WAL readers: they never wait
//! for the writer, and each read transaction sees one snapshot), each owned
//! by a thread of its own that runs the reads given to it, whole. A read is
//! one hand-off there and one back, whatever number of statements it runs.
//! The threads are fixed: the rows a read allocates come from the same few
//! threads' heaps every time (reads spread over a growing and shrinking
//! pool of threads left each one's heap holding memory once it went idle).

use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::{Arc, Mutex, mpsc};

use rusqlite::Connection;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};

use super::connection;
use crate::{Result, StoreError};

/// How many reads run at once, one per reader thread.
const READERS: usize = 8;

/// A read given to a reader thread, with what it hands back when done.
type ReadJob = Box<dyn FnOnce(&mut Connection) + Send>;

#[derive(Debug, Clone)]
pub(crate) struct Readers {
    /// The threads waiting for a read.
    idle: Arc<Mutex<Vec<mpsc::Sender<ReadJob>>>>,
    free: Arc<Semaphore>,
}

/// Runs the reads it is given on its own connection until the store is gone.
fn serve(mut conn: Connection, jobs: mpsc::Receiver<ReadJob>) {
    for job in jobs {
        job(&mut conn);
    }
}

impl Readers {
    /// Opens the readers of the database file at `path` (the writer has
    /// opened it first: it is WAL by then), each on its thread.
    pub(crate) fn open(path: &Path) -> Result<Readers> {
        let mut idle = Vec::with_capacity(READERS);
        for n in 0..READERS {
            let conn = connection::open_reader(path)?;
            let (jobs, rx) = mpsc::channel::<ReadJob>();
            std::thread::Builder::new()
                .name(format!("countersign-sqlite-read-{n}"))
                .spawn(move || serve(conn, rx))
                .map_err(|e| StoreError::Unavailable(format!("starting a reader thread: {e}")))?;
            idle.push(jobs);
        }
        Ok(Readers {
            idle: Arc::new(Mutex::new(idle)),
            free: Arc::new(Semaphore::new(READERS)),
        })
    }

    /// Runs `read` on an idle reader's thread. A transaction it leaves open
    /// is rolled back; a read that panics answers `Unavailable`. The reader
    /// is idle again when `read` ends, even if the caller stopped waiting.
    pub(crate) async fn run<T, F>(&self, read: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T> + Send + 'static,
    {
        let permit = self
            .free
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| StoreError::Unavailable("the readers are closed".into()))?;
        let thread = self
            .idle
            .lock()
            .expect("the idle readers' lock is never poisoned")
            .pop()
            .expect("a permit is an idle reader");
        let (reply, answer) = oneshot::channel();
        let back = Returned {
            idle: self.idle.clone(),
            thread: Some(thread.clone()),
            _permit: permit,
        };
        let span = tracing::Span::current();
        let job: ReadJob = Box::new(move |conn| {
            let _in_span = span.enter();
            let out = std::panic::catch_unwind(AssertUnwindSafe(|| read(conn)));
            // A read never carries an open transaction into the next one
            // (which would go on reading this one's snapshot).
            if !conn.is_autocommit() {
                let _ = conn.execute_batch("ROLLBACK");
            }
            drop(back);
            if let Ok(out) = out {
                let _ = reply.send(out);
            }
        });
        thread
            .send(job)
            .map_err(|_| StoreError::Unavailable("a reader thread stopped".into()))?;
        answer.await.unwrap_or_else(|_| {
            Err(StoreError::Unavailable(
                "a read did not finish (it panicked)".into(),
            ))
        })
    }
}

/// Makes its reader idle again (and frees its permit) when the read ends,
/// however it ends.
struct Returned {
    idle: Arc<Mutex<Vec<mpsc::Sender<ReadJob>>>>,
    thread: Option<mpsc::Sender<ReadJob>>,
    _permit: OwnedSemaphorePermit,
}

impl Drop for Returned {
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take() {
            self.idle
                .lock()
                .expect("the idle readers' lock is never poisoned")
                .push(thread);
        }
    }
}
