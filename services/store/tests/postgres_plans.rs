//! PostgreSQL only: reads whose plan the row-level-security predicate can
//! mislead, checked on the service role's own connection.

use countersign_domain::escalation::InboxFilter;
use countersign_store::postgres::{
    BEGIN_REVIEWS, BREAKER_REJECTIONS, DECIDED_STATES, ESCALATIONS_DUE, IN_COMMIT_ORDER,
    LOCK_FOR_DECISION, LOCK_FOR_DECISIONS, NEXT_DECISIONS, NEXT_ESCALATION_EXPIRY,
    OPEN_ESCALATIONS_BY_TENANT, OPEN_ESCALATIONS_PAGE, OVERDUE, PROPOSAL_BY_KEY, VOTE_EVENTS_AFTER,
    VOTES_ON_PROPOSALS, candidates_query, events_after_query, events_at_query,
};
use countersign_store::{Escalations, PostgresStore};
use countersign_test_support::postgres::TestDatabase;
use sqlx::Connection;

/// Puts a transaction in `tenant`'s row-level-security scope (the system
/// scope when empty) under `plan_cache_mode = mode`.
async fn scoped(conn: &mut sqlx::PgConnection, tenant: &str, mode: &str) {
    let scope = if tenant.is_empty() { "system" } else { "" };
    sqlx::query(
        "SELECT set_config('app.scope', $1, true), set_config('app.tenant_id', $2, true),
                set_config('plan_cache_mode', $3, true)",
    )
    .bind(scope)
    .bind(tenant)
    .bind(mode)
    .execute(conn)
    .await
    .unwrap();
}

/// Planning every statement for its parameters, as the store's facts and
/// sequencer transactions do (`scope::CUSTOM_PLANS`).
const PER_RUN: &str = "force_custom_plan";

