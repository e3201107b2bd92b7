//! Migration 0016 lets a proposal be ESCALATED on both backends: the state
//! is accepted, moving to it logs an ESCALATED event, and a database with
//! proposals, queue entries and decisions keeps every row (SQLite rebuilds
//! the table under the decisions' foreign key).

use std::path::{Path, PathBuf};

use countersign_store::sqlite::Migrations;
use rusqlite::params;
use sqlx::migrate::Migrator;

fn migrations(backend: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../../migrations/{backend}"))
}

const INSERT_PROPOSAL: &str = "INSERT INTO proposals (id, tenant, action, class, target,
     blast_radius, operator, spec_json, spec_digest, state, submitted_by, created_at, updated_at)
     VALUES ($1, 'a', 'db_failover', 'destructive', 'db-01', 'cluster', 'olga', '{}', 'd',
             'pending', 'k', 1, 1)";

const DECIDE: &str = "INSERT INTO decisions (proposal_id, tenant, outcome, reason,
     agent_message, gates_json, missing_gates_json, reviewer, decided_at, summary,
     review_latency_ms) VALUES ($1, 'a', 'reject', 'r', 'm', '[]', '[]', 'w', 3, 's', 0)";

const MOVE: &str = "UPDATE proposals SET state = $1, updated_at = $2 WHERE id = $3";

const EVENTS: &str = "SELECT kind, state FROM events WHERE proposal_id = $1 ORDER BY cursor";

fn pairs(events: &[(String, String)]) -> Vec<(&str, &str)> {
    events
        .iter()
        .map(|(k, s)| (k.as_str(), s.as_str()))
        .collect()
}

#[test]
fn an_sqlite_proposal_may_be_escalated_and_existing_rows_survive() {
    let (_db, mut conn) = countersign_test_support::sqlite::migrated_before("0016");
    conn.execute("INSERT INTO tenants (name, created_at) VALUES ('a', 0)", [])
        .unwrap();
    for id in ["p-decided", "p-open"] {
        conn.execute(INSERT_PROPOSAL, [id]).unwrap();
    }
    for (state, at) in [("reviewing", 2), ("rejected", 3)] {
        conn.execute(MOVE, params![state, at, "p-decided"]).unwrap();
    }
    conn.execute(DECIDE, ["p-decided"]).unwrap();
    let refused = conn.execute(MOVE, params!["escalated", 4, "p-open"]);
    assert!(refused.is_err(), "not before 0016: {refused:?}");

    // Through 0016: the indexes and triggers below are the ones it makes.
    let through_0016 = countersign_test_support::postgres::migrations_before("sqlite", "0017");
    Migrations::from_dir(through_0016.path())
        .unwrap()
        .run(&mut conn)
        .unwrap();

    let rows: Vec<(String, String)> = strings(&conn, "SELECT id, state FROM proposals ORDER BY id");
    assert_eq!(
        rows,
        [
            ("p-decided".to_owned(), "rejected".to_owned()),
            ("p-open".to_owned(), "pending".to_owned())
        ]
    );
    let (queued, events): (i64, i64) = conn
        .query_row(
            "SELECT (SELECT COUNT(*) FROM queue_entries), (SELECT COUNT(*) FROM events)",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((queued, events), (2, 4), "the copy wrote no entry or event");
    let broken = strings(
        &conn,
        "SELECT \"table\", \"table\" FROM pragma_foreign_key_check",
    );
    assert!(broken.is_empty(), "{broken:?}");
    let indexes = strings(
        &conn,
        "SELECT name, type FROM sqlite_master WHERE type IN ('index', 'trigger')
           AND tbl_name = 'proposals' AND name NOT LIKE 'sqlite_%' ORDER BY name",
    );
    let names: Vec<&str> = indexes.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "proposals_idempotency",
            "proposals_open",
            "proposals_operator_rejections",
            "proposals_radius_state",
            "proposals_reviewing",
            "proposals_state_changed",
            "proposals_submitted",
            "proposals_target_state",
        ]
    );

    for (state, at) in [("reviewing", 5), ("escalated", 6), ("approved", 7)] {
        conn.execute(MOVE, params![state, at, "p-open"]).unwrap();
    }
    let logged: Vec<(String, String)> = conn
        .prepare(EVENTS)
        .unwrap()
        .query_map(["p-open"], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    assert_eq!(
        pairs(&logged),
        [
            ("SUBMITTED", "pending"),
            ("REVIEW_STARTED", "reviewing"),
            ("ESCALATED", "escalated"),
            ("APPROVED", "approved"),
        ]
    );
    let bogus = conn.execute(MOVE, params!["waiting", 8, "p-open"]);
    assert!(bogus.is_err(), "the CHECK still holds: {bogus:?}");
    let deleted = conn.execute("DELETE FROM proposals WHERE id = 'p-decided'", []);
    assert!(
        deleted.is_err(),
        "the decision still references it: {deleted:?}"
    );
}

/// The rows of a query of two text columns.
fn strings(conn: &rusqlite::Connection, query: &str) -> Vec<(String, String)> {
    conn.prepare(query)
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap()
}

#[tokio::test]
async fn a_postgres_proposal_may_be_escalated_and_existing_rows_survive() {
    let (_db, mut conn) = countersign_test_support::postgres::migrated_before("0016").await;
    // The owner writes like the service does: in the tenant's scope.
    sqlx::query("SELECT set_config('app.tenant_id', 'a', false)")
        .execute(&mut conn)
        .await
        .unwrap();
    sqlx::query("INSERT INTO tenants (name, created_at) VALUES ('a', 0)")
        .execute(&mut conn)
        .await
        .unwrap();
    sqlx::query(INSERT_PROPOSAL)
        .bind("p-open")
        .execute(&mut conn)
        .await
        .unwrap();
    let refused = sqlx::query(MOVE)
        .bind("escalated")
        .bind(4)
        .bind("p-open")
        .execute(&mut conn)
        .await;
    assert!(refused.is_err(), "not before 0016: {refused:?}");
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

    sqlx::query("SELECT set_config('app.tenant_id', 'a', false)")
        .execute(&mut conn)
        .await
        .unwrap();
    for (state, at) in [("reviewing", 5), ("escalated", 6), ("cancelled", 7)] {
        sqlx::query(MOVE)
            .bind(state)
            .bind(at)
            .bind("p-open")
            .execute(&mut conn)
            .await
            .unwrap();
    }
    let logged: Vec<(String, String)> = sqlx::query_as(EVENTS)
        .bind("p-open")
        .fetch_all(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        pairs(&logged),
        [
            ("SUBMITTED", "pending"),
            ("REVIEW_STARTED", "reviewing"),
            ("ESCALATED", "escalated"),
            ("CANCELLED", "cancelled"),
        ]
    );
    let bogus = sqlx::query(MOVE)
        .bind("waiting")
        .bind(8)
        .bind("p-open")
        .execute(&mut conn)
        .await;
    assert!(bogus.is_err(), "the CHECK still holds: {bogus:?}");
}
