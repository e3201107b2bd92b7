//! Migration 0018 on both backends: decisions and escalations made before it
//! keep every row and read back with no model review; model profiles are one
//! per (tenant, id), of a tenant that exists, and refuse an `on_unsure` other
//! than reject or escalate and a negative calls per minute.

use std::path::{Path, PathBuf};

use countersign_store::{DynStore, PostgresStore, sqlite::Migrations};
use rusqlite::params;

fn migrations(backend: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../../migrations/{backend}"))
}

const INSERT_PROPOSAL: &str = "INSERT INTO proposals (id, tenant, action, class, target,
     blast_radius, operator, spec_json, spec_digest, state, submitted_by, created_at, updated_at)
     VALUES ($1, 'a', 'db_failover', 'destructive', 'db-01', 'cluster', 'olga',
             '{\"action\": \"db_failover\", \"class\": \"destructive\", \"target\": \"db-01\",
               \"parameters\": {}, \"reason\": \"r\", \"blast_radius\": \"cluster\",
               \"operator\": \"olga\", \"context_summary\": \"\", \"incident_id\": \"\",
               \"labels\": {}, \"rollback_plan\": \"\", \"force_approve_no_sop\": false,
               \"idempotency_key\": \"\"}',
             'd', 'pending', 'k', 1, 1)";

const MOVE: &str = "UPDATE proposals SET state = $1, updated_at = $2 WHERE id = $3";

const DECIDE: &str = "INSERT INTO decisions (proposal_id, tenant, outcome, reason,
     agent_message, gates_json, missing_gates_json, reviewer, decided_at, summary,
     review_latency_ms) VALUES ($1, 'a', 'reject', 'r', 'm', '[]', '[]', 'w', 3, 's', 0)";

const OPEN: &str = "INSERT INTO escalations (proposal_id, tenant, route_id, approvals_required,
     approver_roles_json, opened_at, expires_at, gates_json, reviewer, review_latency_ms)
     VALUES ($1, 'a', 'r', 2, '[\"oncall\"]', 10, 100, '[]', 'w', 1)";

const MOVES: [(&str, &str, i64); 4] = [
    ("p-decided", "reviewing", 2),
    ("p-decided", "rejected", 3),
    ("p-open", "reviewing", 4),
    ("p-open", "escalated", 5),
];

const MODELS: &str = "SELECT
     (SELECT model_json FROM decisions WHERE proposal_id = 'p-decided'),
     (SELECT model_json FROM escalations WHERE proposal_id = 'p-open')";

const PUT_PROFILE: &str = "INSERT INTO model_profiles (tenant, id, actions_json, classes_json,
     blast_radii_json, target_selector_json, endpoint, on_unsure, calls_per_minute, updated_at)
     VALUES ($1, $2, '[]', '[]', '[]', '{}', 'local', $3, $4, 0)";

/// Profiles the schema refuses: a second (a, p1), an unknown tenant, an
/// `on_unsure` of approve, a negative cap.
const REFUSED: [(&str, &str, &str, i64); 4] = [
    ("a", "p1", "reject", 0),
    ("nobody", "p2", "reject", 0),
    ("a", "p3", "approve", 0),
    ("a", "p4", "escalate", -1),
];

/// What the store reads of the rows made before the migration: no model
/// review on the decision or on the escalation.
async fn read_back(store: &DynStore) {
    let decided = store.get_proposal("a", "p-decided").await.unwrap().unwrap();
    assert_eq!(decided.decision.unwrap().model, None);
    let open = store.get_escalation("a", "p-open").await.unwrap().unwrap();
    assert_eq!(open.escalation.model, None);
    assert_eq!(open.escalation.route_id, "r");
    assert!(store.list_model_profiles("a").await.unwrap().len() == 1);
}

#[tokio::test]
async fn an_sqlite_database_gains_model_profiles_and_keeps_its_decisions() {
    let (db, mut conn) = countersign_test_support::sqlite::migrated_before("0018");
    conn.execute("INSERT INTO tenants (name, created_at) VALUES ('a', 0)", [])
        .unwrap();
    for id in ["p-decided", "p-open"] {
        conn.execute(INSERT_PROPOSAL, [id]).unwrap();
    }
    for (id, state, at) in MOVES {
        conn.execute(MOVE, params![state, at, id]).unwrap();
    }
    conn.execute(DECIDE, ["p-decided"]).unwrap();
    conn.execute(OPEN, ["p-open"]).unwrap();

    Migrations::from_dir(&migrations("sqlite"))
        .unwrap()
        .run(&mut conn)
        .unwrap();

    let models: (Option<String>, Option<String>) = conn
        .query_row(MODELS, [], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap();
    assert_eq!(
        models,
        (None, None),
        "rows made before keep no model review"
    );
    conn.execute(PUT_PROFILE, params!["a", "p1", "escalate", 30])
        .unwrap();
    for (tenant, id, on_unsure, calls) in REFUSED {
        let refused = conn.execute(PUT_PROFILE, params![tenant, id, on_unsure, calls]);
        assert!(refused.is_err(), "{tenant} {id}: {refused:?}");
    }
    drop(conn);

    let store: DynStore = std::sync::Arc::new(db.store().await);
    read_back(&store).await;
}

#[tokio::test]
async fn a_postgres_database_gains_model_profiles_and_keeps_its_decisions() {
    let (db, mut conn) = countersign_test_support::postgres::migrated_before("0018").await;
    // The owner writes like the service does: in the tenant's scope.
    let scope = |tenant: &str| format!("SELECT set_config('app.tenant_id', '{tenant}', false)");
    sqlx::query(&scope("a")).execute(&mut conn).await.unwrap();
    sqlx::query("INSERT INTO tenants (name, created_at) VALUES ('a', 0)")
        .execute(&mut conn)
        .await
        .unwrap();
    for id in ["p-decided", "p-open"] {
        sqlx::query(INSERT_PROPOSAL)
            .bind(id)
            .execute(&mut conn)
            .await
            .unwrap();
    }
    for (id, state, at) in MOVES {
        sqlx::query(MOVE)
            .bind(state)
            .bind(at)
            .bind(id)
            .execute(&mut conn)
            .await
            .unwrap();
    }
    for (statement, id) in [(DECIDE, "p-decided"), (OPEN, "p-open")] {
        sqlx::query(statement)
            .bind(id)
            .execute(&mut conn)
            .await
            .unwrap();
    }
    sqlx::query(&scope("")).execute(&mut conn).await.unwrap();

    PostgresStore::migrate_as_owner(&db.owner_url, &db.service_role())
        .await
        .unwrap();

    sqlx::query(&scope("a")).execute(&mut conn).await.unwrap();
    let models: (Option<String>, Option<String>) =
        sqlx::query_as(MODELS).fetch_one(&mut conn).await.unwrap();
    assert_eq!(
        models,
        (None, None),
        "rows made before keep no model review"
    );
    let put = |tenant: &'static str, id: &'static str, on_unsure: &'static str, calls: i64| {
        sqlx::query(PUT_PROFILE)
            .bind(tenant)
            .bind(id)
            .bind(on_unsure)
            .bind(calls)
    };
    put("a", "p1", "escalate", 30)
        .execute(&mut conn)
        .await
        .unwrap();
    for (tenant, id, on_unsure, calls) in REFUSED {
        let refused = put(tenant, id, on_unsure, calls).execute(&mut conn).await;
        assert!(refused.is_err(), "{tenant} {id}: {refused:?}");
    }
    drop(conn);

    read_back(&db.store().await).await;
}
