//! The embedded schema's migrations: `migrations/sqlite/NNNN_description.sql`,
//! applied in version order, each in its own transaction, and recorded in
//! `_sqlx_migrations` exactly as sqlx's migrator records them (version,
//! description, installed_on, success, the SHA-384 of the file, execution
//! time), so a database that migrator made opens and migrates forward, and
//! the table means the same to both.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

use rusqlite::{Connection, params};
use sha2::{Digest, Sha384};

/// The migrations built into the binary, in version order. A test checks
/// that this is every file of the directory.
macro_rules! embedded {
    ($($name:literal),* $(,)?) => {
        &[$(($name, include_str!(concat!("../../../../migrations/sqlite/", $name)))),*]
    };
}

const EMBEDDED: &[(&str, &str)] = embedded![
    "0001_foundation.sql",
    "0002_review.sql",
    "0003_event_retention.sql",
    "0004_suppression.sql",
    "0005_audit.sql",
    "0006_outbox.sql",
    "0007_trace_parent.sql",
    "0008_audit_time_index.sql",
    "0009_queue_by_tenant.sql",
    "0011_append_only_checkpoints_and_sop_versions.sql",
    "0012_tenant_cursors.sql",
    "0013_submitted_key.sql",
    "0016_escalated_state.sql",
    "0017_countersignature.sql",
    "0018_model_profiles.sql",
    "0019_model_calls.sql",
    "0020_vote_events_by_proposal.sql",
    "0021_receipt_ttl.sql",
    "0022_console_sessions.sql",
    "0023_lean_decision_path.sql",
    "0024_audit_filters_covered.sql",
    "0025_facts_by_end.sql",
    "0026_decided_at_submission.sql",
    "0027_decided_as_stored.sql",
];

/// Why the schema could not be brought up to date.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    #[error("migration {0} was left half applied (success = false in _sqlx_migrations)")]
    Dirty(i64),
    #[error("migration {0} was applied, but its file has changed since")]
    VersionMismatch(i64),
    #[error("migration {0} was applied, but no such migration is known")]
    VersionMissing(i64),
    #[error("migration {version} failed: {source}")]
    Execute {
        version: i64,
        #[source]
        source: rusqlite::Error,
    },
    #[error("migrations: {0}")]
    Source(String),
    #[error("migration bookkeeping: {0}")]
    Database(#[from] rusqlite::Error),
}

/// One migration file.
#[derive(Debug, Clone)]
struct Migration {
    version: i64,
    description: String,
    sql: Cow<'static, str>,
    checksum: Vec<u8>,
    /// A file that starts `-- no-transaction` runs outside a transaction.
    no_transaction: bool,
}

impl Migration {
    /// sqlx's reading of a file name: `<version>_<description>.sql`, the
    /// description with `_` as spaces; `None` for a file of another shape.
    fn parse(file_name: &str, sql: Cow<'static, str>) -> Result<Option<Migration>, MigrateError> {
        let Some((version, rest)) = file_name.split_once('_') else {
            return Ok(None);
        };
        let Some(description) = rest.strip_suffix(".sql") else {
            return Ok(None);
        };
        let version = version.parse().map_err(|_| {
            MigrateError::Source(format!(
                "`{file_name}` does not start with a version number"
            ))
        })?;
        Ok(Some(Migration {
            version,
            description: description.replace('_', " "),
            checksum: Sha384::digest(sql.as_bytes()).to_vec(),
            no_transaction: sql.starts_with("-- no-transaction"),
            sql,
        }))
    }
}

/// A set of migrations, in version order.
#[derive(Debug, Clone)]
pub struct Migrations(Vec<Migration>);

impl Migrations {
    /// The schema this build of the store runs on.
    pub fn embedded() -> Migrations {
        let migrations = EMBEDDED
            .iter()
            .map(|(name, sql)| {
                Migration::parse(name, Cow::Borrowed(sql))
                    .ok()
                    .flatten()
                    .expect("the embedded migrations are well named")
            })
            .collect();
        Migrations::sorted(migrations)
    }

    /// The migrations of a directory (for tests that build a database as an
    /// earlier version left it).
    pub fn from_dir(dir: &Path) -> Result<Migrations, MigrateError> {
        let source = |e: std::io::Error| MigrateError::Source(format!("{}: {e}", dir.display()));
        let mut migrations = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(source)? {
            let path = entry.map_err(source)?.path();
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            if !path.is_file() {
                continue;
            }
            let sql = std::fs::read_to_string(&path).map_err(source)?;
            migrations.extend(Migration::parse(name, Cow::Owned(sql))?);
        }
        Ok(Migrations::sorted(migrations))
    }

