//! Every validation rule answers INVALID_ARGUMENT naming its field, and stores nothing.

use countersign_domain::Role;
use countersign_proto::{
    convert::json_to_struct,
    v1::{self, ProposalSpec, SubmitRequest},
};
use tonic::Code;

use crate::helpers::{TestApp, assert_code, valid_spec};

fn with(change: impl FnOnce(&mut ProposalSpec)) -> ProposalSpec {
    let mut spec = valid_spec();
    change(&mut spec);
    spec
}

fn nested(depth: usize) -> serde_json::Value {
    let mut value = serde_json::json!(1);
    for _ in 0..depth {
        value = serde_json::json!({ "n": value });
    }
    value
}

fn cases() -> Vec<(&'static str, &'static str, ProposalSpec)> {
    vec![
        ("empty action", "spec.action", with(|s| s.action.clear())),
        (
            "upper-case action",
            "spec.action",
            with(|s| s.action = "Restart".into()),
        ),
        (
            "action with a space",
            "spec.action",
            with(|s| s.action = "rm -rf".into()),
        ),
        (
            "action too long",
            "spec.action",
            with(|s| s.action = "a".repeat(129)),
        ),
        ("class unset", "spec.class", with(|s| s.class = 0)),
        ("class unknown", "spec.class", with(|s| s.class = 42)),
        (
            "read class",
            "spec.class",
            with(|s| s.class = v1::OperationClass::Read as i32),
        ),
        ("empty target", "spec.target", with(|s| s.target.clear())),
        (
            "target too long",
            "spec.target",
            with(|s| s.target = "t".repeat(257)),
        ),
        (
            "empty reason",
            "spec.reason",
            with(|s| s.reason = "   ".into()),
        ),
        (
            "reason too long",
            "spec.reason",
            with(|s| s.reason = "r".repeat(4097)),
        ),
        (
            "context summary too long",
            "spec.context_summary",
            with(|s| s.context_summary = "c".repeat(16 * 1024 + 1)),
        ),
        (
            "blast radius unset",
            "spec.blast_radius",
            with(|s| s.blast_radius = 0),
        ),
        (
            "blast radius unknown",
            "spec.blast_radius",
            with(|s| s.blast_radius = 9),
        ),
        (
            "parameters too deep",
            "spec.parameters",
            with(|s| s.parameters = Some(json_to_struct(nested(17).as_object().unwrap()))),
        ),
        (
            "parameters too large",
            "spec.parameters",
            with(|s| {
                s.parameters = Some(json_to_struct(
                    serde_json::json!({"blob": "x".repeat(64 * 1024)})
                        .as_object()
                        .unwrap(),
                ))
            }),
        ),
        (
            "target with a newline",
            "spec.target",
            with(|s| s.target = "node-01\nINFO forged".into()),
        ),
        (
            "operator with an ANSI escape",
            "spec.operator",
            with(|s| s.operator = "\u{1b}[31muser_42".into()),
        ),
        (
            "incident id with a carriage return",
            "spec.incident_id",
            with(|s| s.incident_id = "INC-7\r".into()),
        ),
        (
            "idempotency key with a NUL",
            "spec.idempotency_key",
            with(|s| s.idempotency_key = "k\u{0}1".into()),
        ),
        (
            "label key with a newline",
            "spec.labels",
            with(|s| {
                s.labels.insert("env\nx".into(), "production".into());
            }),
        ),
        (
            "label value with an ANSI escape",
            "spec.labels[env]",
            with(|s| {
                s.labels.insert("env".into(), "\u{1b}[2Jproduction".into());
            }),
        ),
        (
            "65 labels",
            "spec.labels",
            with(|s| s.labels = (0..65).map(|i| (format!("k{i}"), "v".into())).collect()),
        ),
    ]
}

