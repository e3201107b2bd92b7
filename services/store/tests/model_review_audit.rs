//! The model's review is part of what the decision log's chain covers, on
//! both backends: changed under the store, in the decision row's copy (a
//! mismatch named by its column) or in the chained record (altered), it
//! fails verification; put back, the log verifies again.

use std::sync::Arc;

use countersign_domain::{
    GateResult,
    audit::FailureKind,
    gates::MODEL,
    model::{ModelReview, TokenUsage},
    now_ms,
    review::{self, ReviewStamp},
};
use countersign_store::{DynStore, RecordOutcome};
use countersign_test_support::{postgres::TestDatabase, sqlite::SqliteDatabase};

mod tampering;
use tampering::{Tampering, verify};

/// One proposal the gates pass and the model rejects, its decision chained.
async fn decided_with_a_model_review(store: &DynStore) {
    store.create_tenant("a").await.unwrap();
    let key = tampering::reviewing(store, "node-01", None).await;
    let spec = store
        .get_proposal("a", &key.id)
        .await
        .unwrap()
        .unwrap()
        .spec;
    let five = tampering::five_passed();
    let model_gate = GateResult {
        gate: MODEL.into(),
        passed: false,
        detail: "reject: the SOP covers restarts, not this".into(),
    };
    let stamp = ReviewStamp {
        reviewer: "w".into(),
        decided_at: now_ms(),
        latency_ms: 1,
    };
    let mut decision = review::decide(&five.with_model(model_gate), &(&spec).into(), stamp);
    decision.model = Some(ModelReview {
        profile_id: "db".into(),
        endpoint: "local".into(),
        model: "qwen2.5-7b-instruct".into(),
        verdict: "reject".into(),
        latency_ms: 840,
        usage: TokenUsage {
            prompt: 812,
            completion: 9,
            cached_prompt: 768,
        },
    });
    let recorded = store.record_decisions(vec![(key, decision)]).await.unwrap();
    assert!(matches!(recorded[..], [RecordOutcome::Recorded]));
    assert_eq!(store.append_audit(100).await.unwrap(), 1);
}

/// The review changed under the store, and put back: its copy in the
/// decision row (a mismatch named by its column), and the chained record
/// (altered): the model, the verdict, the cached prompt tokens.
const TAMPERING: [Tampering; 4] = [
    (
        "UPDATE decisions SET model_json = replace(model_json, 'qwen2.5-7b', 'gpt-9')",
        "UPDATE decisions SET model_json = replace(model_json, 'gpt-9', 'qwen2.5-7b')",
        (1, FailureKind::Mismatch, Some("decisions.model_json")),
    ),
    (
        "UPDATE audit_log SET record = replace(record, 'qwen2.5-7b', 'gpt-9')",
        "UPDATE audit_log SET record = replace(record, 'gpt-9', 'qwen2.5-7b')",
        (1, FailureKind::Altered, None),
    ),
    (
        r#"UPDATE audit_log SET record = replace(record, '"verdict":"reject"', '"verdict":"unsure"')"#,
        r#"UPDATE audit_log SET record = replace(record, '"verdict":"unsure"', '"verdict":"reject"')"#,
        (1, FailureKind::Altered, None),
    ),
    (
        r#"UPDATE audit_log SET record = replace(record, '"cached_prompt":768', '"cached_prompt":0')"#,
        r#"UPDATE audit_log SET record = replace(record, '"cached_prompt":0', '"cached_prompt":768')"#,
        (1, FailureKind::Altered, None),
    ),
];

/// The chained record holds the review.
async fn the_record_holds_the_review(store: &DynStore) {
    let entries = store.audit_range("a", 0, 100).await.unwrap();
    assert!(
        entries[0]
            .record
            .contains(r#""model":{"profile_id":"db","endpoint":"local","model":"qwen2.5-7b-instruct","verdict":"reject","latency_ms":840"#),
        "{}",
        entries[0].record
    );
}

#[tokio::test]
async fn sqlite_a_changed_model_review_fails_verification() {
    let db = SqliteDatabase::new();
    let store: DynStore = Arc::new(db.store().await);
    decided_with_a_model_review(&store).await;
    the_record_holds_the_review(&store).await;
    assert!(verify(&store).await.ok());
    tampering::on_sqlite(&db, &store, &TAMPERING).await;
}

#[tokio::test]
async fn postgres_a_changed_model_review_fails_verification() {
    let db = TestDatabase::migrated().await;
    let store = db.store().await;
    decided_with_a_model_review(&store).await;
    the_record_holds_the_review(&store).await;
    assert!(verify(&store).await.ok());
    tampering::on_postgres(&db, &store, &TAMPERING).await;
}
