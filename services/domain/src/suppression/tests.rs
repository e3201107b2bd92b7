use super::*;
use crate::{BlastRadius, GateResult, OperationClass};

fn spec() -> ProposalSpec {
    ProposalSpec {
        action: "host_restart_service".into(),
        class: OperationClass::Write,
        target: "node-01".into(),
        parameters:
            serde_json::json!({"service": "nginx", "opts": {"b": 1, "a": [2, {"y": 1, "x": 0}]}})
                .as_object()
                .cloned()
                .unwrap(),
        reason: "nginx OOM".into(),
        blast_radius: BlastRadius::SingleDevice,
        operator: "user_42".into(),
        context_summary: String::new(),
        incident_id: String::new(),
        labels: Default::default(),
        rollback_plan: String::new(),
        force_approve_no_sop: false,
        idempotency_key: String::new(),
    }
}

fn rejection(missing: &[&str]) -> Decision {
    Decision {
        outcome: DecisionOutcome::Reject,
        reason: "r".into(),
        agent_message: "a".into(),
        sop_id: None,
        sop_version: None,
        rollback_path: None,
        gates: vec![GateResult {
            gate: "sop".into(),
            passed: false,
            detail: "d".into(),
        }],
        missing_gates: missing.iter().map(|g| g.to_string()).collect(),
        reviewer: "w".into(),
        decided_at: 0,
        summary: String::new(),
        sequence: 0,
        digest: String::new(),
        review_latency_ms: 0,
        route_id: None,
        votes: Vec::new(),
    }
}

#[test]
fn the_reason_and_other_prose_do_not_change_the_fingerprint() {
    let a = spec();
    let mut b = spec();
    b.reason = "reworded: please, it is urgent".into();
    b.context_summary = "more context".into();
    b.incident_id = "INC-9".into();
    b.idempotency_key = "retry-2".into();
    b.operator = "someone_else".into();
    assert_eq!(fingerprint("acme", &a), fingerprint("acme", &b));
}

#[test]
fn parameter_key_order_does_not_matter_but_values_do() {
    let a = spec();
    let mut b = spec();
    b.parameters = serde_json::from_str(
        r#"{"opts": {"a": [2, {"x": 0, "y": 1}], "b": 1}, "service": "nginx"}"#,
    )
    .unwrap();
    assert_eq!(fingerprint("acme", &a), fingerprint("acme", &b));
    b.parameters["service"] = "redis".into();
    assert_ne!(fingerprint("acme", &a), fingerprint("acme", &b));
}

#[test]
fn tenant_action_target_and_radius_each_change_the_fingerprint() {
    let base = fingerprint("acme", &spec());
    assert_ne!(base, fingerprint("globex", &spec()));
    let mut s = spec();
    s.action = "host_reboot".into();
    assert_ne!(base, fingerprint("acme", &s));
    let mut s = spec();
    s.target = "node-02".into();
    assert_ne!(base, fingerprint("acme", &s));
    let mut s = spec();
    s.blast_radius = BlastRadius::Cluster;
    assert_ne!(base, fingerprint("acme", &s));
}

#[test]
fn only_a_review_that_rejected_on_its_merits_suppresses_retries() {
    assert!(suppresses_retries(&rejection(&["sop"])));
    assert!(suppresses_retries(&rejection(&[
        "sop",
        "no_parallel_operation"
    ])));
    assert!(
        !suppresses_retries(&rejection(&["no_parallel_operation"])),
        "told to wait: one who waited is reviewed"
    );
    assert!(
        !suppresses_retries(&rejection(&["review"])),
        "review failed"
    );
    let mut approved = rejection(&[]);
    approved.outcome = DecisionOutcome::Approve;
    assert!(!suppresses_retries(&approved));
    let mut timed_out = rejection(&["review"]);
    timed_out.outcome = DecisionOutcome::TimedOut;
    assert!(!suppresses_retries(&timed_out));
}

#[test]
fn the_breaker_opens_at_the_threshold_within_the_window_and_closes_after() {
    let window = 300_000;
    let mut b = Breaker::default();
    b.record_rejection(1_000, window);
    b.record_rejection(2_000, window);
    assert!(!b.is_open(2_000, 3, window));
    b.record_rejection(3_000, window);
    assert!(b.is_open(3_000, 3, window));
    assert!(b.is_open(1_000 + window - 1, 3, window));
    assert!(!b.is_open(1_000 + window, 3, window), "the first aged out");
    assert!(!b.is_idle(1_000 + window, window));
    assert!(b.is_idle(3_000 + window, window));
}

#[test]
fn a_reset_closes_the_breaker_and_forgets_what_came_before() {
    let window = 300_000;
    let mut b = Breaker::default();
    for t in [1, 2, 3] {
        b.record_rejection(t, window);
    }
    assert!(b.is_open(3, 3, window));
    b.reset(3);
    assert!(!b.is_open(4, 3, window));
    b.record_rejection(5, window);
    assert!(!b.is_open(5, 3, window));
    assert!(!Breaker::default().is_open(0, 0, window), "0 turns it off");
}
