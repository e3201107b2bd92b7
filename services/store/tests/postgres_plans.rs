//! PostgreSQL only: reads whose plan the row-level-security predicate can
//! mislead, checked on the service role's own connection.

#[path = "support/postgres.rs"]
mod support;

use countersign_store::postgres::{IN_COMMIT_ORDER, NEXT_DECISIONS};
use sqlx::Connection;
use support::TestDatabase;

/// The sequencer reads the next decisions by walking the commit-order index,
/// in system scope, with the parameters it binds: never a scan of the table
/// (3 s a batch at 1,000,000 decisions, when the planner chose one).
#[tokio::test]
async fn the_sequencer_reads_the_next_decisions_along_the_commit_order_index() {
    let db = TestDatabase::migrated().await;
    let mut conn = db.app_connection().await;
    let mut tx = conn.begin().await.unwrap();
    sqlx::query(
        "SELECT set_config('app.scope', 'system', true), set_config('app.tenant_id', '', true),
                set_config('plan_cache_mode', 'force_custom_plan', true)",
    )
    .execute(&mut *tx)
    .await
    .unwrap();
    sqlx::query(IN_COMMIT_ORDER)
        .execute(&mut *tx)
        .await
        .unwrap();
    let plan: Vec<String> = sqlx::query_scalar(&format!("EXPLAIN {NEXT_DECISIONS}"))
        .bind(0_i64)
        .bind(1_000_i64)
        .fetch_all(&mut *tx)
        .await
        .unwrap();
    let plan = plan.join("\n");
    assert!(
        plan.contains("Index Scan using decisions_by_commit_order on decisions"),
        "{plan}"
    );
    assert!(!plan.contains("Seq Scan on decisions"), "{plan}");
    assert!(!plan.contains("Sort"), "{plan}");
}
