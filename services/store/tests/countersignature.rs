//! Migration 0017 on both backends (persons on keys and proposals, routes,
//! escalations, votes: existing rows survive; one vote per person; votes are
//! append-only and logged; an escalation closes when its proposal leaves
//! ESCALATED), and what the stored rows of a decided escalation answer to:
//! a vote changed under the store fails the log's verification, and an
//! ESCALATED proposal without its escalation row takes no vote.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use countersign_domain::{
    ProposalState, Role,
    audit::FailureKind,
    escalation::{Ballot, Caller, Escalation, ResolveError, RouteInput, Verdict, validate_route},
    now_ms,
    review::ReviewStamp,
};
use countersign_store::{DynStore, sqlite::Migrations};
use countersign_test_support::{fixtures, postgres::TestDatabase, sqlite::SqliteDatabase};
use rusqlite::params;
use sqlx::{Connection, migrate::Migrator};

mod tampering;
use tampering::{Tampering, verify};

fn migrations(backend: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../../migrations/{backend}"))
}

const INSERT_KEY: &str =
    "INSERT INTO api_keys (id, tenant, name, role, agent, key_hash, created_at)
     VALUES ('k1', 'a', 'old', 'admin', false, '\\x00', 0)";

const INSERT_PROPOSAL: &str = "INSERT INTO proposals (id, tenant, action, class, target,
     blast_radius, operator, spec_json, spec_digest, state, submitted_by, created_at, updated_at)
     VALUES ($1, 'a', 'db_failover', 'destructive', 'db-01', 'cluster', 'olga', '{}', 'd',
             'pending', 'k', 1, 1)";

const MOVE: &str = "UPDATE proposals SET state = $1, updated_at = $2 WHERE id = $3";

const DECIDE: &str = "INSERT INTO decisions (proposal_id, tenant, outcome, reason,
     agent_message, gates_json, missing_gates_json, reviewer, decided_at, summary,
     review_latency_ms) VALUES ($1, 'a', 'reject', 'r', 'm', '[]', '[]', 'w', 3, 's', 0)";

const OPEN: &str = "INSERT INTO escalations (proposal_id, tenant, route_id, approvals_required,
     approver_roles_json, opened_at, expires_at, gates_json, reviewer, review_latency_ms)
     VALUES ($1, 'a', 'r', 2, '[\"oncall\"]', 10, 100, '[]', 'w', 1)";

const VOTE: &str = "INSERT INTO votes (tenant, proposal_id, person, person_key, key_id, verdict,
     comment, at) VALUES ('a', $1, $2, $3, 'k1', 'approve', '', 20)";

const AFTER: &str = "SELECT
     (SELECT person FROM api_keys WHERE id = 'k1'),
     (SELECT submitted_by_person FROM proposals WHERE id = 'p-decided'),
     (SELECT route_id FROM decisions WHERE proposal_id = 'p-decided'),
     (SELECT votes_json FROM decisions WHERE proposal_id = 'p-decided')";

const EVENTS: &str = "SELECT kind, state FROM events WHERE proposal_id = $1 ORDER BY cursor";

const CLOSED: &str = "SELECT closed_at FROM escalations WHERE proposal_id = $1";

type Nulls = (
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
);

fn kinds(events: &[(String, String)]) -> Vec<(&str, &str)> {
    events
        .iter()
        .map(|(k, s)| (k.as_str(), s.as_str()))
        .collect()
}

