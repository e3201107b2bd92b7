use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;
use crate::{
    DecisionOutcome,
    proposal::{OperationClass, ProposalSpec},
    review::{ReviewStamp, decide},
};

const NOW: Millis = 1_000_000_000;
const MIN: Millis = 60_000;

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).into(), (*v).into()))
        .collect()
}

fn sop(id: &str, max: BlastRadius) -> Sop {
    Sop {
        id: id.into(),
        action: "host_restart_service".into(),
        title: "Restart a service".into(),
        covers: "restart nginx on OOM".into(),
        rollback_path: "systemctl start nginx".into(),
        max_blast_radius: max,
        selector: labels(&[("env", "production")]),
        version: 3,
        retired: false,
        updated_at: 0,
    }
}

fn target(id: &str, status: TargetStatus, cluster: &str) -> Target {
    Target {
        id: id.into(),
        status,
        labels: labels(&[("env", "production"), ("cluster", cluster)]),
        updated_at: 0,
    }
}

fn facts() -> ReviewFacts {
    ReviewFacts {
        proposal_id: "P5".into(),
        spec: GateSpec {
            action: "host_restart_service".into(),
            class: OperationClass::Write,
            target: "node-01".into(),
            blast_radius: BlastRadius::SingleDevice,
            rollback_plan: String::new(),
            force_approve_no_sop: false,
        },
        created_at: NOW - 1000,
        policy: TenantPolicy::default(),
        sops: vec![sop("SOP-007", BlastRadius::Cluster)],
        target: Some(target("node-01", TargetStatus::Online, "c1")),
        others: Vec::new(),
        now: NOW,
        routes: Vec::new(),
        model_profiles: Vec::new(),
        sop_catalogue: Vec::new().into(),
    }
}

fn other(
    id: &str,
    target: &str,
    cluster: &str,
    radius: BlastRadius,
    state: ProposalState,
) -> OtherOperation {
    OtherOperation {
        id: id.into(),
        action: "host_restart_service".into(),
        target: target.into(),
        target_cluster: Some(cluster.into()),
        blast_radius: radius,
        state,
        created_at: NOW - 5000,
        decided_at: None,
    }
}

fn result<'a>(v: &'a Verdict, name: &str) -> &'a GateResult {
    v.gates.iter().find(|g| g.gate == name).unwrap()
}

fn model_gate(passed: bool) -> GateResult {
    GateResult {
        gate: MODEL.into(),
        passed,
        detail: if passed { "approve" } else { "unsure" }.into(),
    }
}

#[test]
fn a_passed_model_gate_after_the_five_keeps_an_approval_and_a_failed_one_rejects() {
    let v = evaluate(&facts());
    let approved = v.with_model(model_gate(true));
    assert!(approved.approves(), "{approved:#?}");
    assert!(approved.missing_gates().is_empty());
    let unsure = v.with_model(model_gate(false));
    assert!(!unsure.approves());
    assert_eq!(unsure.missing_gates(), [MODEL]);
    // One model gate at most, after the five, replacing an earlier one.
    assert_eq!(
        unsure.with_model(model_gate(true)).gates.len(),
        GATES.len() + 1
    );
    assert!(unsure.with_model(model_gate(true)).approves());
    let mut twice = approved.clone();
    twice.gates.push(model_gate(true));
    assert!(!twice.approves());
    let mut first = approved.clone();
    first.gates.rotate_right(1);
    assert!(!first.approves(), "the model gate before the five");
    let mut other = approved;
    other.gates[GATES.len()].gate = "human".into();
    assert!(!other.approves(), "an extra gate that is not the model's");
}

#[test]
fn every_gate_passing_approves_and_cites_the_sop() {
    let v = evaluate(&facts());
    assert!(v.approves(), "{v:#?}");
    assert_eq!(
        v.gates.iter().map(|g| g.gate.as_str()).collect::<Vec<_>>(),
        GATES
    );
    assert_eq!(v.sop.as_ref().unwrap().id, "SOP-007");
    assert_eq!(v.rollback_path.as_deref(), Some("systemctl start nginx"));
}

