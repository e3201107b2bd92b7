//! PostgreSQL only: the second line of tenant isolation (row-level security,
//! probed with raw SQL as the service role), the role checks at connect,
//! append-only history (decisions, the log, checkpoints, SOP versions), and
//! copies changed under the store named by the log's verification.

use countersign_domain::Proposal;
use countersign_domain::{BlastRadius, Role};
use countersign_store::{DynStore, NewApiKey, NewProposal, PostgresStore, Proposals, StoreError};
use countersign_test_support::{
    fixtures::{new_proposal, spec},
    postgres::TestDatabase,
};
use sqlx::{Connection, PgConnection};

/// Every table that holds a tenant's rows, with the column that names it.
const TENANT_TABLES: &[(&str, &str)] = &[
    ("tenants", "name"),
    ("api_keys", "tenant"),
    ("proposals", "tenant"),
    ("sops", "tenant"),
    ("sop_versions", "tenant"),
    ("targets", "tenant"),
    ("queue_entries", "tenant"),
    ("decisions", "tenant"),
    ("events", "tenant"),
    ("discarded_results", "tenant"),
    ("breaker_resets", "tenant"),
    ("audit_log", "tenant"),
    ("audit_checkpoints", "tenant"),
    ("routes", "tenant"),
    ("escalations", "tenant"),
    ("votes", "tenant"),
    ("model_profiles", "tenant"),
];

/// Tables the service role may not delete from at all (see below).
const APPEND_ONLY: &[&str] = &[
    "decisions",
    "audit_log",
    "audit_checkpoints",
    "sop_versions",
    "votes",
];

/// A PENDING proposal of `tenant`, submitted as `tester`.
async fn submitted<S: Proposals + ?Sized>(store: &S, tenant: &str) -> Proposal {
    store
        .insert_proposal(new_proposal(tenant, spec()))
        .await
        .unwrap()
        .proposal()
        .clone()
}

/// A tenant with a row in every table (a decided proposal, a late result, an
/// SOP, a target, a key, a breaker reset, a route, an escalated proposal
/// with a vote, a model profile).
async fn populate(store: &DynStore, tenant: &str) -> String {
    store.create_tenant(tenant).await.unwrap();
    store
        .create_api_key(NewApiKey {
            tenant: tenant.into(),
            name: String::new(),
            role: Role::Admin,
            agent: false,
            person: None,
        })
        .await
        .unwrap();
    store
        .put_sop(
            tenant,
            countersign_store::SopInput {
                id: "SOP-1".into(),
                action: "host_restart_service".into(),
                title: "t".into(),
                covers: String::new(),
                rollback_path: "undo".into(),
                max_blast_radius: BlastRadius::Cluster,
                selector: Default::default(),
            },
        )
        .await
        .unwrap();
    store
        .put_target(
            tenant,
            "node-01",
            countersign_domain::TargetStatus::Online,
            Default::default(),
        )
        .await
        .unwrap();
    store.reset_breaker(tenant, "user_42").await.unwrap();
    let profile = countersign_domain::model::validate_profile(
        countersign_domain::model::ModelProfileInput {
            id: "all".into(),
            endpoint: "local".into(),
            ..Default::default()
        },
        &["local"],
    )
    .unwrap();
    store.put_model_profile(tenant, &profile).await.unwrap();
    let p = submitted(&**store, tenant).await;
    store
        .begin_reviews(&[countersign_store::ReviewKey {
            tenant: String::from(tenant),
            id: String::from(&p.id),
        }])
        .await
        .unwrap();
    let stamp = countersign_domain::review::ReviewStamp {
        reviewer: "w".into(),
        decided_at: countersign_domain::now_ms(),
        latency_ms: 1,
    };
    let verdict = countersign_domain::gates::Verdict {
        gates: Vec::new(),
        sop: None,
        rollback_path: None,
    };
    let decision = countersign_domain::review::decide(&verdict, &(&p.spec).into(), stamp);
    store
        .record_decision(tenant, &p.id, decision.clone())
        .await
        .unwrap();
    store
        .record_decision(tenant, &p.id, decision)
        .await
        .unwrap();
    store.append_audit(100).await.unwrap();
    let (size, head) = store.audit_head(tenant).await.unwrap();
    let key = countersign_domain::audit::SigningKey::from_seed([3; 32]);
    store
        .save_checkpoint(&key.sign(tenant, size, &head, 1))
        .await
        .unwrap();
    escalate_with_a_vote(store, tenant).await;
    p.id
}

