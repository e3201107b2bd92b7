//! The readers: a few read-only connections (WAL readers: they never wait
//! for the writer, and each read transaction sees one snapshot), each read
//! run whole on tokio's blocking pool. A read is one hand-off there and one
//! back, whatever number of statements it runs.

use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::{Arc, Mutex};

use rusqlite::Connection;
use tokio::sync::Semaphore;

use super::connection;
use crate::{Result, StoreError};

/// How many reads run at once (each holds a connection only while SQLite
/// works on it).
const READERS: usize = 8;

#[derive(Debug, Clone)]
pub(crate) struct Readers {
    idle: Arc<Mutex<Vec<Connection>>>,
    free: Arc<Semaphore>,
}

impl Readers {
    /// Opens the readers of the database file at `path` (the writer has
    /// opened it first: it is WAL by then).
    pub(crate) fn open(path: &Path) -> Result<Readers> {
        let idle = (0..READERS)
            .map(|_| connection::open_reader(path))
            .collect::<Result<Vec<_>>>()?;
        Ok(Readers {
            idle: Arc::new(Mutex::new(idle)),
            free: Arc::new(Semaphore::new(READERS)),
        })
    }

    /// Runs `read` on an idle reader, on the blocking pool. A transaction it
    /// leaves open is rolled back; a read that panics answers `Unavailable`.
    /// The connection goes back to the idle ones when `read` ends, even if
    /// the caller stopped waiting.
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
        let idle = self.idle.clone();
        let span = tracing::Span::current();
        let done = tokio::task::spawn_blocking(move || {
            let _in_span = span.enter();
            let mut conn = idle
                .lock()
                .expect("the idle readers' lock is never poisoned")
                .pop()
                .expect("a permit is an idle reader");
            let out = std::panic::catch_unwind(AssertUnwindSafe(|| read(&mut conn)));
            if !conn.is_autocommit() {
                let _ = conn.execute_batch("ROLLBACK");
            }
            idle.lock()
                .expect("the idle readers' lock is never poisoned")
                .push(conn);
            drop(permit);
            out
        })
        .await;
        match done {
            Ok(Ok(out)) => out,
            Ok(Err(_)) | Err(_) => Err(StoreError::Unavailable(
                "a read did not finish (it panicked)".into(),
            )),
        }
    }
}
