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