/// A route of two, and a proposal it escalated with one vote recorded.
async fn escalate_with_a_vote(store: &DynStore, tenant: &str) {
    use countersign_domain::escalation::{
        Ballot, Caller, Escalation, RouteInput, Verdict, validate_route,
    };
    let route = validate_route(RouteInput {
        id: "two".into(),
        approvals_required: 2,
        ..Default::default()
    })
    .unwrap();
    store.put_route(tenant, &route).await.unwrap();
    let escalated = store
        .insert_proposal(NewProposal {
            submitted_by_person: Some("sam@example.com".into()),
            ..new_proposal(tenant, spec())
        })
        .await
        .unwrap()
        .proposal()
        .clone();
    let key = countersign_store::ReviewKey {
        tenant: tenant.into(),
        id: escalated.id.clone(),
    };
    store
        .begin_reviews(std::slice::from_ref(&key))
        .await
        .unwrap();
    let verdict = countersign_domain::gates::Verdict {
        gates: Vec::new(),
        sop: None,
        rollback_path: None,
    };
    let stamp = countersign_domain::review::ReviewStamp {
        reviewer: "w".into(),
        decided_at: countersign_domain::now_ms(),
        latency_ms: 1,
    };
    let opened = Escalation::open(&route, &verdict, &stamp);
    store.open_escalations(vec![(key, opened)]).await.unwrap();
    let caller = Caller {
        tenant,
        key_id: "k",
        person: Some("ann@example.com"),
        role: Role::Oncall,
        agent: false,
    };
    let ballot = Ballot {
        verdict: Some(Verdict::Approve),
        comment: "",
    };
    store
        .cast_vote(caller, &escalated.id, ballot, countersign_domain::now_ms())
        .await
        .unwrap()
        .unwrap();
}

async fn count(conn: &mut PgConnection, table: &str, column: &str, tenant: Option<&str>) -> i64 {
    let sql = match tenant {
        Some(_) => format!("SELECT COUNT(*) FROM {table} WHERE {column} = $1"),
        None => format!("SELECT COUNT(*) FROM {table}"),
    };
    let mut query = sqlx::query_scalar(&sql);
    if let Some(tenant) = tenant {
        query = query.bind(tenant);
    }
    query.fetch_one(&mut *conn).await.unwrap()
}

async fn set_tenant(conn: &mut PgConnection, tenant: &str) {
    sqlx::query("SELECT set_config('app.tenant_id', $1, true)")
        .bind(tenant)
        .execute(&mut *conn)
        .await
        .unwrap();
}

/// Insufficient privilege: a row-level-security violation or a missing grant.
fn is_refused(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Database(e) if e.code().as_deref() == Some("42501"))
}

