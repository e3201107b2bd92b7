//! PostgreSQL only: reads whose plan the row-level-security predicate can
//! mislead, checked on the service role's own connection.

#[path = "support/postgres.rs"]
mod support;

use countersign_store::postgres::{IN_COMMIT_ORDER, NEXT_DECISIONS, candidates_query};
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

/// The facts of a review read the proposals that may run in parallel through
/// the query's branches only, one index range each: never the tenant's whole
/// table per candidate. Checked on a freshly migrated database, whose
/// statistics call every table empty (a new deployment's first minutes, when
/// the planner chose exactly that pass and a batch's facts took 150–400 ms).
#[tokio::test]
async fn the_parallel_operation_facts_read_proposals_once_per_branch_even_on_a_young_table() {
    let db = TestDatabase::migrated().await;
    let mut conn = db.app_connection().await;
    let mut tx = conn.begin().await.unwrap();
    sqlx::query(
        "SELECT set_config('app.scope', '', true), set_config('app.tenant_id', 'acme', true),
                set_config('plan_cache_mode', 'force_custom_plan', true)",
    )
    .execute(&mut *tx)
    .await
    .unwrap();
    for (tenant_wide, branches) in [(false, 4), (true, 6)] {
        let plan: Vec<String> =
            sqlx::query_scalar(&format!("EXPLAIN {}", candidates_query(tenant_wide, false)))
                .bind("acme")
                .bind(vec!["node-1", "node-2"])
                .bind(0_i64)
                .fetch_all(&mut *tx)
                .await
                .unwrap();
        let plan = plan.join("\n");
        assert_eq!(
            plan.matches(" on proposals").count(),
            branches,
            "one read of proposals per branch:\n{plan}"
        );
        assert!(!plan.contains("Semi Join"), "{plan}");
    }
}
