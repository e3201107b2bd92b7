//! Migration 0012 gives the events already logged their tenant's cursor, on
//! both backends: each keeps its log-wide cursor, so a cursor a watcher holds
//! still resumes where it left off (and one older than retention is still
//! refused), and each tenant's numbering continues after the log's newest
//! cursor, one by one.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

use countersign_domain::ProposalSpec;
use countersign_store::sqlite::Migrations;
use countersign_store::{DynStore, Lifecycle, PostgresStore, SqliteStore};
use countersign_test_support::fixtures::new_proposal;
use sqlx::Connection;

/// The tenant of each event logged before the migration, in cursor order:
/// cursors 1 to 5. The first two are pruned before it.
const LOGGED: [&str; 5] = ["a", "b", "a", "b", "a"];
const PRUNED_THROUGH: i64 = 2;

fn migrations(backend: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../../migrations/{backend}"))
}

/// The shared spec, by the operator the rows below name.
fn spec() -> ProposalSpec {
    ProposalSpec {
        operator: "o".into(),
        ..countersign_test_support::fixtures::spec()
    }
}

/// A proposal as the schema before 0012 stored it; its trigger logs SUBMITTED.
const INSERT_PROPOSAL: &str = "INSERT INTO proposals (id, tenant, action, class, target,
     blast_radius, operator, spec_json, spec_digest, state, submitted_by, created_at, updated_at)
     VALUES ($1, $2, 'host_restart_service', 'write', 'node-01', 'single_device', 'o', $3,
             $1, 'pending', 'tester', 1, 1)";

/// What the store shows after the migration, the same on both backends.
async fn assert_numbered_on(store: DynStore) {
    let a = store.event_horizon(Some("a")).await.unwrap();
    assert_eq!(
        (a.pruned_through, a.latest),
        (PRUNED_THROUGH as u64, 5),
        "a's old events keep their cursors; the pruned ones stay refused"
    );
    assert!(a.is_pruned(1));
    let b = store.event_horizon(Some("b")).await.unwrap();
    assert_eq!((b.pruned_through, b.latest), (PRUNED_THROUGH as u64, 5));
    let c = store.event_horizon(Some("c")).await.unwrap();
    assert_eq!(
        (c.pruned_through, c.latest),
        (PRUNED_THROUGH as u64, 5),
        "a tenant without events: its heartbeats named 5"
    );
    for tenant in ["a", "a", "b", "c"] {
        store
            .insert_proposal(countersign_test_support::fixtures::new_proposal(
                tenant,
                spec(),
            ))
            .await
            .unwrap();
    }
    let cursors = |events: Vec<countersign_domain::Event>| -> Vec<u64> {
        events.iter().map(|e| e.cursor).collect()
    };
    // A watcher of a that had seen cursor 3 gets 5, then the new ones.
    let resumed = store.events_after(3, Some("a"), 100).await.unwrap();
    assert_eq!(cursors(resumed), [5, 6, 7]);
    let resumed = store.events_after(4, Some("b"), 100).await.unwrap();
    assert_eq!(cursors(resumed), [6], "after b's old 4: its new event");
    let c = store.events_after(0, Some("c"), 100).await.unwrap();
    assert_eq!(cursors(c), [6]);
    let new_tenant = store.create_tenant("d").await.unwrap();
    store
        .insert_proposal(new_proposal(&new_tenant.name, spec()))
        .await
        .unwrap();
    let d = store.events_after(0, Some("d"), 100).await.unwrap();
    assert_eq!(cursors(d), [1], "a tenant made since counts from 1");
}

#[tokio::test]
async fn events_logged_before_tenant_cursors_keep_their_cursor_on_sqlite() {
    let (db, mut conn) = countersign_test_support::sqlite::migrated_before("0012");
    for tenant in ["a", "b", "c"] {
        conn.execute(
            "INSERT INTO tenants (name, created_at) VALUES ($1, 0)",
            [tenant],
        )
        .unwrap();
    }
    let spec = serde_json::to_string(&spec()).unwrap();
    for (i, tenant) in LOGGED.iter().enumerate() {
        conn.execute(
            INSERT_PROPOSAL,
            rusqlite::params![format!("p{i}"), tenant, spec],
        )
        .unwrap();
    }
    conn.execute("DELETE FROM events WHERE cursor <= $1", [PRUNED_THROUGH])
        .unwrap();
    conn.execute(
        "UPDATE event_retention SET pruned_through = $1",
        [PRUNED_THROUGH],
    )
    .unwrap();

    Migrations::from_dir(&migrations("sqlite"))
        .unwrap()
        .run(&mut conn)
        .unwrap();
    let kept: Vec<(i64, i64)> = conn
        .prepare("SELECT cursor, tenant_cursor FROM events ORDER BY cursor")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    assert_eq!(kept, [(3, 3), (4, 4), (5, 5)]);
    drop(conn);

    let store = SqliteStore::connect(&db.url()).await.unwrap();
    store.migrate().await.unwrap();
    assert_numbered_on(Arc::new(store)).await;
}

#[tokio::test]
async fn events_logged_before_tenant_cursors_keep_their_cursor_on_postgres() {
    let (db, mut conn) = countersign_test_support::postgres::migrated_before("0012").await;
    // The owner writes like the service does: in each tenant's scope, and
    // prunes in the system scope.
    let spec = serde_json::to_string(&spec()).unwrap();
    let scoped =
        "SELECT set_config('app.tenant_id', $1, false), set_config('app.scope', '', false)";
    for tenant in ["a", "b", "c"] {
        sqlx::query(scoped)
            .bind(tenant)
            .execute(&mut conn)
            .await
            .unwrap();
        sqlx::query("INSERT INTO tenants (name, created_at) VALUES ($1, 0)")
            .bind(tenant)
            .execute(&mut conn)
            .await
            .unwrap();
    }
    for (i, tenant) in LOGGED.iter().enumerate() {
        sqlx::query(scoped)
            .bind(tenant)
            .execute(&mut conn)
            .await
            .unwrap();
        sqlx::query(INSERT_PROPOSAL)
            .bind(format!("p{i}"))
            .bind(tenant)
            .bind(&spec)
            .execute(&mut conn)
            .await
            .unwrap();
    }
    sqlx::query(
        "SELECT set_config('app.scope', 'system', false), set_config('app.tenant_id', '', false)",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    sqlx::query("DELETE FROM events WHERE cursor <= $1")
        .bind(PRUNED_THROUGH)
        .execute(&mut conn)
        .await
        .unwrap();
    sqlx::query("UPDATE event_retention SET pruned_through = $1")
        .bind(PRUNED_THROUGH)
        .execute(&mut conn)
        .await
        .unwrap();
    // Nothing in scope for the migration itself.
    sqlx::query("SELECT set_config('app.scope', '', false)")
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();

    PostgresStore::migrate_as_owner(&db.owner_url, &db.service_role())
        .await
        .unwrap();
    let mut conn = db.app_connection().await;
    sqlx::query("SELECT set_config('app.scope', 'system', false)")
        .execute(&mut conn)
        .await
        .unwrap();
    let kept: Vec<(i64, i64)> =
        sqlx::query_as("SELECT cursor, tenant_cursor FROM events ORDER BY cursor")
            .fetch_all(&mut conn)
            .await
            .unwrap();
    assert_eq!(kept, [(3, 3), (4, 4), (5, 5)]);
    conn.close().await.unwrap();

    assert_numbered_on(db.store().await).await;
}
