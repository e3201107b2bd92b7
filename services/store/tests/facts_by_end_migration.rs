//! The facts' indexes hold no state (SQLite 0025, PostgreSQL 0029): a
//! proposal's `decided_at` says when it left the open states, so the
//! migration gives every tenant's cancelled proposals theirs (their last
//! change) and leaves open and decided ones as they are; PostgreSQL's
//! policies bind the owner again afterwards.

use countersign_store::sqlite::Migrations;
use countersign_test_support::postgres;
use rusqlite::params;
use sqlx::Row;

const INSERT_PROPOSAL: &str = "INSERT INTO proposals (id, tenant, action, class, target,
     blast_radius, operator, spec_json, spec_digest, state, submitted_by, created_at, updated_at,
     decided_at)
     VALUES ($1, $2, 'restart', 'write', 'db-01', 'single_device', 'olga', '{}', $1,
             $3, 'k', 1, $4, $5)";

/// `(id, tenant, state, updated_at, decided_at)` before the migration.
const ROWS: [(&str, &str, &str, i64, Option<i64>); 4] = [
    ("a-cancelled", "a", "cancelled", 7, None),
    ("b-cancelled", "b", "cancelled", 8, None),
    ("a-open", "a", "pending", 2, None),
    ("a-rejected", "a", "rejected", 4, Some(3)),
];

/// `(id, decided_at)` after it.
fn expected() -> Vec<(String, Option<i64>)> {
    vec![
        ("a-cancelled".into(), Some(7)),
        ("a-open".into(), None),
        ("a-rejected".into(), Some(3)),
        ("b-cancelled".into(), Some(8)),
    ]
}

const FACTS_INDEXES: [&str; 3] = [
    "proposals_by_end",
    "proposals_radius_end",
    "proposals_target_end",
];

#[test]
fn sqlite_cancelled_proposals_are_given_their_end_and_the_facts_indexes_lose_the_state() {
    let (_db, mut conn) = countersign_test_support::sqlite::migrated_before("0025");
    for tenant in ["a", "b"] {
        conn.execute(
            "INSERT INTO tenants (name, created_at) VALUES (?1, 0)",
            [tenant],
        )
        .unwrap();
    }
    for (id, tenant, state, updated_at, decided_at) in ROWS {
        conn.execute(
            INSERT_PROPOSAL,
            params![id, tenant, state, updated_at, decided_at],
        )
        .unwrap();
    }
    Migrations::embedded().run(&mut conn).unwrap();

    let rows: Vec<(String, Option<i64>)> = conn
        .prepare("SELECT id, decided_at FROM proposals ORDER BY id")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    assert_eq!(rows, expected());
    let indexes: Vec<(String, String)> = conn
        .prepare(
            "SELECT i.name, group_concat(c.name, ',') FROM sqlite_master i, pragma_index_info(i.name) c
             WHERE i.type = 'index' AND i.name LIKE 'proposals_%end' GROUP BY i.name ORDER BY i.name",
        )
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    facts_indexes_hold_no_state(&indexes);
}

/// `indexes` (each name with its key columns) are the facts' three, and
/// none of them keys on `state`.
fn facts_indexes_hold_no_state(indexes: &[(String, String)]) {
    let names: Vec<&str> = indexes.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, FACTS_INDEXES);
    assert!(
        indexes.iter().all(|(_, keys)| !keys.contains("state")),
        "{indexes:?}"
    );
}

#[tokio::test]
async fn postgres_cancelled_proposals_of_every_tenant_are_given_their_end() {
    let (_db, mut conn) = postgres::migrated_before("0029").await;
    for (id, tenant, state, updated_at, decided_at) in ROWS {
        // The owner writes like the service does: in the tenant's scope.
        postgres::set_scope(&mut conn, "app.tenant_id", tenant).await;
        sqlx::query("INSERT INTO tenants (name, created_at) VALUES ($1, 0) ON CONFLICT DO NOTHING")
            .bind(tenant)
            .execute(&mut conn)
            .await
            .unwrap();
        sqlx::query(INSERT_PROPOSAL)
            .bind(id)
            .bind(tenant)
            .bind(state)
            .bind(updated_at)
            .bind(decided_at)
            .execute(&mut conn)
            .await
            .unwrap();
    }
    postgres::set_scope(&mut conn, "app.tenant_id", "").await;
    postgres::migrate_rest(&mut conn).await;
    postgres::set_scope(&mut conn, "app.scope", "system").await;
    let rows: Vec<(String, Option<i64>)> =
        sqlx::query("SELECT id, decided_at FROM proposals ORDER BY id")
            .fetch_all(&mut conn)
            .await
            .unwrap()
            .into_iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
    assert_eq!(rows, expected());
    let forced: bool =
        sqlx::query_scalar("SELECT relforcerowsecurity FROM pg_class WHERE relname = 'proposals'")
            .fetch_one(&mut conn)
            .await
            .unwrap();
    assert!(forced, "the policies bind the owner again");
    let indexes: Vec<(String, String)> = sqlx::query(
        "SELECT indexname::text, indexdef::text FROM pg_indexes
         WHERE tablename = 'proposals' AND indexname LIKE 'proposals_%end' ORDER BY indexname",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap()
    .into_iter()
    // The definition's keys, before any WHERE.
    .map(|r| {
        let definition: String = r.get(1);
        let keys = definition
            .split(" WHERE ")
            .next()
            .unwrap_or_default()
            .to_owned();
        (r.get(0), keys)
    })
    .collect();
    facts_indexes_hold_no_state(&indexes);
}