#[tokio::test]
async fn with_tenant_a_set_no_row_of_tenant_b_is_read_or_written() {
    let db = TestDatabase::migrated().await;
    let store = db.store().await;
    populate(&store, "a").await;
    let b_proposal = populate(&store, "b").await;
    let mut conn = db.app_connection().await;

    let mut tx = conn.begin().await.unwrap();
    set_tenant(&mut tx, "a").await;
    for (table, column) in TENANT_TABLES {
        assert!(
            count(&mut tx, table, column, Some("a")).await > 0,
            "{table}: a's own rows"
        );
        assert_eq!(
            count(&mut tx, table, column, Some("b")).await,
            0,
            "{table}: b's rows"
        );
        assert_eq!(
            count(&mut tx, table, column, None).await,
            count(&mut tx, table, column, Some("a")).await,
            "{table}: an unfiltered read sees a's rows only"
        );
        // (Append-only history: the service role may not delete at all; see below.)
        if !APPEND_ONLY.contains(table) {
            let deleted = sqlx::query(&format!("DELETE FROM {table} WHERE {column} = 'b'"))
                .execute(&mut *tx)
                .await
                .unwrap();
            assert_eq!(deleted.rows_affected(), 0, "{table}: b's rows deleted");
        }
    }
    tx.rollback().await.unwrap();

    let mut tx = conn.begin().await.unwrap();
    set_tenant(&mut tx, "a").await;
    let updated = sqlx::query("UPDATE proposals SET cancel_reason = 'mine' WHERE id = $1")
        .bind(&b_proposal)
        .execute(&mut *tx)
        .await
        .unwrap();
    assert_eq!(updated.rows_affected(), 0, "b's proposal is not updated");
    let written = sqlx::query(
        "INSERT INTO targets (tenant, id, status, labels_json, updated_at)
         VALUES ('b', 'planted', 'online', '{}', 0)",
    )
    .execute(&mut *tx)
    .await
    .expect_err("a row of b is not written");
    assert!(is_refused(&written), "{written}");
    tx.rollback().await.unwrap();

    let mut tx = conn.begin().await.unwrap();
    set_tenant(&mut tx, "a").await;
    let moved = sqlx::query("UPDATE targets SET tenant = 'b' WHERE tenant = 'a'")
        .execute(&mut *tx)
        .await
        .expect_err("a's row is not moved to b");
    assert!(is_refused(&moved), "{moved}");
    tx.rollback().await.unwrap();

    // Nothing of b changed.
    let b = store.get_proposal("b", &b_proposal).await.unwrap().unwrap();
    assert_eq!(b.cancel_reason, None);
    assert!(store.get_target("b", "planted").await.unwrap().is_none());
    assert_eq!(store.list_targets("a", None, 10).await.unwrap().len(), 1);
}

#[tokio::test]
async fn with_no_tenant_set_no_row_is_read_or_written() {
    let db = TestDatabase::migrated().await;
    let store = db.store().await;
    populate(&store, "a").await;
    let mut conn = db.app_connection().await;
    for (table, column) in TENANT_TABLES {
        assert_eq!(count(&mut conn, table, column, None).await, 0, "{table}");
    }
    assert_eq!(count(&mut conn, "event_retention", "id", None).await, 0);
    let written = sqlx::query(
        "INSERT INTO targets (tenant, id, status, labels_json, updated_at)
         VALUES ('a', 'planted', 'online', '{}', 0)",
    )
    .execute(&mut conn)
    .await
    .expect_err("no row is written without a tenant");
    assert!(is_refused(&written), "{written}");
    let deleted = sqlx::query("DELETE FROM events")
        .execute(&mut conn)
        .await
        .unwrap();
    assert_eq!(deleted.rows_affected(), 0);

    // A tenant set for one transaction does not outlive it on the connection.
    let mut tx = conn.begin().await.unwrap();
    set_tenant(&mut tx, "a").await;
    assert!(count(&mut tx, "proposals", "tenant", None).await > 0);
    tx.commit().await.unwrap();
    for (table, column) in TENANT_TABLES {
        assert_eq!(
            count(&mut conn, table, column, None).await,
            0,
            "{table} after"
        );
    }
    assert_eq!(
        store.events_after(0, Some("a"), 100).await.unwrap().len(),
        3 + 4,
        "the decided proposal's, and the escalated one's: submitted, reviewing, escalated, a vote"
    );
}