#[test]
fn no_sop_fails_the_sop_rollback_and_blast_radius_gates() {
    let mut f = facts();
    f.sops.clear();
    let v = evaluate(&f);
    assert!(!v.approves());
    assert_eq!(v.missing_gates(), ["sop", "rollback", "blast_radius"]);
    assert_eq!(
        result(&v, SOP).detail,
        "no SOP for action host_restart_service"
    );
}

#[test]
fn an_sop_must_cover_the_action_select_the_target_and_be_active() {
    let mut f = facts();
    f.sops[0].action = "drain_cluster".into();
    assert!(!result(&evaluate(&f), SOP).passed);

    let mut f = facts();
    f.sops[0].selector = labels(&[("env", "staging")]);
    let v = evaluate(&f);
    assert!(!result(&v, SOP).passed);
    assert!(
        result(&v, SOP).detail.contains("selects target node-01"),
        "{v:?}"
    );

    let mut f = facts();
    f.sops[0].retired = true;
    assert!(!result(&evaluate(&f), SOP).passed);
}

#[test]
fn force_approve_no_sop_stands_in_only_for_single_device_where_allowed() {
    let mut f = facts();
    f.sops.clear();
    f.spec.force_approve_no_sop = true;
    f.spec.rollback_plan = "systemctl start nginx".into();
    let v = evaluate(&f);
    assert!(!v.approves());
    assert!(
        result(&v, SOP)
            .detail
            .contains("not allowed for this tenant")
    );

    f.policy.allow_force_approve_no_sop = true;
    let v = evaluate(&f);
    assert!(v.approves(), "{v:#?}");
    assert!(
        result(&v, SOP)
            .detail
            .contains("force_approve_no_sop stands in")
    );

    f.spec.blast_radius = BlastRadius::Cluster;
    let v = evaluate(&f);
    assert!(!v.approves());
    assert!(result(&v, SOP).detail.contains("only to single_device"));
}

#[test]
fn where_several_sops_match_the_one_passing_most_gates_is_cited() {
    let mut f = facts();
    f.spec.blast_radius = BlastRadius::Cluster;
    f.sops = vec![
        sop("SOP-001", BlastRadius::SingleDevice),
        sop("SOP-002", BlastRadius::TenantWide),
    ];
    let v = evaluate(&f);
    assert!(v.approves(), "{v:#?}");
    assert_eq!(v.sop.unwrap().id, "SOP-002");
}

#[test]
fn a_target_that_is_not_online_or_unknown_fails() {
    for status in [
        TargetStatus::Offline,
        TargetStatus::RestartLoop,
        TargetStatus::Maintenance,
    ] {
        let mut f = facts();
        f.target.as_mut().unwrap().status = status;
        let v = evaluate(&f);
        assert_eq!(v.missing_gates(), ["target_state"], "{status}");
        assert!(result(&v, TARGET_STATE).detail.contains(status.as_str()));
    }
    let mut f = facts();
    f.target = None;
    let v = evaluate(&f);
    assert!(!v.approves());
    assert_eq!(result(&v, TARGET_STATE).detail, "target node-01 is unknown");
}

#[test]
fn an_earlier_open_operation_on_the_same_target_blocks_and_is_named() {
    for state in [ProposalState::Pending, ProposalState::Reviewing] {
        let mut f = facts();
        f.others = vec![other(
            "P1",
            "node-01",
            "c1",
            BlastRadius::SingleDevice,
            state,
        )];
        let v = evaluate(&f);
        assert_eq!(v.missing_gates(), ["no_parallel_operation"]);
        assert!(
            result(&v, NO_PARALLEL_OPERATION)
                .detail
                .contains("wait for P1")
        );
    }
}

#[test]
fn a_later_open_operation_does_not_block_an_earlier_one() {
    let mut f = facts();
    let mut later = other(
        "P9",
        "node-01",
        "c1",
        BlastRadius::SingleDevice,
        ProposalState::Pending,
    );
    later.created_at = f.created_at + 10;
    f.others = vec![later];
    assert!(evaluate(&f).approves());
}

