//! The embedded backend: one SQLite file in WAL mode, through `rusqlite`.
//! Every write runs on the single writer connection, on its own thread
//! (`writes`: SQLite has one writer anyway, and this way no writer ever sees
//! `SQLITE_BUSY` from another of ours); reads run on a few read-only
//! connections (`reads`). The embedded review queue is this database's
//! `queue_entries` table (`queue`).

mod accounting;
mod audit;
mod connection;
mod console_sessions;
mod escalations;
mod events;
mod group_commit;
mod keys;
mod migrate;
mod model_calls;
mod proposals;
mod queue;
mod reads;
mod reference;
mod review;
mod routes;
mod suppression;
mod tenants;
mod writes;

pub use connection::database_file;
pub use migrate::{MigrateError, Migrations};
pub use queue::EmbeddedQueue;
pub use writes::{SqliteWriter, WriteThreadStopped};

use async_trait::async_trait;
use rusqlite::Connection;
use tokio::sync::broadcast;

use connection::Location;
use reads::Readers;

use crate::{Lifecycle, Result, StoreError, StoreEvent};

/// How the embedded store commits (SQLite's `synchronous`, in WAL mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Synchronous {
    /// Every commit is synced before it is answered: an OK survives an OS
    /// crash or power loss. Group commit shares one sync among the callers
    /// of a batch.
    #[default]
    Full,
    /// Commits are synced at WAL checkpoints only: an OK survives any crash of
    /// the process, but an OS crash or power loss can drop the last commits
    /// that were answered OK.
    Normal,
}

#[derive(Debug, Clone)]
pub struct SqliteStore {
    /// The single writer connection, on the thread it runs on.
    writer: SqliteWriter,
    /// The read-only connections; none for an in-memory database (a private
    /// one, which only the writer's connection sees): its reads run on the
    /// writer.
    readers: Option<Readers>,
    events: broadcast::Sender<StoreEvent>,
    submitter: crate::group_commit::Submitter,
}

impl SqliteStore {
    /// The writer's thread, shared with the embedded queue (whose table the
    /// proposal insert writes in the same transaction).
    pub fn writer(&self) -> SqliteWriter {
        self.writer.clone()
    }

    /// The embedded review queue on this database.
    pub fn queue(&self) -> EmbeddedQueue {
        EmbeddedQueue::new(self.writer())
    }

    /// The `synchronous` setting the writer commits with, as SQLite reports it.
    pub async fn synchronous(&self) -> Result<Synchronous> {
        let level: i64 = self
            .write(|conn| Ok(conn.pragma_query_value(None, "synchronous", |r| r.get(0))?))
            .await?;
        match level {
            1 => Ok(Synchronous::Normal),
            2 => Ok(Synchronous::Full),
            other => Err(StoreError::Corrupt(format!(
                "PRAGMA synchronous is {other}: neither NORMAL (1) nor FULL (2)"
            ))),
        }
    }

    fn publish(&self, event: Option<StoreEvent>) {
        if let Some(event) = event {
            // No subscriber is fine: the event is in the table either way.
            let _ = self.events.send(event);
        }
    }

    /// Opens the database with every commit synced ([`Synchronous::Full`]).
    pub async fn connect(url: &str) -> Result<Self> {
        SqliteStore::connect_with(url, Synchronous::Full).await
    }

    /// Opens (creating if missing) the database a `sqlite://` URL names,
    /// committing as `synchronous` says.
    /// A database file it creates is readable by its owner only (mode 0600),
    /// and so are the WAL and shared-memory files SQLite makes beside it
    /// (they take the database file's mode).
    pub async fn connect_with(url: &str, synchronous: Synchronous) -> Result<Self> {
        let location = Location::parse(url)?;
        let (writer, readers) = tokio::task::spawn_blocking(move || {
            let writer = connection::open_writer(&location, synchronous)?;
            let readers = match &location {
                Location::File(path) => Some(Readers::open(path)?),
                Location::Memory => None,
            };
            Ok::<_, StoreError>((writer, readers))
        })
        .await
        .map_err(|e| StoreError::Unavailable(format!("opening the database: {e}")))??;
        let writer = SqliteWriter::start(writer)
            .map_err(|e| StoreError::Unavailable(format!("starting the write thread: {e}")))?;
        let (events, _) = broadcast::channel(4096);
        let submitter = group_commit::start(writer.clone());
        Ok(SqliteStore {
            writer,
            readers,
            events,
            submitter,
        })
    }