#[test]
fn an_sqlite_database_gains_persons_routes_escalations_and_votes() {
    let (_db, mut conn) = countersign_test_support::sqlite::migrated_before("0017");
    conn.execute("INSERT INTO tenants (name, created_at) VALUES ('a', 0)", [])
        .unwrap();
    conn.execute(&INSERT_KEY.replace("'\\x00'", "X'00'"), [])
        .unwrap();
    for id in ["p-decided", "p-open"] {
        conn.execute(INSERT_PROPOSAL, [id]).unwrap();
    }
    for (state, at) in [("reviewing", 2), ("rejected", 3)] {
        conn.execute(MOVE, params![state, at, "p-decided"]).unwrap();
    }
    conn.execute(DECIDE, ["p-decided"]).unwrap();
    for (state, at) in [("reviewing", 4), ("escalated", 5)] {
        conn.execute(MOVE, params![state, at, "p-open"]).unwrap();
    }

    Migrations::from_dir(&migrations("sqlite"))
        .unwrap()
        .run(&mut conn)
        .unwrap();

    let nulls: Nulls = conn
        .query_row(AFTER, [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })
        .unwrap();
    assert_eq!(
        nulls,
        (None, None, None, None),
        "rows made before keep no person or votes"
    );

    conn.execute(OPEN, ["p-open"]).unwrap();
    conn.execute(VOTE, params!["p-open", "Ann ", "ann"])
        .unwrap();
    for (person, key) in [("ANN", "ann"), ("", "")] {
        let refused = conn.execute(VOTE, params!["p-open", person, key]);
        assert!(refused.is_err(), "{person:?}: {refused:?}");
    }
    let no_escalation = conn.execute(VOTE, params!["p-decided", "bob", "bob"]);
    assert!(no_escalation.is_err(), "a vote needs its escalation");
    for statement in ["UPDATE votes SET verdict = 'reject'", "DELETE FROM votes"] {
        let refused = conn.execute(statement, []).unwrap_err();
        assert!(refused.to_string().contains("append-only"), "{refused}");
    }
    let closed: Option<i64> = conn.query_row(CLOSED, ["p-open"], |r| r.get(0)).unwrap();
    assert_eq!(closed, None);
    conn.execute(MOVE, params!["approved", 30, "p-open"])
        .unwrap();
    let closed: Option<i64> = conn.query_row(CLOSED, ["p-open"], |r| r.get(0)).unwrap();
    assert_eq!(closed, Some(30), "closed when the proposal left ESCALATED");

    let logged: Vec<(String, String)> = conn
        .prepare(EVENTS)
        .unwrap()
        .query_map(["p-open"], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    assert_eq!(
        kinds(&logged),
        [
            ("SUBMITTED", "pending"),
            ("REVIEW_STARTED", "reviewing"),
            ("ESCALATED", "escalated"),
            ("VOTE", "escalated"),
            ("APPROVED", "approved"),
        ]
    );
}

#[tokio::test]
async fn a_postgres_database_gains_persons_routes_escalations_and_votes() {
    let (_db, mut conn) = countersign_test_support::postgres::migrated_before("0017").await;
    // The owner writes like the service does: in the tenant's scope.
    let scope = |tenant: &str| format!("SELECT set_config('app.tenant_id', '{tenant}', false)");
    sqlx::query(&scope("a")).execute(&mut conn).await.unwrap();
    for statement in [
        "INSERT INTO tenants (name, created_at) VALUES ('a', 0)",
        INSERT_KEY,
    ] {
        sqlx::query(statement).execute(&mut conn).await.unwrap();
    }
    for id in ["p-decided", "p-open"] {
        sqlx::query(INSERT_PROPOSAL)
            .bind(id)
            .execute(&mut conn)
            .await
            .unwrap();
    }
    for (id, state, at) in [
        ("p-decided", "reviewing", 2),
        ("p-decided", "rejected", 3),
        ("p-open", "reviewing", 4),
        ("p-open", "escalated", 5),
    ] {
        sqlx::query(MOVE)
            .bind(state)
            .bind(at)
            .bind(id)
            .execute(&mut conn)
            .await
            .unwrap();
    }
    sqlx::query(DECIDE)
        .bind("p-decided")
        .execute(&mut conn)
        .await
        .unwrap();
    sqlx::query(&scope("")).execute(&mut conn).await.unwrap();

    Migrator::new(migrations("postgres"))
        .await
        .unwrap()
        .run(&mut conn)
        .await
        .unwrap();

    sqlx::query(&scope("a")).execute(&mut conn).await.unwrap();
    let nulls: Nulls = sqlx::query_as(AFTER).fetch_one(&mut conn).await.unwrap();
    assert_eq!(
        nulls,
        (None, None, None, None),
        "rows made before keep no person or votes"
    );
    sqlx::query(OPEN)
        .bind("p-open")
        .execute(&mut conn)
        .await
        .unwrap();
    let vote = |id: &'static str, person: &'static str, key: &'static str| {
        sqlx::query(VOTE).bind(id).bind(person).bind(key)
    };
    vote("p-open", "Ann ", "ann")
        .execute(&mut conn)
        .await
        .unwrap();
    for (id, person, key) in [
        ("p-open", "ANN", "ann"),
        ("p-open", "", ""),
        ("p-decided", "bob", "bob"),
    ] {
        let refused = vote(id, person, key).execute(&mut conn).await;
        assert!(refused.is_err(), "{id} {person:?}: {refused:?}");
    }
    for statement in [
        "UPDATE votes SET verdict = 'reject'",
        "DELETE FROM votes",
        "TRUNCATE votes",
    ] {
        let refused = sqlx::query(statement).execute(&mut conn).await.unwrap_err();
        assert!(refused.to_string().contains("append-only"), "{refused}");
    }
    let closed: Option<i64> = sqlx::query_scalar(CLOSED)
        .bind("p-open")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(closed, None);
    sqlx::query(MOVE)
        .bind("approved")
        .bind(30)
        .bind("p-open")
        .execute(&mut conn)
        .await
        .unwrap();
    let closed: Option<i64> = sqlx::query_scalar(CLOSED)
        .bind("p-open")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(closed, Some(30), "closed when the proposal left ESCALATED");
    let logged: Vec<(String, String)> = sqlx::query_as(EVENTS)
        .bind("p-open")
        .fetch_all(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        kinds(&logged),
        [
            ("SUBMITTED", "pending"),
            ("REVIEW_STARTED", "reviewing"),
            ("ESCALATED", "escalated"),
            ("VOTE", "escalated"),
            ("APPROVED", "approved"),
        ]
    );
}

