//! An SQLite database of its own per test, in a temporary directory.

use std::path::PathBuf;

use countersign_store::{Lifecycle, SqliteStore};
use tempfile::TempDir;

/// A database file in a temporary directory, removed with it.
pub struct SqliteDatabase {
    pub dir: TempDir,
}

impl SqliteDatabase {
    pub fn new() -> SqliteDatabase {
        SqliteDatabase {
            dir: tempfile::tempdir().expect("a temporary directory"),
        }
    }

    pub fn path(&self) -> PathBuf {
        self.dir.path().join("countersign.db")
    }

    pub fn url(&self) -> String {
        format!("sqlite://{}", self.path().display())
    }

    /// The store on this database, migrated.
    pub async fn store(&self) -> SqliteStore {
        let store = SqliteStore::connect(&self.url())
            .await
            .expect("open the SQLite store");
        store.migrate().await.expect("migrate");
        store
    }
}

impl Default for SqliteDatabase {
    fn default() -> Self {
        SqliteDatabase::new()
    }
}

/// A migrated store on a database of its own, and the directory that holds it.
pub async fn store() -> (SqliteStore, TempDir) {
    let db = SqliteDatabase::new();
    let store = db.store().await;
    (store, db.dir)
}

/// A database file of its own, migrated up to (not including) migration
/// `version`, with a connection to it that enforces foreign keys as the
/// store does: where a migration's test writes the rows that migration must
/// carry over.
pub fn migrated_before(version: &str) -> (SqliteDatabase, rusqlite::Connection) {
    let db = SqliteDatabase::new();
    let mut conn = rusqlite::Connection::open(db.path()).expect("open the database file");
    conn.pragma_update(None, "foreign_keys", "ON")
        .expect("foreign keys on");
    let old = crate::postgres::migrations_before("sqlite", version);
    countersign_store::sqlite::Migrations::from_dir(old.path())
        .expect("read the migrations")
        .run(&mut conn)
        .expect("apply the migrations");
    (db, conn)
}