/// The sequencer reads the next decisions by walking the commit-order index,
/// in system scope, with the parameters it binds: never a scan of the table
/// (3 s a batch at 1,000,000 decisions, when the planner chose one).
#[tokio::test]
async fn the_sequencer_reads_the_next_decisions_along_the_commit_order_index() {
    let db = TestDatabase::migrated().await;
    let mut conn = db.app_connection().await;
    let mut tx = conn.begin().await.unwrap();
    scoped(&mut tx, "", PER_RUN).await;
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
    scoped(&mut tx, "acme", PER_RUN).await;
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

/// Each candidate's cluster is read by its target's key, on a young `targets`
/// too: a deployment's first minutes, when a tenant's targets were just
/// written and never analysed and, joined as a table, they were read whole
/// and compared with every candidate (a benchmark's 1,024 targets: 2 ms a
/// batch).
#[tokio::test]
async fn the_parallel_operation_facts_read_each_candidates_target_by_key_on_a_young_table() {
    let db = TestDatabase::migrated().await;
    db.store().await.create_tenant("acme").await.unwrap();
    let mut owner = db.owner_connection().await;
    sqlx::query("ALTER TABLE targets SET (autovacuum_enabled = false)")
        .execute(&mut owner)
        .await
        .unwrap();
    grow_tables(
        &mut owner,
        "acme",
        "node-",
        1_024,
        &[
            "INSERT INTO targets (tenant, id, status, labels_json, cluster, updated_at)
           SELECT $1, $2 || i, 'online', '{}', 'c' || (i % 4), 0
           FROM generate_series(1, $3) AS i",
        ],
    )
    .await;
    owner.close().await.unwrap();

    let mut conn = db.app_connection().await;
    let mut tx = conn.begin().await.unwrap();
    scoped(&mut tx, "acme", PER_RUN).await;
    let plan: Vec<String> =
        sqlx::query_scalar(&format!("EXPLAIN {}", candidates_query(false, false)))
            .bind("acme")
            .bind((1..=16).map(|i| format!("node-{i}")).collect::<Vec<_>>())
            .bind(0_i64)
            .fetch_all(&mut *tx)
            .await
            .unwrap();
    let plan = plan.join("\n");
    assert!(plan.contains("using targets_pkey on targets"), "{plan}");
    assert!(!plan.contains("targets_by_cluster"), "{plan}");
    assert!(!plan.contains("Seq Scan on targets"), "{plan}");
}

/// The plan of a batch read by key (the decision transaction's first read), as
/// the service role sees it in `tenant`'s scope.
async fn plan_of_a_batch_read_by_key(conn: &mut sqlx::PgConnection, tenant: &str) -> String {
    let mut tx = conn.begin().await.unwrap();
    scoped(&mut tx, tenant, PER_RUN).await;
    let plan: Vec<String> = sqlx::query_scalar(
        "EXPLAIN SELECT id, state, target FROM proposals WHERE tenant = $1 AND id = ANY($2)
         ORDER BY id FOR UPDATE",
    )
    .bind(tenant)
    // A reviewer's batch: 16 proposals.
    .bind(
        (0..16)
            .map(|i| format!("P{:026}", 40 + i))
            .collect::<Vec<_>>(),
    )
    .fetch_all(&mut *tx)
    .await
    .unwrap();
    plan.join("\n")
}

/// Runs `statements` as the owner in `tenant`'s scope, in one transaction,
/// each with `tenant`, `prefix` and `n` bound as `$1`, `$2` and `$3` (so each
/// names all three).
async fn grow_tables(
    owner: &mut sqlx::PgConnection,
    tenant: &str,
    prefix: &str,
    n: i64,
    statements: &[&str],
) {
    let mut tx = owner.begin().await.unwrap();
    sqlx::query("SELECT set_config('app.tenant_id', $1, true)")
        .bind(tenant)
        .execute(&mut *tx)
        .await
        .unwrap();
    for sql in statements {
        sqlx::query(sql)
            .bind(tenant)
            .bind(prefix)
            .bind(n)
            .execute(&mut *tx)
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
}

/// Writes `n` approved proposals of `tenant` (ids `prefix` and a padded
/// number, over 50 targets) in its scope, as the owner, in one transaction.
async fn insert_approved(owner: &mut sqlx::PgConnection, tenant: &str, prefix: &str, n: i64) {
    grow_tables(
        owner,
        tenant,
        prefix,
        n,
        &[
            "INSERT INTO proposals (id, tenant, action, class, target, blast_radius, operator,
             spec_json, spec_digest, state, submitted_by, created_at, updated_at, decided_at)
         SELECT $2 || lpad(i::text, 26, '0'), $1, 'restart', 'write', 'node-' || (i % 50),
                'single_device', 'bot', '{}', lpad(i::text, 64, '0'), 'approved', 'bot', i, i, i
         FROM generate_series(1, $3) AS i",
        ],
    )
    .await;
}

/// On a young table the planner knows no tenant's share of the rows, reads a
/// batch by `tenant` alone (a pass over all of the tenant's rows) and keeps
/// doing so until autovacuum's next turn. The store refreshes the statistics
/// on its own clock, as the service role (which may not ANALYZE: it does not
/// own the tables), and the batch is read by key from then on.
#[tokio::test]
async fn refreshed_statistics_turn_a_young_tables_batch_reads_into_key_reads() {
    let db = TestDatabase::migrated().await;
    let store = db.store().await;
    store.create_tenant("acme").await.unwrap();
    let mut owner = db.owner_connection().await;
    // Only this test's refresh may analyse the table.
    sqlx::query("ALTER TABLE proposals SET (autovacuum_enabled = false)")
        .execute(&mut owner)
        .await
        .unwrap();
    insert_approved(&mut owner, "acme", "P", 5000).await;
    // A backend reports its counts when it ends (or after 10 s idle).
    owner.close().await.unwrap();

    let mut conn = db.app_connection().await;
    let before = plan_of_a_batch_read_by_key(&mut conn, "acme").await;
    assert!(!before.contains("Index Cond: (id = ANY"), "{before}");

    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    let mut analysed = 0;
    while analysed == 0 {
        assert!(std::time::Instant::now() < deadline, "nothing was analysed");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        analysed = store.refresh_statistics().await.unwrap();
    }
    let after = plan_of_a_batch_read_by_key(&mut conn, "acme").await;
    assert!(after.contains("Index Cond: (id = ANY"), "{after}");
    // Nothing changed since: nothing to do.
    assert_eq!(store.refresh_statistics().await.unwrap(), 0);
    // The refresh samples at a target of 10 (migration 0027): a histogram of
    // at most 11 bounds where the server's target of 100 makes 101 of the
    // 5,000 distinct `created_at` values. Row security hides a table's
    // statistics from its own roles; the superuser reads them.
    let mut superuser = db.superuser_connection().await;
    let bounds: i32 = sqlx::query_scalar(
        "SELECT array_length(histogram_bounds, 1) FROM pg_stats
         WHERE tablename = 'proposals' AND attname = 'created_at'",
    )
    .fetch_one(&mut superuser)
    .await
    .unwrap();
    assert!(bounds <= 11, "{bounds} histogram bounds");
}

/// Grows tenants to so many decided proposals each (with their SUBMITTED
/// events), as the owner, and analyses the tables.
async fn grow(db: &TestDatabase, sizes: &[(&str, i64)]) {
    let store = db.store().await;
    let mut owner = db.owner_connection().await;
    for &(tenant, n) in sizes {
        store.create_tenant(tenant).await.unwrap();
        insert_approved(&mut owner, tenant, &format!("{tenant}-"), n).await;
    }
    sqlx::query("ANALYZE proposals, events")
        .execute(&mut owner)
        .await
        .unwrap();
}

/// The plan `sql` runs with, given `args`, in `tenant`'s scope (the system
/// scope when empty) under `plan_cache_mode = mode`: `force_generic_plan` is
/// the plan a pooled connection caches after five runs, made without the
/// parameters; `force_custom_plan` is planning each run for its own.
async fn plan_in(
    conn: &mut sqlx::PgConnection,
    tenant: &str,
    mode: &str,
    sql: &str,
    args: &str,
) -> String {
    sqlx::raw_sql(&format!("PREPARE hot AS {sql}"))
        .execute(&mut *conn)
        .await
        .unwrap();
    let plan = explain_prepared(conn, tenant, mode, "hot", args).await;
    // A prepared statement outlives its transaction.
    sqlx::raw_sql("DEALLOCATE hot")
        .execute(&mut *conn)
        .await
        .unwrap();
    plan
}

/// The reads run thousands of times a second (a proposal by key, the
/// fan-out's next events) keep PostgreSQL's default planning: one plan per
/// connection, made without their parameters. On grown tables each of those
/// plans still reads by key, never a whole table or tenant. (Planning every
/// run was a quarter of the database's CPU per decision.) A watcher's
/// replay of one tenant is planned per run: made without the tenant, its plan
/// walked every tenant's log past the cursor (checked here too).
#[tokio::test]
async fn the_hot_reads_keep_key_plans_when_planned_once_for_any_parameters() {
    let db = TestDatabase::migrated().await;
    grow(&db, &[("acme", 200), ("other", 20_000)]).await;
    let mut conn = db.app_connection().await;
    let (generic, custom) = ("force_generic_plan", "force_custom_plan");
    let (every_tenant, one_tenant) = (
        events_after_query(false, 100),
        events_after_query(true, 100),
    );
    let cases = [
        (
            "acme",
            generic,
            PROPOSAL_BY_KEY,
            "'acme', 'acme-00000000000000000000000042'",
            vec!["Index Scan using proposals_pkey on proposals"],
        ),
        (
            "",
            generic,
            every_tenant.as_str(),
            "20100",
            vec![
                "Index Scan using events_pkey on events e",
                "Index Scan using proposals_pkey on proposals p",
                "Index Scan using decisions_pkey on decisions d",
            ],
        ),
        (
            "acme",
            custom,
            one_tenant.as_str(),
            "10, 'acme'",
            vec![
                "Index Scan using events_by_tenant_cursor on events e",
                "Index Scan using proposals_pkey on proposals p",
            ],
        ),
    ];
    for (tenant, mode, sql, args, expected) in cases {
        let plan = plan_in(&mut conn, tenant, mode, sql, args).await;
        for step in expected {
            assert!(plan.contains(step), "{sql}\nexpected {step:?} in:\n{plan}");
        }
        assert!(!plan.contains("Seq Scan"), "{sql}\n{plan}");
        assert!(!plan.contains("Bitmap"), "{sql}\n{plan}");
    }
}

/// `EXPLAIN EXECUTE name(args)` in `tenant`'s scope (the system scope when
/// empty) under `plan_cache_mode = mode`.
async fn explain_prepared(
    conn: &mut sqlx::PgConnection,
    tenant: &str,
    mode: &str,
    name: &str,
    args: &str,
) -> String {
    let mut tx = conn.begin().await.unwrap();
    scoped(&mut tx, tenant, mode).await;
    let plan: Vec<String> = sqlx::query_scalar(&format!("EXPLAIN EXECUTE {name}({args})"))
        .fetch_all(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    plan.join("\n")
}

/// What every review batch writes (REVIEWING, the lock for its decision, the
/// decided state) and the fan-out reads after it, on a young table (a
/// deployment's first minutes, every benchmark run): each proposal is read by
/// key, with the plan a connection cached while the table was tiny (growth
/// alone does not replace it) and with one made for the run. Joined,
/// PostgreSQL planned them on guesses: 100 rows for a recordset, ten pages
/// for a table never analysed, a handful of rows under the row-level-security
/// filter. Every batch then hashed the tenant's
/// proposals and every read of the fan-out walked all of them, probing the
/// log for each (12 ms of PostgreSQL CPU per decision at 100 decisions/s).
#[tokio::test]
async fn a_review_batchs_writes_and_the_fan_out_read_proposals_by_key_on_a_young_table() {
    let db = TestDatabase::migrated().await;
    db.store().await.create_tenant("acme").await.unwrap();
    let mut owner = db.owner_connection().await;
    insert_approved(&mut owner, "acme", "acme-0", 20).await;
    review_batches_read_by_key_as_acme_grows(&db, &mut owner).await;
}

/// The same for a tenant the statistics do not know yet: analysed while
/// only another tenant had proposals, they give the new one none, and the
/// planner (which estimates with the tenant of the transaction that plans)
/// reads its batch by `tenant` alone. The connection then keeps that plan for
/// every tenant while the new one grows: a batch's REVIEWING took 0.25–8 s
/// a few thousand proposals into `bench noisy-neighbour --production`, whose
/// flooding tenant starts after the quiet one.
#[tokio::test]
async fn a_new_tenants_review_batches_read_proposals_by_key_while_the_statistics_know_only_others()
{
    let db = TestDatabase::migrated().await;
    grow(&db, &[("quiet", 200)]).await;
    db.store().await.create_tenant("acme").await.unwrap();
    let mut owner = db.owner_connection().await;
    review_batches_read_by_key_as_acme_grows(&db, &mut owner).await;
}

/// Plans a review batch's statements and the fan-out's read in `acme`'s scope
/// (cached, as a pooled connection keeps them), grows `acme` by 3,000
/// proposals with no analysis between, and checks that both the cached
/// plans and plans made for the run read each proposal by key.
async fn review_batches_read_by_key_as_acme_grows(
    db: &TestDatabase,
    owner: &mut sqlx::PgConnection,
) {
    // Not analysed by autovacuum during the test.
    sqlx::raw_sql(
        "ALTER TABLE proposals SET (autovacuum_enabled = false);
         ALTER TABLE events SET (autovacuum_enabled = false);",
    )
    .execute(&mut *owner)
    .await
    .unwrap();
    let mut conn = db.app_connection().await;
    let id = "acme-00000000000000000000000042";
    // A batch of 16, as a reviewer leases them.
    let batch = (40..56)
        .map(|i| format!("'acme-{i:026}'"))
        .collect::<Vec<_>>()
        .join(", ");
    let batch_of = |value: &str| vec![value; 16].join(", ");
    let fan_out = events_after_query(false, 256);
    let picked = events_at_query();
    let cases = [
        (
            "begin",
            "acme",
            BEGIN_REVIEWS,
            format!("1, 'acme', ARRAY[{batch}]"),
        ),
        ("lock", "acme", LOCK_FOR_DECISION, format!("'acme', '{id}'")),
        ("by_key", "acme", PROPOSAL_BY_KEY, format!("'acme', '{id}'")),
        (
            "locks",
            "acme",
            LOCK_FOR_DECISIONS,
            format!("'acme', ARRAY[{batch}]"),
        ),
        (
            "decided",
            "acme",
            DECIDED_STATES,
            format!(
                "'acme', 1, ARRAY[{batch}], ARRAY[{}], ARRAY[{}]::bigint[], ARRAY[{}]",
                batch_of("'approved'"),
                batch_of("1"),
                batch_of("'reviewing'")
            ),
        ),
        ("fan_out", "", fan_out.as_str(), "2990".to_owned()),
        (
            "fan_out_picked",
            "",
            picked.as_str(),
            "ARRAY[2990, 2995]::bigint[]".to_owned(),
        ),
    ];
    let generic = "force_generic_plan";
    for (name, tenant, sql, args) in &cases {
        sqlx::raw_sql(&format!("PREPARE {name} AS {sql}"))
            .execute(&mut conn)
            .await
            .unwrap();
        // Planned (and cached) before the tenant grows.
        explain_prepared(&mut conn, tenant, generic, name, args).await;
    }
    insert_approved(owner, "acme", "acme-", 3_000).await;

    for (name, tenant, sql, args) in &cases {
        let cached = explain_prepared(&mut conn, tenant, generic, name, args).await;
        let per_run = plan_in(&mut conn, tenant, PER_RUN, sql, args).await;
        for plan in [cached, per_run] {
            assert!(
                plan.contains("using proposals_pkey on proposals"),
                "{sql}\n{plan}"
            );
            assert!(!plan.contains("Seq Scan on proposals"), "{sql}\n{plan}");
            // Never by the tenant (the row-level-security predicate's index).
            assert!(!plan.contains("Index Cond: (tenant"), "{sql}\n{plan}");
            if ["begin", "decided"].contains(name) {
                // The update finds each locked row by its address.
                assert!(plan.contains("Tid Scan on proposals"), "{sql}\n{plan}");
            }
            if ["fan_out", "fan_out_picked"].contains(name) {
                assert!(
                    plan.contains("using decisions_pkey on decisions"),
                    "{sql}\n{plan}"
                );
            }
        }
    }
}

/// The rejections a batch's breakers count at commit: one range of the
/// partial index per operator, with a plan made for the run and with one
/// cached while the table was young.
#[tokio::test]
async fn a_batchs_breakers_read_an_operators_rejections_along_the_partial_index() {
    let db = TestDatabase::migrated().await;
    db.store().await.create_tenant("acme").await.unwrap();
    let mut owner = db.owner_connection().await;
    sqlx::raw_sql("ALTER TABLE proposals SET (autovacuum_enabled = false)")
        .execute(&mut owner)
        .await
        .unwrap();
    let mut conn = db.app_connection().await;
    let args = "'acme', ARRAY['bot', 'someone'], 2000";
    sqlx::raw_sql(&format!("PREPARE rejections AS {BREAKER_REJECTIONS}"))
        .execute(&mut conn)
        .await
        .unwrap();
    explain_prepared(&mut conn, "acme", "force_generic_plan", "rejections", args).await;
    insert_approved(&mut owner, "acme", "acme-", 3_000).await;
    sqlx::raw_sql("UPDATE proposals SET state = 'rejected' WHERE id LIKE 'acme-%'")
        .execute(&mut owner)
        .await
        .unwrap();
    let cached =
        explain_prepared(&mut conn, "acme", "force_generic_plan", "rejections", args).await;
    let per_run = plan_in(&mut conn, "acme", PER_RUN, BREAKER_REJECTIONS, args).await;
    for plan in [cached, per_run] {
        assert!(
            plan.contains("proposals_operator_rejections on proposals"),
            "{plan}"
        );
        assert!(!plan.contains("Seq Scan on proposals"), "{plan}");
    }
}

/// The tables a decision writes carry the indexes their queries need and no
/// other (migrations/postgres/0023 names each one's query), each `partial`
/// where it holds only the rows its WHERE names.
#[tokio::test]
async fn the_decision_paths_tables_carry_only_the_indexes_their_queries_use() {
    let db = TestDatabase::migrated().await;
    let mut owner = db.owner_connection().await;
    let indexes: Vec<String> = sqlx::query_scalar(
        "SELECT tablename || ' ' || indexname
                || CASE WHEN indexdef LIKE '% WHERE %' THEN ' partial' ELSE '' END
         FROM pg_indexes
         WHERE tablename IN ('proposals', 'queue_entries', 'events', 'decisions')
         ORDER BY tablename, indexname",
    )
    .fetch_all(&mut owner)
    .await
    .unwrap();
    assert_eq!(
        indexes,
        [
            "decisions decisions_by_commit_order",
            "decisions decisions_pkey",
            "events events_by_tenant_cursor",
            "events events_pkey",
            "events events_votes_by_proposal partial",
            "proposals proposals_by_end",
            "proposals proposals_idempotency partial",
            "proposals proposals_operator_rejections partial",
            "proposals proposals_pkey",
            "proposals proposals_radius_end partial",
            "proposals proposals_reviewing partial",
            "proposals proposals_target_end",
            "proposals proposals_undecided partial",
            "queue_entries queue_entries_pkey",
            "queue_entries queue_entries_proposal_id_key",
            "queue_entries queue_unpublished partial",
        ]
    );
}

/// The janitor's overdue reviews can be read along `proposals_reviewing`, an
/// index of the proposals under review alone (the planner told to avoid
/// scans: on a young table it may prefer one).
#[tokio::test]
async fn the_overdue_reviews_are_a_range_of_the_index_of_reviews() {
    let db = TestDatabase::migrated().await;
    let mut conn = db.app_connection().await;
    let mut tx = conn.begin().await.unwrap();
    scoped(&mut tx, "", PER_RUN).await;
    sqlx::query("SET LOCAL enable_seqscan = off")
        .execute(&mut *tx)
        .await
        .unwrap();
    let plan: Vec<String> = sqlx::query_scalar(&format!("EXPLAIN {OVERDUE}"))
        .bind(0_i64)
        .bind(100_i64)
        .fetch_all(&mut *tx)
        .await
        .unwrap();
    let plan = plan.join("\n");
    assert!(
        plan.contains("Index Scan using proposals_reviewing on proposals"),
        "{plan}"
    );
    assert!(!plan.contains("Sort"), "{plan}");
}

/// Escalates `tenant`'s proposals written by [`insert_approved`] (ids
/// starting with `prefix`), in its scope, as the owner: every one closed but
/// the newest `open`, each with one vote (and so a VOTE event).
async fn insert_escalations(owner: &mut sqlx::PgConnection, tenant: &str, prefix: &str, open: i64) {
    grow_tables(
        owner,
        tenant,
        prefix,
        open,
        &[
            "INSERT INTO escalations (proposal_id, tenant, route_id, approvals_required,
                 approver_roles_json, opened_at, expires_at, gates_json, reviewer,
                 review_latency_ms, closed_at)
             SELECT id, tenant, 'r', 2, '[\"oncall\"]', created_at, created_at + 3600000,
                    '[]', 'w', 0, created_at + 1
             FROM proposals WHERE tenant = $1 AND id LIKE $2 || '%' AND $3 >= 0",
            "UPDATE escalations SET closed_at = NULL WHERE proposal_id IN (
                 SELECT proposal_id FROM escalations
                 WHERE tenant = $1 AND proposal_id LIKE $2 || '%'
                 ORDER BY proposal_id DESC LIMIT $3)",
            "INSERT INTO votes (tenant, proposal_id, person, person_key, key_id, verdict,
                 comment, at)
             SELECT tenant, proposal_id, 'ann', 'ann', 'k', 'approve', '', opened_at
             FROM escalations WHERE tenant = $1 AND proposal_id LIKE $2 || '%' AND $3 >= 0",
        ],
    )
    .await;
}