#[test]
fn an_approval_blocks_for_the_window_only() {
    let mut f = facts();
    let mut approved = other(
        "P1",
        "node-01",
        "c1",
        BlastRadius::SingleDevice,
        ProposalState::Approved,
    );
    approved.decided_at = Some(NOW - 9 * MIN);
    f.others = vec![approved.clone()];
    assert!(!evaluate(&f).approves());
    approved.decided_at = Some(NOW - 11 * MIN);
    f.others = vec![approved.clone()];
    assert!(evaluate(&f).approves());
    f.policy.parallel_window_ms = 15 * MIN;
    assert!(!evaluate(&f).approves());
}

#[test]
fn finished_operations_other_than_recent_approvals_do_not_block() {
    for state in [
        ProposalState::Rejected,
        ProposalState::Cancelled,
        ProposalState::TimedOut,
    ] {
        let mut f = facts();
        f.others = vec![other(
            "P1",
            "node-01",
            "c1",
            BlastRadius::SingleDevice,
            state,
        )];
        assert!(evaluate(&f).approves(), "{state}");
    }
}

#[test]
fn scope_follows_the_blast_radius() {
    use BlastRadius::*;
    use ProposalState::Pending;
    // (this radius, other target, other cluster, other radius, blocks?)
    let cases = [
        (SingleDevice, "node-02", "c1", SingleDevice, false),
        (SingleDevice, "node-02", "c1", Cluster, true),
        (Cluster, "node-02", "c1", SingleDevice, true),
        (Cluster, "node-02", "c2", SingleDevice, false),
        (Cluster, "node-02", "c2", Cluster, false),
        (SingleDevice, "node-09", "c9", TenantWide, true),
        (TenantWide, "node-09", "c9", SingleDevice, true),
        (SingleDevice, "node-01", "c1", SingleDevice, true),
    ];
    for (this, target, cluster, radius, blocks) in cases {
        let mut f = facts();
        f.spec.blast_radius = this;
        f.sops[0].max_blast_radius = TenantWide;
        f.others = vec![other("P1", target, cluster, radius, Pending)];
        let passed = result(&evaluate(&f), NO_PARALLEL_OPERATION).passed;
        assert_eq!(passed, !blocks, "{this} vs {radius} on {target}/{cluster}");
    }
}

#[test]
fn a_cluster_operation_whose_cluster_is_unknown_fails_no_parallel_operation() {
    let unlabelled = |labels: BTreeMap<String, String>| {
        let mut f = facts();
        f.spec.blast_radius = BlastRadius::Cluster;
        f.target.as_mut().unwrap().labels = labels;
        f
    };
    for f in [
        unlabelled(labels(&[("env", "production")])),
        unlabelled(labels(&[("env", "production"), ("cluster", " ")])),
    ] {
        let v = evaluate(&f);
        assert_eq!(v.missing_gates(), [NO_PARALLEL_OPERATION], "{v:#?}");
        assert_eq!(
            result(&v, NO_PARALLEL_OPERATION).detail,
            "target has no cluster label: the operation's scope is unknown"
        );
    }
    let mut unknown = facts();
    unknown.spec.blast_radius = BlastRadius::Cluster;
    unknown.target = None;
    let v = evaluate(&unknown);
    assert!(!result(&v, NO_PARALLEL_OPERATION).passed);
    assert_eq!(
        result(&v, NO_PARALLEL_OPERATION).detail,
        "target node-01 is unknown: the operation's scope is unknown"
    );
    // A single device's scope is its target, label or not.
    let mut device = unlabelled(labels(&[("env", "production")]));
    device.spec.blast_radius = BlastRadius::SingleDevice;
    assert!(evaluate(&device).approves());
}

#[test]
fn another_cluster_operation_whose_cluster_is_unknown_overlaps_everything() {
    let mut f = facts();
    let mut unlabelled = other(
        "P1",
        "node-77",
        "",
        BlastRadius::Cluster,
        ProposalState::Pending,
    );
    unlabelled.target_cluster = None;
    f.others = vec![unlabelled.clone()];
    let v = evaluate(&f);
    assert_eq!(v.missing_gates(), [NO_PARALLEL_OPERATION]);
    assert!(
        result(&v, NO_PARALLEL_OPERATION)
            .detail
            .contains("wait for P1")
    );
    // Blank is no label either; a single device elsewhere does not overlap.
    unlabelled.target_cluster = Some(" ".into());
    f.others = vec![unlabelled.clone()];
    assert!(!evaluate(&f).approves());
    unlabelled.blast_radius = BlastRadius::SingleDevice;
    f.others = vec![unlabelled];
    assert!(evaluate(&f).approves());
}