#[tokio::test]
async fn every_rule_names_its_field_and_stores_nothing() {
    let app = TestApp::spawn().await;
    let key = app.key("acme", Role::Coordinator).await;
    for (case, field, mut spec) in cases() {
        if field != "spec.idempotency_key" {
            spec.idempotency_key = format!("case-{case}");
        }
        let status = assert_code(app.submit(&key, spec).await, Code::InvalidArgument);
        assert!(
            status.message().starts_with(&format!("{field}:")),
            "{case}: {status:?}"
        );
        // Nothing stored: the same key with a valid spec is a fresh proposal.
        let mut valid = valid_spec();
        valid.idempotency_key = format!("case-{case}");
        assert!(
            !app.submit(&key, valid).await.unwrap().deduplicated,
            "{case}"
        );
    }
}

#[tokio::test]
async fn the_limits_themselves_are_accepted() {
    let app = TestApp::spawn().await;
    let key = app.key("acme", Role::Coordinator).await;
    let at_limits = with(|s| {
        s.action = "a".repeat(128);
        s.target = "t".repeat(256);
        s.reason = "r".repeat(4096);
        s.context_summary = "c".repeat(16 * 1024);
        s.labels = (0..64).map(|i| (format!("k{i}"), "v".into())).collect();
        s.parameters = Some(json_to_struct(nested(16).as_object().unwrap()));
    });
    app.submit(&key, at_limits)
        .await
        .expect("at the limits is valid");
    let destructive = with(|s| s.class = v1::OperationClass::Destructive as i32);
    app.submit(&key, destructive)
        .await
        .expect("destructive is reviewed");
}

#[tokio::test]
async fn a_submission_without_a_spec_is_refused() {
    let app = TestApp::spawn().await;
    let key = app.key("acme", Role::Coordinator).await;
    let status = assert_code(
        app.client(&key)
            .await
            .submit(SubmitRequest {
                spec: None,
                ..Default::default()
            })
            .await,
        Code::InvalidArgument,
    );
    assert_eq!(status.message(), "spec: must be set");
}

#[tokio::test]
async fn read_operations_are_not_reviewed() {
    let app = TestApp::spawn().await;
    let key = app.key("acme", Role::Coordinator).await;
    let status = assert_code(
        app.submit(&key, with(|s| s.class = v1::OperationClass::Read as i32))
            .await,
        Code::InvalidArgument,
    );
    assert!(
        status
            .message()
            .contains("read operations are not reviewed"),
        "{status:?}"
    );
}

#[tokio::test]
async fn an_empty_id_is_an_invalid_argument() {
    let app = TestApp::spawn().await;
    let key = app.key("acme", Role::Coordinator).await;
    let status = assert_code(app.get(&key, "").await, Code::InvalidArgument);
    assert!(status.message().starts_with("id:"), "{status:?}");
}

#[tokio::test]
async fn timestamps_out_of_range_in_a_filter_name_their_field() {
    use countersign_proto::v1::{ListDecisionsRequest, audit_service_client::AuditServiceClient};
    use prost_types::Timestamp;

    let app = TestApp::spawn().await;
    let key = app.key("acme", Role::Auditor).await;
    let mut audit = AuditServiceClient::with_interceptor(
        app.channel().await,
        countersign::client::BearerAuth::new(&key).unwrap(),
    );
    let at = |seconds, nanos| Some(Timestamp { seconds, nanos });
    let cases = [
        ("decided_from", at(1 << 62, 0), None),
        ("decided_from", at(i64::MIN, 0), None),
        ("decided_from", at(0, -1), None),
        ("decided_until", None, at(253_402_300_800, 0)),
        ("decided_until", None, at(1_764_000_000, 1_000_000_000)),
        ("decided_until", at(0, 0), at(-(1 << 62), 0)),
    ];
    for (field, decided_from, decided_until) in cases {
        let status = assert_code(
            audit
                .list_decisions(ListDecisionsRequest {
                    decided_from,
                    decided_until,
                    ..Default::default()
                })
                .await,
            Code::InvalidArgument,
        );
        assert!(
            status.message().starts_with(&format!("{field}:")),
            "{field}: {status:?}"
        );
    }
    // The whole range of the type is accepted.
    audit
        .list_decisions(ListDecisionsRequest {
            decided_from: at(-62_135_596_800, 0),
            decided_until: at(253_402_300_799, 999_999_999),
            ..Default::default()
        })
        .await
        .expect("the extremes of google.protobuf.Timestamp are valid");
}