/// A read whose plan is pinned: its scope (a tenant, or "" for the system
/// scope), the query, its arguments, the plan modes it runs under, and the
/// indexes any of which it may walk.
type Case<'a> = (&'a str, &'a str, String, &'a [&'a str], &'a [&'a str]);

/// The inbox (a tenant's open escalations, a page after a key), the
/// janitor's expiry sweep and its timer, the gauge of open escalations, a
/// proposal's votes and the VOTE events after one of its events: each walks
/// its index, on tables of mostly closed escalations and on young tables,
/// with a plan made for the run and with the plan a pooled connection caches
/// without the parameters. Never a pass over every escalation, vote or
/// event.
#[tokio::test]
async fn the_escalation_reads_walk_their_indexes_whatever_the_tables_hold() {
    let young = TestDatabase::migrated().await;
    young.store().await.create_tenant("acme").await.unwrap();
    let grown = TestDatabase::migrated().await;
    grow(&grown, &[("acme", 200), ("other", 20_000)]).await;
    let mut owner = grown.owner_connection().await;
    insert_escalations(&mut owner, "acme", "acme-", 10).await;
    insert_escalations(&mut owner, "other", "other-", 50).await;
    sqlx::query("ANALYZE escalations, votes, events")
        .execute(&mut owner)
        .await
        .unwrap();

    let id = "acme-00000000000000000000000042";
    let both = &["force_generic_plan", PER_RUN][..];
    let cases: [Case; 6] = [
        // Planned per run (`list_escalations`): planned once, without the
        // tenant, it read every tenant's open escalations and sorted them.
        (
            "acme",
            OPEN_ESCALATIONS_PAGE,
            "'acme', 0, '', 101".to_owned(),
            &[PER_RUN],
            &["escalations_open"],
        ),
        (
            "",
            ESCALATIONS_DUE,
            "1000, 100".to_owned(),
            both,
            &["escalations_expiring"],
        ),
        (
            "",
            NEXT_ESCALATION_EXPIRY,
            String::new(),
            both,
            &["escalations_expiring"],
        ),
        // Every open escalation is counted: either index of the open ones.
        (
            "",
            OPEN_ESCALATIONS_BY_TENANT,
            String::new(),
            both,
            &["escalations_open", "escalations_expiring"],
        ),
        (
            "acme",
            VOTES_ON_PROPOSALS,
            format!("'acme', ARRAY['{id}']"),
            both,
            &["votes_one_per_person"],
        ),
        (
            "acme",
            VOTE_EVENTS_AFTER,
            format!("'acme', '{id}', 10"),
            both,
            &["events_votes_by_proposal"],
        ),
    ];
    let mut failures = Vec::new();
    for (label, db) in [("young", &young), ("grown", &grown)] {
        let mut conn = db.app_connection().await;
        for (tenant, sql, args, modes, indexes) in &cases {
            for mode in *modes {
                let plan = if args.is_empty() {
                    let mut tx = conn.begin().await.unwrap();
                    scoped(&mut tx, tenant, mode).await;
                    let plan: Vec<String> = sqlx::query_scalar(&format!("EXPLAIN {sql}"))
                        .fetch_all(&mut *tx)
                        .await
                        .unwrap();
                    tx.commit().await.unwrap();
                    plan.join("\n")
                } else {
                    plan_in(&mut conn, tenant, mode, sql, args).await
                };
                // An index scan (plain, index only or bitmap) of one of them.
                let indexed = indexes.iter().any(|index| {
                    plan.contains(&format!(" using {index} "))
                        || plan.contains(&format!(" on {index} "))
                });
                if !indexed || plan.contains("Seq Scan") {
                    failures.push(format!(
                        "{label}, {mode}: {sql}\nexpected one of {indexes:?} in:\n{plan}"
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));

    // The store runs the inbox's page with a plan made for its tenant every
    // time, never the one a connection caches after five runs (above: made
    // without the tenant). One connection, so its prepared statements are
    // the ones counted. (The proposals it reads need a spec.)
    let spec = serde_json::to_string(&countersign_test_support::fixtures::spec()).unwrap();
    grow_tables(
        &mut owner,
        "acme",
        &spec,
        0,
        &["UPDATE proposals SET spec_json = $2 WHERE tenant = $1 AND $3 = 0"],
    )
    .await;
    let store = PostgresStore::connect_with(&grown.app_url, 1)
        .await
        .unwrap();
    for _ in 0..12 {
        store
            .list_escalations("acme", &InboxFilter::default(), None, 101)
            .await
            .unwrap();
    }
    let plans: Vec<(i64, i64)> = sqlx::query_as(
        "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = $1",
    )
    .bind(OPEN_ESCALATIONS_PAGE)
    .fetch_all(store.pool())
    .await
    .unwrap();
    assert_eq!(plans.len(), 1, "{plans:?}");
    let (generic_plans, custom_plans) = plans[0];
    assert_eq!(generic_plans, 0, "planned once for any tenant: {plans:?}");
    assert!(custom_plans >= 12, "{plans:?}");
}
