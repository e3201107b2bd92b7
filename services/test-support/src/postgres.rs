//! A fresh PostgreSQL database per test: created by the owner role
//! (`COUNTERSIGN_TEST_PG_OWNER_URL`), migrated by it, and used through the
//! service role (`COUNTERSIGN_TEST_PG_APP_URL`), as in production.

use std::{path::Path, sync::Arc};

use countersign_store::{DynStore, PostgresStore};
use sqlx::{Connection, PgConnection};

pub const OWNER_URL: &str = "COUNTERSIGN_TEST_PG_OWNER_URL";
pub const APP_URL: &str = "COUNTERSIGN_TEST_PG_APP_URL";
pub const SUPERUSER_URL: &str = "COUNTERSIGN_TEST_PG_SUPERUSER_URL";

/// `url` with its database replaced by `database`.
pub fn with_database(url: &str, database: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, format!("?{query}")),
        None => (url, String::new()),
    };
    let authority_start = base.find("://").map_or(0, |i| i + 3);
    let path_start = base[authority_start..]
        .find('/')
        .map_or(base.len(), |i| authority_start + i);
    format!("{}/{database}{query}", &base[..path_start])
}

fn user_of(url: &str) -> String {
    let authority = url.split("://").nth(1).unwrap_or_default();
    let userinfo = authority
        .split_once('@')
        .map(|(u, _)| u)
        .unwrap_or_default();
    userinfo.split(':').next().unwrap_or_default().to_owned()
}

/// A database of its own for one test, dropped when the test ends.
pub struct TestDatabase {
    pub name: String,
    pub owner_url: String,
    pub app_url: String,
}

impl TestDatabase {
    /// Created (empty) by the owner role.
    pub async fn create() -> TestDatabase {
        let owner = crate::env_var(OWNER_URL);
        let app = crate::env_var(APP_URL);
        let name = crate::random_name("cs_");
        let mut conn = PgConnection::connect(&owner).await.unwrap_or_else(|e| {
            panic!(
                "cannot reach PostgreSQL at {OWNER_URL} ({e}): start it with \
                 `eval \"$(tests/services/postgres.sh)\"`"
            )
        });
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut conn)
            .await
            .expect("the owner role creates a database");
        conn.close().await.ok();
        TestDatabase {
            owner_url: with_database(&owner, &name),
            app_url: with_database(&app, &name),
            name,
        }
    }

    /// Created and migrated by the owner, with the service role granted.
    pub async fn migrated() -> TestDatabase {
        let db = TestDatabase::create().await;
        PostgresStore::migrate_as_owner(&db.owner_url, &db.service_role())
            .await
            .expect("migrations run as the owner");
        db
    }

    pub fn service_role(&self) -> String {
        user_of(&self.app_url)
    }

    /// The superuser's URL for this database (past row-level security).
    pub fn superuser_url(&self) -> String {
        with_database(&crate::env_var(SUPERUSER_URL), &self.name)
    }

    /// The store as the service connects: the service role, a small pool.
    pub async fn store(&self) -> DynStore {
        let store = PostgresStore::connect_with(&self.app_url, 4)
            .await
            .expect("the service role is accepted");
        Arc::new(store)
    }

    /// A raw connection as the service role (for the row-level-security probes).
    pub async fn app_connection(&self) -> PgConnection {
        PgConnection::connect(&self.app_url).await.unwrap()
    }

    /// A raw connection as the owner.
    pub async fn owner_connection(&self) -> PgConnection {
        PgConnection::connect(&self.owner_url).await.unwrap()
    }

    /// A raw connection as the superuser, to count what was written.
    pub async fn superuser_connection(&self) -> PgConnection {
        PgConnection::connect(&self.superuser_url()).await.unwrap()
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        // Dropped on a thread of its own: a test's runtime may be gone already.
        let owner = crate::env_var(OWNER_URL);
        let name = self.name.clone();
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let Ok(mut conn) = PgConnection::connect(&owner).await else {
                    return;
                };
                // FORCE ends the service role's connections (postgres.sh lets
                // the owner do that); tried again briefly if it cannot.
                let drop = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
                for _ in 0..20 {
                    if sqlx::query(&drop).execute(&mut conn).await.is_ok() {
                        break;
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            });
        });
        let _ = dropped.join();
    }
}

/// A migrated database of its own and the store on it (the store suite's
/// PostgreSQL backend).
pub async fn store() -> (DynStore, TestDatabase) {
    let db = TestDatabase::migrated().await;
    (db.store().await, db)
}

/// The backend's migrations numbered below `version`, in a directory of their
/// own: a database migrated from it is one made before `version`, for the
/// tests that upgrade such a database.
pub fn migrations_before(backend: &str, version: &str) -> tempfile::TempDir {
    let all = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../../migrations/{backend}"));
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(all).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_owned();
        if name.as_str() < version {
            std::fs::copy(&path, dir.path().join(name)).unwrap();
        }
    }
    dir
}

/// A fresh database, migrated by the owner up to (not including) migration
/// `version`, with the owner's connection to it: where a migration's test
/// writes the rows that migration must carry over.
pub async fn migrated_before(version: &str) -> (TestDatabase, PgConnection) {
    let db = TestDatabase::create().await;
    let mut conn = PgConnection::connect(&db.owner_url).await.unwrap();
    let old = migrations_before("postgres", version);
    sqlx::migrate::Migrator::new(old.path())
        .await
        .unwrap()
        .run(&mut conn)
        .await
        .unwrap();
    (db, conn)
}

/// Sets `name` (`app.tenant_id`, `app.scope`) on `conn` for its session: a
/// migration's test writes and reads as the owner, in the scope it names.
pub async fn set_scope(conn: &mut PgConnection, name: &str, value: &str) {
    sqlx::query("SELECT set_config($1, $2, false)")
        .bind(name)
        .bind(value)
        .execute(conn)
        .await
        .unwrap();
}

/// Runs every migration not yet applied to `conn`'s database.
pub async fn migrate_rest(conn: &mut PgConnection) {
    let all = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../migrations/postgres");
    sqlx::migrate::Migrator::new(all)
        .await
        .unwrap()
        .run(conn)
        .await
        .unwrap();
}