#[test]
fn the_gates_view_of_a_spec_is_the_fields_they_read() {
    let spec = ProposalSpec {
        action: "host_restart_service".into(),
        class: OperationClass::Destructive,
        target: "node-01".into(),
        parameters: Default::default(),
        reason: "OOM".into(),
        blast_radius: BlastRadius::Cluster,
        operator: "alice".into(),
        context_summary: "summary".into(),
        incident_id: "INC-1".into(),
        labels: labels(&[("team", "web")]),
        rollback_plan: "  reboot node-01\n".into(),
        force_approve_no_sop: true,
        idempotency_key: "k".into(),
    };
    assert_eq!(
        GateSpec::from(&spec),
        GateSpec {
            action: "host_restart_service".into(),
            class: spec.class,
            target: "node-01".into(),
            blast_radius: BlastRadius::Cluster,
            rollback_plan: "reboot node-01".into(),
            force_approve_no_sop: true,
        }
    );
}

#[test]
fn a_proposals_own_rollback_plan_counts_only_for_single_device() {
    let mut f = facts();
    f.sops[0].rollback_path.clear();
    let v = evaluate(&f);
    assert_eq!(v.missing_gates(), ["rollback"]);
    f.spec.rollback_plan = "reboot node-01".into();
    let v = evaluate(&f);
    assert!(v.approves());
    assert_eq!(v.rollback_path.as_deref(), Some("reboot node-01"));
    f.spec.blast_radius = BlastRadius::Cluster;
    let v = evaluate(&f);
    assert_eq!(v.missing_gates(), ["rollback"]);
    assert!(
        result(&v, ROLLBACK)
            .detail
            .contains("counts only for single_device")
    );
}

#[test]
fn a_blast_radius_beyond_the_sops_maximum_fails() {
    let mut f = facts();
    f.spec.blast_radius = BlastRadius::TenantWide;
    let v = evaluate(&f);
    assert_eq!(v.missing_gates(), ["blast_radius"]);
    assert!(
        result(&v, BLAST_RADIUS)
            .detail
            .contains("exceeds SOP-007's max cluster")
    );
}

#[test]
fn an_incomplete_or_reordered_verdict_never_approves() {
    let full = evaluate(&facts());
    assert!(full.approves());
    let mut missing = full.clone();
    missing.gates.pop();
    assert!(!missing.approves());
    assert_eq!(missing.missing_gates(), ["blast_radius"]);
    let mut reordered = full.clone();
    reordered.gates.swap(0, 1);
    assert!(!reordered.approves());
    let mut extra = full.clone();
    extra.gates.push(GateResult {
        gate: "sop".into(),
        passed: true,
        detail: String::new(),
    });
    assert!(!extra.approves());
    assert_eq!(extra.missing_gates(), ["review"]);
    let empty = Verdict {
        gates: vec![],
        sop: None,
        rollback_path: None,
    };
    assert!(!empty.approves());
}

#[test]
fn a_rejection_summary_lists_every_gate_and_the_missing_ones() {
    let mut f = facts();
    f.target = None;
    f.sops.clear();
    let v = evaluate(&f);
    let d = decide(
        &v,
        &f.spec,
        ReviewStamp {
            reviewer: "w1".into(),
            decided_at: NOW,
            latency_ms: 3,
        },
    );
    assert_eq!(d.outcome, DecisionOutcome::Reject);
    assert!(
        d.summary.starts_with("Decision: reject\n\nGates\n- ✗ sop:"),
        "{}",
        d.summary
    );
    assert!(d.summary.contains("- ✓ no_parallel_operation:"));
    assert!(
        d.summary
            .contains("\nNotes\nMissing gates: sop, target_state, rollback, blast_radius.")
    );
    assert!(d.reason.contains("target node-01 is unknown"));
    assert_eq!(d.agent_message, crate::decision::AGENT_REFUSAL);
    assert!(!d.agent_message.contains("node-01"));
}

