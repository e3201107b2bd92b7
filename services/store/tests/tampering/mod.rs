//! Rows changed under the store, and put back, on either backend: what the
//! tests of what tenant `a`'s decision log covers share. Each change is a
//! statement, its undo, and the failure verification must report while it
//! holds (the log verifies again once it is undone).

use countersign_domain::{
    GateResult,
    audit::{FailureKind, Verification, Verifier},
    gates::{GATES, Verdict},
};
use countersign_store::{DynStore, NewProposal, ReviewKey};
use countersign_test_support::{fixtures, postgres::TestDatabase, sqlite::SqliteDatabase};
use sqlx::{Connection, PgConnection};

/// Where verification stops: the entry, how, and the copy's column.
pub type Failed = (u64, FailureKind, Option<&'static str>);

/// A change under the store, its undo, and what verification reports.
pub type Tampering = (&'static str, &'static str, Failed);

/// A proposal of tenant `a` on `target` (the fixtures' spec), submitted by
/// `person`'s key, moved to REVIEWING.
pub async fn reviewing(store: &DynStore, target: &str, person: Option<&str>) -> ReviewKey {
    let p = store
        .insert_proposal(NewProposal {
            id: NewProposal::new_id(),
            tenant: "a".into(),
            spec: fixtures::spec_on(target),
            submitted_by: "tester".into(),
            submitted_by_person: person.map(str::to_owned),
            trace_parent: None,
            submitted_key: None,
        })
        .await
        .unwrap()
        .proposal()
        .clone();
    let key = ReviewKey {
        tenant: "a".into(),
        id: p.id.clone(),
    };
    store
        .begin_reviews(std::slice::from_ref(&key))
        .await
        .unwrap();
    key
}

/// The five gates, every one passed.
pub fn five_passed() -> Verdict {
    Verdict {
        gates: GATES
            .iter()
            .map(|g| GateResult {
                gate: (*g).into(),
                passed: true,
                detail: "ok".into(),
            })
            .collect(),
        sop: None,
        rollback_path: None,
    }
}

/// Verifies tenant `a`'s log as `VerifyLog` does: the chain, then each
/// entry's copies.
pub async fn verify(store: &DynStore) -> Verification {
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
}

pub fn failure(v: &Verification) -> Failed {
    let f = v.failure.as_ref().expect("a failure");
    (f.sequence, f.kind, f.column)
}

/// Applies each of `changes` to the SQLite file (its append-only triggers
/// dropped) and undoes it, verifying after each; the connection, for more.
pub async fn on_sqlite(
    db: &SqliteDatabase,
    store: &DynStore,
    changes: &[Tampering],
) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(db.path()).unwrap();
    conn.execute_batch(
        "DROP TRIGGER decisions_are_append_only_update;
         DROP TRIGGER audit_log_is_append_only_update;",
    )
    .unwrap();
    for (tamper, undo, expected) in changes {
        assert_eq!(conn.execute(tamper, []).unwrap(), 1, "{tamper}");
        assert_eq!(failure(&verify(store).await), *expected, "{tamper}");
        conn.execute(undo, []).unwrap();
        assert!(verify(store).await.ok(), "{undo}");
    }
    conn
}

/// [`on_sqlite`] on PostgreSQL, as the schema's owner in tenant `a`'s scope
/// (the append-only triggers disabled for each statement's transaction);
/// the owner's connection, for more.
pub async fn on_postgres(
    db: &TestDatabase,
    store: &DynStore,
    changes: &[Tampering],
) -> PgConnection {
    let mut owner = db.owner_connection().await;
    for (tamper, undo, expected) in changes {
        for statement in [tamper, undo] {
            let mut tx = owner.begin().await.unwrap();
            for setup in [
                "SELECT set_config('app.tenant_id', 'a', true)",
                "ALTER TABLE audit_log DISABLE TRIGGER audit_log_is_append_only",
                "ALTER TABLE decisions DISABLE TRIGGER decisions_are_append_only",
            ] {
                sqlx::query(setup).execute(&mut *tx).await.unwrap();
            }
            let changed = sqlx::query(statement).execute(&mut *tx).await.unwrap();
            assert_eq!(changed.rows_affected(), 1, "{statement}");
            tx.commit().await.unwrap();
            let verified = verify(store).await;
            if statement == tamper {
                assert_eq!(failure(&verified), *expected, "{tamper}");
            } else {
                assert!(verified.ok(), "{undo}");
            }
        }
    }
    owner
}