#[tokio::test]
async fn a_superuser_or_the_tables_owner_is_refused_at_connect() {
    let db = TestDatabase::migrated().await;
    let refused = PostgresStore::connect(&db.superuser_url())
        .await
        .expect_err("a superuser is refused");
    assert!(
        matches!(&refused, StoreError::UnsafeRole(why) if why.contains("superuser")),
        "{refused}"
    );
    let refused = PostgresStore::connect(&db.owner_url)
        .await
        .expect_err("the owner is refused");
    assert!(
        matches!(&refused, StoreError::UnsafeRole(why) if why.contains("owns the tables")),
        "{refused}"
    );
    let refused = countersign_store::connect(&db.owner_url)
        .await
        .err()
        .expect("connect() checks too");
    assert!(
        refused
            .to_string()
            .contains("refusing to run as database role")
    );
    // The service role is accepted, and the schema is current.
    db.store().await.migrate().await.unwrap();
}

/// A tenant table whose row-level security is off (or not forced) is refused
/// when the service starts, naming it: each table of the countersignature
/// and the model profiles, and a table a later migration might add with a
/// `tenant` column.
#[tokio::test]
async fn a_tenant_table_without_forced_row_level_security_is_refused_at_start() {
    let db = TestDatabase::migrated().await;
    let store = db.store().await;
    store
        .migrate()
        .await
        .expect("a migrated schema is accepted");
    let mut owner = db.owner_connection().await;
    let refused = |table: &str, why: StoreError| {
        assert!(
            matches!(&why, StoreError::FailedPrecondition(m)
                if m.contains("row-level security is not forced on")
                    && m.split_once(" on ").unwrap().1.starts_with(table)),
            "{table}: {why}"
        );
    };
    for table in ["routes", "escalations", "votes", "model_profiles"] {
        for (off, on) in [
            ("NO FORCE ROW LEVEL SECURITY", "FORCE ROW LEVEL SECURITY"),
            ("DISABLE ROW LEVEL SECURITY", "ENABLE ROW LEVEL SECURITY"),
        ] {
            sqlx::query(&format!("ALTER TABLE {table} {off}"))
                .execute(&mut owner)
                .await
                .unwrap();
            refused(table, store.migrate().await.expect_err(table));
            sqlx::query(&format!("ALTER TABLE {table} {on}"))
                .execute(&mut owner)
                .await
                .unwrap();
        }
    }
    store.migrate().await.expect("protected again");

    sqlx::query("CREATE TABLE added_later (tenant TEXT NOT NULL)")
        .execute(&mut owner)
        .await
        .unwrap();
    refused(
        "added_later",
        store.migrate().await.expect_err("added_later"),
    );
    sqlx::raw_sql(
        "ALTER TABLE added_later ENABLE ROW LEVEL SECURITY;
         ALTER TABLE added_later FORCE ROW LEVEL SECURITY;",
    )
    .execute(&mut owner)
    .await
    .unwrap();
    store.migrate().await.expect("protected");
}

#[tokio::test]
async fn the_service_role_cannot_be_the_owner_that_migrates() {
    let db = TestDatabase::create().await;
    let owner = db
        .owner_url
        .split("://")
        .nth(1)
        .unwrap()
        .split('@')
        .next()
        .unwrap();
    let refused = PostgresStore::migrate_as_owner(&db.owner_url, owner)
        .await
        .expect_err("granting the owner to itself is refused");
    assert!(
        matches!(refused, StoreError::InvalidArgument(_)),
        "{refused}"
    );
}

#[tokio::test]
async fn an_unmigrated_database_is_refused_with_the_way_to_migrate_it() {
    let db = TestDatabase::create().await;
    let store = db.store().await;
    let refused = store
        .migrate()
        .await
        .expect_err("an empty schema is refused");
    assert!(
        matches!(&refused, StoreError::FailedPrecondition(why) if why.contains("countersign migrate")),
        "{refused}"
    );
    PostgresStore::migrate_as_owner(&db.owner_url, &db.service_role())
        .await
        .unwrap();
    PostgresStore::migrate_as_owner(&db.owner_url, &db.service_role())
        .await
        .expect("migrating again changes nothing");
    store.migrate().await.unwrap();
}