// ---- property: approved ⇔ every gate passed --------------------------------

fn radius() -> impl Strategy<Value = BlastRadius> {
    prop_oneof![
        Just(BlastRadius::SingleDevice),
        Just(BlastRadius::Cluster),
        Just(BlastRadius::TenantWide)
    ]
}

fn state() -> impl Strategy<Value = ProposalState> {
    proptest::sample::select(ProposalState::ALL.to_vec())
}

fn status() -> impl Strategy<Value = TargetStatus> {
    proptest::sample::select(TargetStatus::ALL.to_vec())
}

fn arb_sop() -> impl Strategy<Value = Sop> {
    (
        prop_oneof![Just("host_restart_service"), Just("drain")],
        radius(),
        any::<bool>(),
        any::<bool>(),
        prop_oneof![Just(None), Just(Some("production")), Just(Some("staging"))],
        0u8..4,
    )
        .prop_map(|(action, max, retired, rollback, env, n)| Sop {
            id: format!("SOP-{n}"),
            action: action.into(),
            title: "t".into(),
            covers: String::new(),
            rollback_path: if rollback {
                "undo".into()
            } else {
                String::new()
            },
            max_blast_radius: max,
            selector: env.map(|e| labels(&[("env", e)])).unwrap_or_default(),
            version: 1,
            retired,
            updated_at: 0,
        })
}

fn arb_other() -> impl Strategy<Value = OtherOperation> {
    (
        prop_oneof![Just("node-01"), Just("node-02")],
        prop_oneof![Just(None), Just(Some("c1")), Just(Some("c2"))],
        radius(),
        state(),
        -20i64..20,
        proptest::option::of(0i64..20),
    )
        .prop_map(
            |(target, cluster, radius, state, created, decided)| OtherOperation {
                id: format!("O{created}{target}"),
                action: "host_restart_service".into(),
                target: target.into(),
                target_cluster: cluster.map(Into::into),
                blast_radius: radius,
                state,
                created_at: NOW - 1000 + created * 100,
                decided_at: decided.map(|m| NOW - m * MIN),
            },
        )
}

fn arb_facts() -> impl Strategy<Value = ReviewFacts> {
    (
        radius(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        proptest::collection::vec(arb_sop(), 0..4),
        proptest::option::of((status(), prop_oneof![Just("c1"), Just("c2")])),
        proptest::collection::vec(arb_other(), 0..4),
        1i64..30,
    )
        .prop_map(
            |(radius, force, allow, plan, sops, target, others, window)| {
                let mut f = facts();
                f.spec.blast_radius = radius;
                f.spec.force_approve_no_sop = force;
                f.policy.allow_force_approve_no_sop = allow;
                f.policy.parallel_window_ms = window * MIN;
                if plan {
                    f.spec.rollback_plan = "undo".into();
                }
                f.sops = sops;
                f.target = target.map(|(s, c)| self::target("node-01", s, c));
                f.others = others;
                f
            },
        )
}

proptest! {
    #[test]
    fn approved_if_and_only_if_every_gate_passed(f in arb_facts()) {
        let v = evaluate(&f);
        let all_passed = v.gates.len() == 5 && v.gates.iter().all(|g| g.passed);
        prop_assert_eq!(v.approves(), all_passed);
        let d = decide(&v, &f.spec, ReviewStamp { reviewer: "w".into(), decided_at: NOW, latency_ms: 0 });
        prop_assert_eq!(d.outcome == DecisionOutcome::Approve, all_passed);
        prop_assert_eq!(d.missing_gates.is_empty(), all_passed);
        let first_line = if all_passed { "Decision: approve\n" } else { "Decision: reject\n" };
        prop_assert!(d.summary.starts_with(first_line), "{}", d.summary);
    }

    #[test]
    fn a_verdict_with_any_gate_dropped_never_approves(f in arb_facts(), drop in 0usize..5) {
        let mut v = evaluate(&f);
        v.gates.remove(drop);
        let d = decide(&v, &f.spec, ReviewStamp { reviewer: "w".into(), decided_at: NOW, latency_ms: 0 });
        prop_assert_eq!(d.outcome, DecisionOutcome::Reject);
    }
}
