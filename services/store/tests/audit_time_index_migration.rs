//! Migration 0008 fills in the time index (`decided_max`, `lateness_max`) of
//! the entries already in a log, on both backends, and leaves the log
//! append-only afterwards.

use std::path::{Path, PathBuf};

use countersign_store::sqlite::Migrations;
use sqlx::migrate::Migrator;

/// Two tenants' entries, in sequence order: decided_at, and the running values
/// the migration must give them.
const ENTRIES: [(&str, i64, i64, i64); 7] = [
    ("a", 1_000, 1_000, 0),
    ("a", 1_050, 1_050, 0),
    ("a", 1_010, 1_050, 40),
    ("b", 900, 900, 0),
    ("a", 1_060, 1_060, 40),
    ("b", 800, 900, 100),
    ("a", 1_020, 1_060, 40),
];

fn migrations(backend: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../../migrations/{backend}"))
}

/// (tenant, sequence) for each entry of ENTRIES.
fn sequences() -> Vec<(&'static str, i64)> {
    let mut next = std::collections::HashMap::new();
    ENTRIES
        .iter()
        .map(|(tenant, ..)| {
            let n = next.entry(*tenant).or_insert(0);
            *n += 1;
            (*tenant, *n)
        })
        .collect()
}

const INSERT: &str = "INSERT INTO audit_log (tenant, sequence, proposal_id, decided_at, action,
     target, operator, submitted_by, outcome, blast_radius, sop_id, record, digest)
     VALUES ($1, $2, $3, $4, 'a', 't', 'o', 's', 'REJECTED', 'SINGLE_DEVICE', NULL, '{}', 'd')";

const READ: &str =
    "SELECT decided_max, lateness_max FROM audit_log WHERE tenant = $1 AND sequence = $2";

fn assert_filled(got: &[(i64, i64)]) {
    let want: Vec<(i64, i64)> = ENTRIES.iter().map(|e| (e.2, e.3)).collect();
    assert_eq!(got, want);
}

#[test]
fn the_time_index_of_existing_sqlite_entries_is_filled_in() {
    let (_db, mut conn) = countersign_test_support::sqlite::migrated_before("0008");
    for tenant in ["a", "b"] {
        conn.execute(
            "INSERT INTO tenants (name, created_at) VALUES (?, 0)",
            [tenant],
        )
        .unwrap();
    }
    for (i, ((tenant, sequence), entry)) in sequences().into_iter().zip(ENTRIES).enumerate() {
        conn.execute(
            INSERT,
            rusqlite::params![tenant, sequence, format!("p{i}"), entry.1],
        )
        .unwrap();
    }

    Migrations::from_dir(&migrations("sqlite"))
        .unwrap()
        .run(&mut conn)
        .unwrap();
    let mut got = Vec::new();
    for (tenant, sequence) in sequences() {
        let row: (i64, i64) = conn
            .query_row(READ, rusqlite::params![tenant, sequence], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .unwrap();
        got.push(row);
    }
    assert_filled(&got);
    let update = conn.execute("UPDATE audit_log SET decided_max = 0", []);
    assert!(update.is_err(), "still append-only: {update:?}");
}

#[tokio::test]
async fn the_time_index_of_existing_postgres_entries_is_filled_in() {
    let (_db, mut conn) = countersign_test_support::postgres::migrated_before("0008").await;
    // The owner writes like the service does: in each tenant's scope.
    for ((tenant, sequence), (i, entry)) in sequences().into_iter().zip(ENTRIES.iter().enumerate())
    {
        sqlx::query("SELECT set_config('app.tenant_id', $1, false)")
            .bind(tenant)
            .execute(&mut conn)
            .await
            .unwrap();
        sqlx::query("INSERT INTO tenants (name, created_at) VALUES ($1, 0) ON CONFLICT DO NOTHING")
            .bind(tenant)
            .execute(&mut conn)
            .await
            .unwrap();
        sqlx::query(INSERT)
            .bind(tenant)
            .bind(sequence)
            .bind(format!("p{i}"))
            .bind(entry.1)
            .execute(&mut conn)
            .await
            .unwrap();
    }
    sqlx::query("SELECT set_config('app.tenant_id', '', false)")
        .execute(&mut conn)
        .await
        .unwrap();

    Migrator::new(migrations("postgres"))
        .await
        .unwrap()
        .run(&mut conn)
        .await
        .unwrap();
    let mut got = Vec::new();
    for (tenant, sequence) in sequences() {
        sqlx::query("SELECT set_config('app.tenant_id', $1, false)")
            .bind(tenant)
            .execute(&mut conn)
            .await
            .unwrap();
        let row: (i64, i64) = sqlx::query_as(READ)
            .bind(tenant)
            .bind(sequence)
            .fetch_one(&mut conn)
            .await
            .unwrap();
        got.push(row);
    }
    assert_filled(&got);
    let update = sqlx::query("UPDATE audit_log SET decided_max = 0")
        .execute(&mut conn)
        .await;
    assert!(update.is_err(), "still append-only: {update:?}");
    let forced: bool =
        sqlx::query_scalar("SELECT relforcerowsecurity FROM pg_class WHERE relname = 'audit_log'")
            .fetch_one(&mut conn)
            .await
            .unwrap();
    assert!(forced, "row-level security is forced again");
}
