use countersign_domain::{
    BlastRadius, Decision, DecisionOutcome, GateResult, OperationClass, ProposalState,
};

use super::*;

/// A rejected proposal whose spec is about 84 KB: large parameters, context
/// summary and reason.
fn rejected(id: &str) -> Proposal {
    Proposal {
        id: id.into(),
        tenant: "acme".into(),
        spec: ProposalSpec {
            action: "host_restart_service".into(),
            class: OperationClass::Write,
            target: "node-99".into(),
            parameters: serde_json::json!({"blob": "p".repeat(63 * 1024)})
                .as_object()
                .cloned()
                .unwrap(),
            reason: "r".repeat(4 * 1024),
            blast_radius: BlastRadius::SingleDevice,
            operator: "user_42".into(),
            context_summary: "c".repeat(16 * 1024),
            incident_id: "INC-7".into(),
            labels: [("team".to_owned(), "web".to_owned())].into(),
            rollback_plan: String::new(),
            force_approve_no_sop: false,
            idempotency_key: String::new(),
        },
        state: ProposalState::Rejected,
        submitted_by: "sre-bot".into(),
        submitted_by_person: None,
        created_at: 1,
        updated_at: 2,
        decision: Some(Decision {
            outcome: DecisionOutcome::Reject,
            reason: "target_state: target node-99 is unknown".into(),
            agent_message: "ask a human".into(),
            sop_id: None,
            sop_version: None,
            rollback_path: None,
            gates: vec![GateResult {
                gate: "target_state".into(),
                passed: false,
                detail: "target node-99 is unknown".into(),
            }],
            missing_gates: vec!["target_state".into()],
            reviewer: "w-1".into(),
            decided_at: 2,
            summary: "Decision: reject".into(),
            sequence: 1,
            digest: "ab".into(),
            review_latency_ms: 1,
            route_id: None,
            votes: Vec::new(),
            model: None,
        }),
        suppressed_retries: 0,
        cancel_reason: None,
    }
}

fn entry(id: &str) -> Arc<Entry> {
    Arc::new(Entry::new(&rejected(id), format!("fp-{id}"), i64::MAX, 0))
}

#[test]
fn an_entry_keeps_what_an_answer_needs_and_not_the_bulk_of_the_spec() {
    let full = rejected("P1");
    let kept = entry("P1");
    assert!(kept.proposal.spec.parameters.is_empty());
    assert!(kept.proposal.spec.context_summary.is_empty());
    assert!(kept.proposal.spec.labels.is_empty());
    assert_eq!(kept.proposal.decision, full.decision);
    assert_eq!(
        (kept.proposal.id.as_str(), kept.proposal.state),
        ("P1", ProposalState::Rejected)
    );
    let full_bytes = serde_json::to_vec(&full).unwrap().len();
    assert!(full_bytes > 80 * 1024, "{full_bytes}");
    // What is kept, twice (as it is, and on the wire), and none of the bulk.
    assert!(kept.bytes < 16 * 1024, "{} bytes kept", kept.bytes);

    // The answer to a retry (the same parameters, or another fingerprint)
    // is the earlier proposal with them, on the wire as the caller sees it:
    // what converting the kept proposal with them gives.
    let mut expected = Proposal::clone(&kept.proposal);
    expected.spec.parameters = full.spec.parameters.clone();
    for agent in [false, true] {
        assert_eq!(
            kept.answer(&full.spec, agent),
            proposal_to_proto(&expected, agent),
            "agent: {agent}"
        );
    }
    let shown = kept.answer(&full.spec, false);
    let spec = shown.spec.unwrap();
    assert_eq!(spec.parameters, Some(json_to_struct(&full.spec.parameters)));
    assert_eq!(spec.reason, full.spec.reason);
    assert_eq!(
        shown.decision.unwrap().reason,
        "target_state: target node-99 is unknown"
    );
    // An agent sees the terse decision: no reason, no gates.
    let terse = kept.answer(&full.spec, true).decision.unwrap();
    assert_eq!(
        (terse.reason.as_str(), terse.agent_message.as_str()),
        ("", "ask a human")
    );
    assert!(terse.gates.is_empty() && terse.missing_gates.is_empty());
}

#[test]
fn the_byte_budget_evicts_before_the_count_does() {
    let one = entry("P0").bytes as u64;
    // Room for 1,000 entries by count, but only about 10 by bytes.
    let tier = LocalTier::new(1_000, 10 * one, Duration::from_secs(600));
    for n in 0..100 {
        let e = entry(&format!("P{n}"));
        tier.put(e.fingerprint.clone(), e);
    }
    tier.cache.run_pending_tasks();
    assert!(
        tier.cache.weighted_size() <= 10 * one,
        "{} bytes weighed",
        tier.cache.weighted_size()
    );
    let held = tier.entries();
    assert!((1..=10).contains(&held), "{held} entries held");
}

#[test]
fn the_count_still_bounds_small_entries() {
    let tier = LocalTier::new(5, 1 << 30, Duration::from_secs(600));
    for n in 0..50 {
        let e = entry(&format!("P{n}"));
        tier.put(e.fingerprint.clone(), e);
    }
    let held = tier.entries();
    assert!((1..=5).contains(&held), "{held} entries held");
}

#[test]
fn no_capacity_caches_nothing() {
    let tier = LocalTier::new(0, 1 << 30, Duration::from_secs(600));
    let e = entry("P1");
    tier.put(e.fingerprint.clone(), e);
    assert_eq!(tier.entries(), 0);
    assert!(tier.get("fp-P1").is_none());
}