    fn sorted(mut migrations: Vec<Migration>) -> Migrations {
        migrations.sort_by_key(|m| m.version);
        Migrations(migrations)
    }

    /// Applies, in order, every migration the database has not recorded, as
    /// sqlx's migrator does: refused if one was left half applied, if a
    /// recorded one is unknown here, or if a recorded one's file changed.
    pub fn run(&self, conn: &mut Connection) -> Result<(), MigrateError> {
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS _sqlx_migrations (
                 version BIGINT PRIMARY KEY,
                 description TEXT NOT NULL,
                 installed_on TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
                 success BOOLEAN NOT NULL,
                 checksum BLOB NOT NULL,
                 execution_time BIGINT NOT NULL
             );",
        )?;
        let dirty: Option<i64> = conn
            .query_row(
                "SELECT version FROM _sqlx_migrations WHERE success = false
                 ORDER BY version LIMIT 1",
                [],
                |r| r.get(0),
            )
            .map(Some)
            .or_else(|e| match e {
                rusqlite::Error::QueryReturnedNoRows => Ok(None),
                e => Err(e),
            })?;
        if let Some(version) = dirty {
            return Err(MigrateError::Dirty(version));
        }
        let applied: HashMap<i64, Vec<u8>> = conn
            .prepare("SELECT version, checksum FROM _sqlx_migrations ORDER BY version")?
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        if let Some(unknown) = applied
            .keys()
            .filter(|v| !self.0.iter().any(|m| m.version == **v))
            .min()
        {
            return Err(MigrateError::VersionMissing(*unknown));
        }
        for migration in &self.0 {
            match applied.get(&migration.version) {
                Some(checksum) if *checksum != migration.checksum => {
                    return Err(MigrateError::VersionMismatch(migration.version));
                }
                Some(_) => {}
                None => apply(conn, migration)?,
            }
        }
        Ok(())
    }
}