#[tokio::test]
async fn history_cannot_be_updated_or_deleted_by_the_service_role_or_the_owner() {
    let db = TestDatabase::migrated().await;
    let store = db.store().await;
    let id = populate(&store, "a").await;
    let mut conn = db.app_connection().await;
    for statement in [
        "UPDATE decisions SET reason = 'rewritten' WHERE proposal_id = $1",
        "DELETE FROM decisions WHERE proposal_id = $1",
        "TRUNCATE decisions",
        "UPDATE audit_log SET record = '{}' WHERE proposal_id = $1",
        "DELETE FROM audit_log WHERE proposal_id = $1",
        "TRUNCATE audit_log",
        "UPDATE audit_checkpoints SET size = 0",
        "DELETE FROM audit_checkpoints",
        "TRUNCATE audit_checkpoints",
        "UPDATE sop_versions SET rollback_path = 'none'",
        "DELETE FROM sop_versions",
        "TRUNCATE sop_versions",
        "UPDATE votes SET verdict = 'reject'",
        "DELETE FROM votes",
        "TRUNCATE votes",
    ] {
        let mut tx = conn.begin().await.unwrap();
        set_tenant(&mut tx, "a").await;
        let mut query = sqlx::query(statement);
        if statement.contains("$1") {
            query = query.bind(&id);
        }
        let refused = query.execute(&mut *tx).await.expect_err(statement);
        assert!(is_refused(&refused), "{statement}: {refused}");
        tx.rollback().await.unwrap();
    }
    // Even the owner, who holds the privileges, is stopped by the trigger.
    let mut owner = db.owner_connection().await;
    for statement in [
        "UPDATE decisions SET reason = 'rewritten'",
        "DELETE FROM decisions",
        "TRUNCATE decisions",
        "UPDATE audit_log SET record = '{}'",
        "DELETE FROM audit_log",
        "TRUNCATE audit_log",
        "UPDATE audit_checkpoints SET size = 0",
        "DELETE FROM audit_checkpoints",
        "TRUNCATE audit_checkpoints",
        "UPDATE sop_versions SET rollback_path = 'none'",
        "DELETE FROM sop_versions",
        "TRUNCATE sop_versions",
        "UPDATE votes SET verdict = 'reject'",
        "DELETE FROM votes",
        "TRUNCATE votes",
    ] {
        let mut tx = owner.begin().await.unwrap();
        sqlx::query("SELECT set_config('app.tenant_id', 'a', true)")
            .execute(&mut *tx)
            .await
            .unwrap();
        let refused = sqlx::query(statement)
            .execute(&mut *tx)
            .await
            .expect_err(statement);
        assert!(
            refused.to_string().contains("append-only"),
            "{statement}: {refused}"
        );
        tx.rollback().await.unwrap();
    }
    let kept = store.get_proposal("a", &id).await.unwrap().unwrap();
    assert_ne!(kept.decision.unwrap().reason, "rewritten");
    assert_eq!(
        store.get_audit("a", &id).await.unwrap().unwrap().sequence,
        1
    );
}

