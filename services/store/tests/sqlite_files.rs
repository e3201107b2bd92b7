//! The embedded store's files: who may read them, and how commits reach the disk.

use std::os::unix::fs::PermissionsExt;

use countersign_store::{Lifecycle, SqliteStore, Synchronous, Tenants};

fn url(dir: &tempfile::TempDir) -> String {
    format!("sqlite://{}", dir.path().join("countersign.db").display())
}

/// The database holds key hashes, proposals and the decision log: like the
/// keys beside it, it and the WAL and shared-memory files SQLite makes for it
/// are readable by their owner only.
#[tokio::test]
async fn a_new_database_and_its_wal_and_shm_files_are_owner_only() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::connect(&url(&dir)).await.unwrap();
    store.migrate().await.unwrap();
    store.create_tenant("acme").await.unwrap();
    for suffix in ["", "-wal", "-shm"] {
        let path = dir.path().join(format!("countersign.db{suffix}"));
        let mode = std::fs::metadata(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{}", path.display());
    }
    // Opened again, it is the same database.
    drop(store);
    let again = SqliteStore::connect(&url(&dir)).await.unwrap();
    assert!(again.get_tenant("acme").await.unwrap().is_some());
}

/// An answered OK survives power loss by default: every commit is synced.
#[tokio::test]
async fn commits_are_synced_fully_by_default_and_normally_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::connect(&url(&dir)).await.unwrap();
    assert_eq!(store.synchronous().await.unwrap(), Synchronous::Full);
    drop(store);
    let store = SqliteStore::connect_with(&url(&dir), Synchronous::Normal)
        .await
        .unwrap();
    assert_eq!(store.synchronous().await.unwrap(), Synchronous::Normal);
}