/// Runs one migration and records it in the same transaction; its execution
/// time is recorded after the commit, as sqlx does.
fn apply(conn: &mut Connection, migration: &Migration) -> Result<(), MigrateError> {
    let started = Instant::now();
    let failed = |source| MigrateError::Execute {
        version: migration.version,
        source,
    };
    let record = |conn: &Connection| {
        conn.execute(
            "INSERT INTO _sqlx_migrations (version, description, success, checksum,
                 execution_time)
             VALUES (?1, ?2, TRUE, ?3, -1)",
            params![migration.version, migration.description, migration.checksum],
        )
    };
    if migration.no_transaction {
        conn.execute_batch(&migration.sql).map_err(failed)?;
        record(conn)?;
    } else {
        let tx = conn.transaction()?;
        tx.execute_batch(&migration.sql).map_err(failed)?;
        record(&tx)?;
        tx.commit()?;
    }
    let elapsed = i64::try_from(started.elapsed().as_nanos()).unwrap_or(i64::MAX);
    conn.execute(
        "UPDATE _sqlx_migrations SET execution_time = ?1 WHERE version = ?2",
        params![elapsed, migration.version],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn directory() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../migrations/sqlite")
    }

    /// Every file of migrations/sqlite is built in, and nothing else.
    #[test]
    fn the_embedded_migrations_are_the_directorys_files() {
        let mut files: Vec<String> = std::fs::read_dir(directory())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.ends_with(".sql"))
            .collect();
        files.sort();
        let embedded: Vec<&str> = EMBEDDED.iter().map(|(name, _)| *name).collect();
        assert_eq!(files, embedded);
        let from_dir = Migrations::from_dir(&directory()).unwrap();
        let versions = |m: &Migrations| m.0.iter().map(|m| m.version).collect::<Vec<_>>();
        assert_eq!(versions(&from_dir), versions(&Migrations::embedded()));
    }

    /// The file name and checksum read as sqlx reads them.
    #[test]
    fn a_migration_is_described_and_summed_as_sqlx_does() {
        let m = Migration::parse(
            "0011_append_only_checkpoints.sql",
            Cow::Borrowed("SELECT 1;"),
        )
        .unwrap()
        .unwrap();
        assert_eq!(m.version, 11);
        assert_eq!(m.description, "append only checkpoints");
        assert_eq!(
            hex::encode(&m.checksum),
            "26e71cc37450b183fb5bb72ec4f644ed27de1b55fad3d4d6cfb0ca0d71f42ca9\
             90911d74649814105a190325e15d2092",
        );
        assert!(
            Migration::parse("README.md", Cow::Borrowed(""))
                .unwrap()
                .is_none()
        );
    }

    /// `_sqlx_migrations` as sqlx's migrator left it on a database made
    /// before migration 0016: its DDL, and the rows it wrote (descriptions
    /// and SHA-384 checksums as it recorded them).
    const SQLX_TABLE: &str = "
        CREATE TABLE _sqlx_migrations (
            version BIGINT PRIMARY KEY,
            description TEXT NOT NULL,
            installed_on TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
            success BOOLEAN NOT NULL,
            checksum BLOB NOT NULL,
            execution_time BIGINT NOT NULL
        );
        INSERT INTO _sqlx_migrations VALUES
        (1, 'foundation', '2025-01-01 00:00:00', 1, X'524555CF7624BD94D39440CE2FB37725E765D740E396338B493786C226599D42170105556F631FFDD2068825FFA385B9', 1129488),
        (2, 'review', '2025-01-01 00:00:00', 1, X'6F5936F690CEC2E37B96DFB3E11A239A5995B5DE0D5C2357D26CCD1686E01B550B802A3B33F9CB342468582B753192E1', 1881572),
        (3, 'event retention', '2025-01-01 00:00:00', 1, X'7B82FB7D7482AE6A5C7E035FD2BEF1376CCAB6CCC08B05CA3093226E6CCA75B75BE348C27F3723337D50AF62ABA2E25F', 984380),
        (4, 'suppression', '2025-01-01 00:00:00', 1, X'531A3442141ABC618E2E16735E88FF632575080B79AF11F0A831D73EAE3CA5DF3A5D9169F18DDB560149B066D2B634C1', 1400842),
        (5, 'audit', '2025-01-01 00:00:00', 1, X'FAD4CF4B480B235ADD335F74D6B0F7F904DE747728E03A6714FCB0BFC90BD32A5894829D1FE4CF8E6409D5B0985E34BD', 1041739),
        (6, 'outbox', '2025-01-01 00:00:00', 1, X'4891BC59EEBED5758528C08BBC6DBF5548424AF0160A4A99A5C69982E299B2CC2427309A08A1BA2A845D2272A98809FA', 757145),
        (7, 'trace parent', '2025-01-01 00:00:00', 1, X'A80C1CC6E0F87864F8AB084930F367D4450D4E5469517EBB3B4828B79643C8D870C2682376650DF4991DB8F7A2610DE6', 987395),
        (8, 'audit time index', '2025-01-01 00:00:00', 1, X'2A4B300621F9CFC7462BFC6432AED46CDC00BE988BAAB5F2FDAB51704EAC1632BE0326926393036C5F6B16A1D9F5F7CC', 1798975),
        (9, 'queue by tenant', '2025-01-01 00:00:00', 1, X'8688CC0002DA794A67C02D9484020985ABAA822D164A6DA1BA768CD5D267408BBA200F88267F60E0A46DA969ABDEF651', 478426),
        (11, 'append only checkpoints and sop versions', '2025-01-01 00:00:00', 1, X'15EEF3BB1B7A7FCB95D285A76E7A96151AF73DE17AF4F657223A68C0B1C3D33F6AD8876FCF022A3C7F4D371B24C88E55', 757978),
        (12, 'tenant cursors', '2025-01-01 00:00:00', 1, X'2F1E2FE034B4CE1C023DB75D0546D1366EB862374C1F44570A4EB247D082CE3E87C912E279D8B4F15D9F45FCC765D561', 1495936),
        (13, 'submitted key', '2025-01-01 00:00:00', 1, X'701A05718FB4A521F32B7EA9105A6D207B9FCAE673265A329BF1DEDAE09D588EC3DB09CCD224400E8AE57CD8F64580FB', 959541);";

    /// A database as sqlx's migrator left it before 0016: the schema of the
    /// files below 0016 and that migrator's table.
    fn made_by_sqlx_before_0016() -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        conn.pragma_update(None, "foreign_keys", "ON").unwrap();
        for (name, sql) in EMBEDDED.iter().filter(|(name, _)| *name < "0016") {
            conn.execute_batch(&format!("BEGIN; {sql}; COMMIT;"))
                .unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        conn.execute_batch(SQLX_TABLE).unwrap();
        conn
    }

    type Recorded = (i64, String, String, bool, Vec<u8>, i64);

    fn recorded(conn: &Connection) -> Vec<Recorded> {
        conn.prepare("SELECT * FROM _sqlx_migrations ORDER BY version")
            .unwrap()
            .query_map([], |r| r.try_into())
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap()
    }

    /// An existing data directory opens: the versions sqlx's migrator
    /// recorded are taken as applied (their rows untouched), the newer ones
    /// are applied and recorded the same way, and a second run does nothing.
    #[test]
    fn a_database_sqlxs_migrator_made_migrates_forward() {
        let mut conn = made_by_sqlx_before_0016();
        let before = recorded(&conn);
        Migrations::embedded().run(&mut conn).unwrap();
        let after = recorded(&conn);
        assert_eq!(after[..before.len()], before[..], "recorded rows untouched");
        let (version, description, _, success, checksum, time) = &after[before.len()];
        assert_eq!(
            (*version, description.as_str(), *success),
            (16, "escalated state", true)
        );
        assert_eq!(
            hex::encode_upper(checksum),
            "2ECBC59CD46D500BF383EE8D0D95794D5924A582D4B7A371DD95FE0355852ED9\
             B8BF05314FCDB4F94703DA7ABB4E397D"
        );
        assert!(*time >= 0);
        let escalated: String = conn
            .query_row(
                "SELECT sql FROM sqlite_master WHERE name = 'proposals'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert!(escalated.contains("'escalated'"), "{escalated}");
        let newer: Vec<i64> = after[before.len() + 1..].iter().map(|row| row.0).collect();
        let embedded_after: Vec<i64> = Migrations::embedded()
            .0
            .iter()
            .map(|m| m.version)
            .filter(|v| *v > 16)
            .collect();
        assert_eq!(newer, embedded_after, "and every migration after it");
        Migrations::embedded().run(&mut conn).unwrap();
        assert_eq!(recorded(&conn), after);
    }

    /// What sqlx's migrator refuses, this one refuses: a half-applied
    /// migration, a recorded file that changed, a recorded version unknown
    /// here. Nothing is applied then.
    #[test]
    fn a_dirty_changed_or_unknown_record_is_refused() {
        type Expected = fn(&MigrateError) -> bool;
        let cases: [(&str, Expected); 3] = [
            (
                "UPDATE _sqlx_migrations SET success = false WHERE version = 12",
                |e| matches!(e, MigrateError::Dirty(12)),
            ),
            (
                "UPDATE _sqlx_migrations SET checksum = X'00' WHERE version = 5",
                |e| matches!(e, MigrateError::VersionMismatch(5)),
            ),
            (
                "INSERT INTO _sqlx_migrations VALUES (10, 'gone', '2025-01-01', 1, X'00', 1)",
                |e| matches!(e, MigrateError::VersionMissing(10)),
            ),
        ];
        for (change, expected) in cases {
            let mut conn = made_by_sqlx_before_0016();
            conn.execute_batch(change).unwrap();
            let error = Migrations::embedded().run(&mut conn).unwrap_err();
            assert!(expected(&error), "{change}: {error}");
            let newest: i64 = conn
                .query_row("SELECT MAX(version) FROM _sqlx_migrations", [], |r| {
                    r.get(0)
                })
                .unwrap();
            assert!(newest < 16, "{change}: nothing applied");
        }
    }

    /// A migration that fails leaves no record and none of its changes.
    #[test]
    fn a_failing_migration_is_rolled_back_and_not_recorded() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("0001_table.sql"),
            "CREATE TABLE t (n INTEGER);",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("0002_broken.sql"),
            "CREATE TABLE u (n INTEGER); INSERT INTO nowhere VALUES (1);",
        )
        .unwrap();
        let mut conn = Connection::open_in_memory().unwrap();
        let error = Migrations::from_dir(dir.path())
            .unwrap()
            .run(&mut conn)
            .unwrap_err();
        assert!(
            matches!(error, MigrateError::Execute { version: 2, .. }),
            "{error}"
        );
        let versions: Vec<i64> = conn
            .prepare("SELECT version FROM _sqlx_migrations")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert_eq!(versions, [1]);
        let u: i64 = conn
            .query_row(
                "SELECT COUNT(*) FROM sqlite_master WHERE name = 'u'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(u, 0);
    }
}