/// A seeded tenant `a` with a proposal approved by two people (ann's vote
/// comments "looks right"), its decision in the audit log; and another
/// proposal moved to REVIEWING, whose id is returned for the caller to make
/// inconsistent.
async fn decided_by_two(store: &DynStore) -> String {
    fixtures::seed_reference(store.as_ref(), "a").await;
    let route = validate_route(RouteInput {
        id: "two".into(),
        approvals_required: 2,
        ..Default::default()
    })
    .unwrap();
    let mut ids = Vec::new();
    for target in ["node-01", "node-02"] {
        ids.push(tampering::reviewing(store, target, Some("sam@example.com")).await);
    }
    let five = tampering::five_passed();
    let stamp = ReviewStamp {
        reviewer: "w".into(),
        decided_at: now_ms(),
        latency_ms: 1,
    };
    let opened = Escalation::open(&route, &five, &stamp);
    store
        .open_escalations(vec![(ids[0].clone(), opened)])
        .await
        .unwrap();
    for (person, comment) in [
        ("ann@example.com", "looks right"),
        ("bob@example.com", "ok"),
    ] {
        let caller = Caller {
            tenant: "a",
            key_id: person,
            person: Some(person),
            role: Role::Oncall,
            agent: false,
        };
        let ballot = Ballot {
            verdict: Some(Verdict::Approve),
            comment,
        };
        store
            .cast_vote(caller, &ids[0].id, ballot, now_ms())
            .await
            .unwrap()
            .unwrap();
    }
    let p = store.get_proposal("a", &ids[0].id).await.unwrap().unwrap();
    assert_eq!(p.state, ProposalState::Approved);
    assert_eq!(store.append_audit(100).await.unwrap(), 1);
    ids[1].id.clone()
}

/// A vote changed under the store, and put back: in the decision row's copy
/// (a mismatch named by its column), in the chained record (altered).
const TAMPERING: [Tampering; 2] = [
    (
        "UPDATE decisions SET votes_json = replace(votes_json, 'looks right', 'looks wrong')",
        "UPDATE decisions SET votes_json = replace(votes_json, 'looks wrong', 'looks right')",
        (1, FailureKind::Mismatch, Some("decisions.votes_json")),
    ),
    (
        "UPDATE audit_log SET record = replace(record, 'ann@example.com', 'ann@example.org')",
        "UPDATE audit_log SET record = replace(record, 'ann@example.org', 'ann@example.com')",
        (1, FailureKind::Altered, None),
    ),
];

/// An ESCALATED proposal without its escalation row takes no vote (the
/// store never writes one without the other): nothing is written.
async fn an_inconsistent_escalation_takes_no_vote(store: &DynStore, id: &str) {
    let caller = Caller {
        tenant: "a",
        key_id: "k",
        person: Some("carol@example.com"),
        role: Role::Oncall,
        agent: false,
    };
    let ballot = Ballot {
        verdict: Some(Verdict::Approve),
        comment: "",
    };
    let refused = store.cast_vote(caller, id, ballot, now_ms()).await.unwrap();
    assert_eq!(refused, Err(ResolveError::Inconsistent(id.to_owned())));
    let p = store.get_proposal("a", id).await.unwrap().unwrap();
    assert_eq!((p.state, p.decision), (ProposalState::Escalated, None));
    assert!(store.get_escalation("a", id).await.unwrap().is_none());
}

#[tokio::test]
async fn sqlite_a_changed_vote_fails_verification() {
    let db = SqliteDatabase::new();
    let store: DynStore = Arc::new(db.store().await);
    let reviewing = decided_by_two(&store).await;
    assert!(verify(&store).await.ok());
    let conn = tampering::on_sqlite(&db, &store, &TAMPERING).await;
    conn.execute(
        "UPDATE proposals SET state = 'escalated' WHERE id = ?",
        [&reviewing],
    )
    .unwrap();
    an_inconsistent_escalation_takes_no_vote(&store, &reviewing).await;
}

#[tokio::test]
async fn postgres_a_changed_vote_fails_verification() {
    let db = TestDatabase::migrated().await;
    let store = db.store().await;
    let reviewing = decided_by_two(&store).await;
    assert!(verify(&store).await.ok());
    let mut owner = tampering::on_postgres(&db, &store, &TAMPERING).await;
    let mut tx = owner.begin().await.unwrap();
    sqlx::query("SELECT set_config('app.tenant_id', 'a', true)")
        .execute(&mut *tx)
        .await
        .unwrap();
    sqlx::query("UPDATE proposals SET state = 'escalated' WHERE id = $1")
        .bind(&reviewing)
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    an_inconsistent_escalation_takes_no_vote(&store, &reviewing).await;
}