    /// Runs `write` on the writer's thread.
    async fn write<T, F>(&self, write: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T> + Send + 'static,
    {
        self.writer.run(write).await?
    }

    /// Runs `read` on a reader (on the writer for an in-memory database).
    async fn read<T, F>(&self, read: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T> + Send + 'static,
    {
        match &self.readers {
            Some(readers) => readers.run(read).await,
            None => self.write(read).await,
        }
    }
}

#[async_trait]
impl Lifecycle for SqliteStore {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    #[tracing::instrument(name = "store.sqlite.migrate", skip_all)]
    async fn migrate(&self) -> Result<()> {
        self.write(|conn| Ok(Migrations::embedded().run(conn)?))
            .await
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    impl SqliteStore {
        /// Runs `job` on the writer's connection (a test's look at the rows).
        pub(crate) async fn on_writer<T, F>(&self, job: F) -> T
        where
            T: Send + 'static,
            F: FnOnce(&mut Connection) -> T + Send + 'static,
        {
            self.writer.run(job).await.unwrap()
        }
    }

    /// A freshly migrated store in a directory of its own.
    pub(crate) async fn migrated() -> (SqliteStore, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("s.db").display());
        let store = SqliteStore::connect(&url).await.unwrap();
        store.migrate().await.unwrap();
        (store, dir)
    }

    /// The tables a decision writes carry the indexes their queries need and
    /// no other (migrations/sqlite/0023 names each one's query; the plan
    /// tests of review.rs, queue.rs, events.rs, suppression.rs and audit.rs
    /// show them used).
    #[tokio::test]
    async fn the_decision_paths_tables_carry_only_the_indexes_their_queries_use() {
        let (store, _dir) = migrated().await;
        let indexes = store
            .on_writer(|conn| {
                // Each with `partial` where it holds only the rows its WHERE names.
                conn.prepare(
                    "SELECT m.tbl_name || ' ' || m.name || IIF(i.partial, ' partial', '')
                     FROM sqlite_master AS m
                     JOIN pragma_index_list(m.tbl_name) AS i ON i.name = m.name
                     WHERE m.type = 'index'
                       AND m.tbl_name IN ('proposals', 'queue_entries', 'events', 'decisions')
                     ORDER BY m.tbl_name, m.name",
                )?
                .query_map([], |r| r.get::<_, String>(0))?
                .collect::<rusqlite::Result<Vec<_>>>()
            })
            .await
            .unwrap();
        assert_eq!(
            indexes,
            [
                "decisions sqlite_autoindex_decisions_1",
                "events events_by_tenant_cursor",
                "events events_votes_by_proposal partial",
                "proposals proposals_by_end",
                "proposals proposals_idempotency partial",
                "proposals proposals_operator_rejections partial",
                "proposals proposals_radius_end partial",
                "proposals proposals_reviewing partial",
                "proposals proposals_target_end",
                "proposals sqlite_autoindex_proposals_1",
                "queue_entries queue_by_tenant partial",
                "queue_entries queue_leased partial",
                "queue_entries sqlite_autoindex_queue_entries_1",
            ]
        );
    }

    /// The steps of `query`'s plan on a freshly migrated database.
    pub(crate) async fn plan_of(query: &str) -> Vec<String> {
        let (store, _dir) = migrated().await;
        let query = format!("EXPLAIN QUERY PLAN {query}");
        store
            .on_writer(move |conn| {
                // Its parameters left unbound: the plan is the same.
                let mut statement = conn.prepare(&query)?;
                let mut rows = statement.raw_query();
                let mut steps = Vec::new();
                while let Some(row) = rows.next()? {
                    steps.push(row.get::<_, String>(3)?);
                }
                Ok::<_, rusqlite::Error>(steps)
            })
            .await
            .unwrap()
    }

    /// The B-trees `statement` writes (its bytecode's `OpenWrite`s), by name:
    /// SQLite opens an index for writing only where the statement changes a
    /// column the index holds or its `WHERE` reads.
    pub(crate) async fn written_by(statement: &str) -> Vec<String> {
        let (store, _dir) = migrated().await;
        let explain = format!("EXPLAIN {statement}");
        store
            .on_writer(move |conn| {
                let roots: std::collections::HashMap<i64, String> = conn
                    .prepare("SELECT rootpage, name FROM sqlite_master WHERE rootpage > 0")?
                    .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect::<rusqlite::Result<_>>()?;
                let mut statement = conn.prepare(&explain)?;
                let mut rows = statement.raw_query();
                let mut written = std::collections::BTreeSet::new();
                while let Some(row) = rows.next()? {
                    if row.get::<_, String>(1)? == "OpenWrite" {
                        let root: i64 = row.get(3)?;
                        written.insert(roots.get(&root).cloned().unwrap_or(root.to_string()));
                    }
                }
                Ok::<_, rusqlite::Error>(written.into_iter().collect())
            })
            .await
            .unwrap()
    }
}