/// Copies of a record's fields changed under the store by the owner (who may
/// switch the triggers off) leave every link of the chain intact; the copies
/// the store reads with the log disagree with the record, and verification
/// names the entry and the column.
#[tokio::test]
async fn a_copy_changed_under_the_store_is_a_mismatch_named_by_its_column() {
    use countersign_domain::audit::{FailureKind, Verifier};

    let db = TestDatabase::migrated().await;
    let store = db.store().await;
    let id = populate(&store, "a").await;
    let verify = || async {
        let mut verifier = Verifier::new();
        for entry in store.audit_range("a", 0, 100).await.unwrap() {
            verifier.push_checked(
                entry.sequence,
                &entry.digest,
                Ok(entry.leaf()),
                entry.check_copies(),
            );
        }
        verifier.finish()
    };
    assert!(verify().await.ok());

    let mut owner = db.owner_connection().await;
    for (tamper, column) in [
        (
            "UPDATE audit_log SET outcome = 'approve' WHERE proposal_id = $1",
            "audit_log.outcome",
        ),
        (
            "UPDATE decisions SET outcome = 'approve' WHERE proposal_id = $1",
            "decisions.outcome",
        ),
        (
            "UPDATE proposals SET state = 'approved' WHERE id = $1",
            "proposals.state",
        ),
    ] {
        let mut tx = owner.begin().await.unwrap();
        for statement in [
            "SELECT set_config('app.tenant_id', 'a', true)",
            "ALTER TABLE audit_log DISABLE TRIGGER audit_log_is_append_only",
            "ALTER TABLE decisions DISABLE TRIGGER decisions_are_append_only",
        ] {
            sqlx::query(statement).execute(&mut *tx).await.unwrap();
        }
        sqlx::query(tamper)
            .bind(&id)
            .execute(&mut *tx)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        let verified = verify().await;
        let failure = verified.failure.expect(column);
        assert_eq!(
            (failure.sequence, failure.kind, failure.column),
            (1, FailureKind::Mismatch, Some(column))
        );
        // Put back, for the next copy.
        let undo = tamper
            .replace("'approve'", "'reject'")
            .replace("'approved'", "'rejected'");
        let mut tx = owner.begin().await.unwrap();
        for statement in [
            "SELECT set_config('app.tenant_id', 'a', true)",
            "ALTER TABLE audit_log DISABLE TRIGGER audit_log_is_append_only",
            "ALTER TABLE decisions DISABLE TRIGGER decisions_are_append_only",
        ] {
            sqlx::query(statement).execute(&mut *tx).await.unwrap();
        }
        sqlx::query(&undo)
            .bind(&id)
            .execute(&mut *tx)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        assert!(verify().await.ok(), "{undo}");
    }
}

/// A PENDING proposal that another transaction changes, and leaves PENDING,
/// while a review batch waits for its row lock is begun all the same: the
/// batch's statement locks the row's new version, which its snapshot does not
/// hold, and the proposal is then begun in a statement of its own (it was
/// reported as ended, and never reviewed).
#[tokio::test]
async fn a_proposal_changed_while_its_review_waits_for_the_row_is_still_begun() {
    let db = TestDatabase::migrated().await;
    let store = db.store().await;
    store.create_tenant("acme").await.unwrap();
    let p = submitted(&*store, "acme").await;

    let mut owner = db.owner_connection().await;
    let mut tx = owner.begin().await.unwrap();
    set_tenant(&mut tx, "acme").await;
    sqlx::query("UPDATE proposals SET updated_at = updated_at + 1 WHERE id = $1")
        .bind(&p.id)
        .execute(&mut *tx)
        .await
        .unwrap();
    let key = countersign_store::ReviewKey {
        tenant: "acme".into(),
        id: p.id.clone(),
    };
    let reviewer = {
        let store = store.clone();
        tokio::spawn(async move { store.begin_reviews(&[key]).await })
    };
    // The batch is waiting for the row.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(!reviewer.is_finished());
    tx.commit().await.unwrap();

    let began = reviewer.await.unwrap().unwrap();
    assert!(
        matches!(
            &began[..],
            [countersign_store::BeginReview::Reviewing { .. }]
        ),
        "{began:?}"
    );
    let now = store.get_proposal("acme", &p.id).await.unwrap().unwrap();
    assert_eq!(now.state, countersign_domain::ProposalState::Reviewing);
}
