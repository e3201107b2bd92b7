//! Whether a review's result may be recorded, decided inside the transaction
//! that would write it: from the proposal's state at that moment and, for an
//! approval, the facts it rests on as they are then. Both stores ask
//! [`recording`] for every result they are handed, [`escalating`] for every
//! escalation a review opens, and [`final_approval`] for every decision
//! people reach; no other path writes a decision.

use crate::{
    Decision, DecisionOutcome, Millis, ProposalState, Target, TargetStatus,
    decision::{AGENT_REFUSAL, GateResult},
    gates::{GateSpec, HUMAN, NO_PARALLEL_OPERATION, OtherOperation, SOP, TARGET_STATE},
    review::summary,
};

/// The SOP an approval cites, as it is at commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SopAtCommit {
    pub version: u32,
    pub retired: bool,
}

/// What an approval rests on, as it is at commit: its target and that
/// target's status, and its cited SOP (`None` where a row is gone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FactsAtCommit<'a> {
    pub target: &'a str,
    pub target_status: Option<TargetStatus>,
    pub sop: Option<SopAtCommit>,
}

/// What becomes of a review's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recording {
    /// Written: the proposal moves to this state.
    Record(ProposalState),
    /// The proposal is already terminal: the result is late, logged and dropped.
    Discard,
    /// The result no longer fits the proposal or its facts: review again.
    Stale(String),
}

/// The fate of `decision` for proposal `proposal_id`, found in `state` at
/// commit. A terminal proposal never changes, and an escalated one waits for
/// people, not reviewers; a move the state machine does
/// not allow is stale; an approval is recorded only while its cited SOP is at
/// the version it was reviewed against and active, and its target ONLINE.
pub fn recording(
    proposal_id: &str,
    state: ProposalState,
    decision: &Decision,
    facts: &FactsAtCommit<'_>,
) -> Recording {
    // An escalated proposal's review has concluded; only people decide it
    // now, so a reviewer's result arriving for it (a redelivery) is late.
    if state.is_terminal() || state == ProposalState::Escalated {
        return Recording::Discard;
    }
    let next = decision.outcome.state();
    if !state.can_become(next) {
        return Recording::Stale(format!(
            "proposal {proposal_id} is {state}; it cannot become {next}"
        ));
    }
    if decision.outcome == DecisionOutcome::Approve
        && let Some(moved) = moved_facts(decision, facts, "during the review").first()
    {
        return Recording::Stale(moved.what.clone());
    }
    Recording::Record(next)
}

/// The fate of an escalation a review opens for proposal `proposal_id`,
/// found in `state` at commit: only a proposal under review escalates. A
/// terminal proposal never changes and an escalated one is already waiting
/// for people (the review was redelivered): the result is late. Any other
/// move is stale.
pub fn escalating(proposal_id: &str, state: ProposalState) -> Recording {
    if state.is_terminal() || state == ProposalState::Escalated {
        return Recording::Discard;
    }
    if !state.can_become(ProposalState::Escalated) {
        return Recording::Stale(format!(
            "proposal {proposal_id} is {state}; it cannot become {}",
            ProposalState::Escalated
        ));
    }
    Recording::Record(ProposalState::Escalated)
}

/// A fact an approval rests on that no longer holds at commit, and the gate
/// that reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Moved {
    pub gate: &'static str,
    pub what: String,
}

/// The facts an approval rests on that no longer hold at commit, in gate
/// order (`during`: over what time they moved, as the text says it): its
/// cited SOP retired, at another version or gone; its target no longer
/// ONLINE or gone.
fn moved_facts(decision: &Decision, facts: &FactsAtCommit<'_>, during: &str) -> Vec<Moved> {
    let mut moved = Vec::new();
    let sop_id = decision.sop_id.as_deref().unwrap_or_default();
    if let Some(version) = decision.sop_version {
        let what = match facts.sop {
            Some(SopAtCommit { retired: true, .. }) => {
                Some(format!("{sop_id} was retired {during}"))
            }
            Some(SopAtCommit { version: now, .. }) if now != version => {
                Some(format!("{sop_id} changed {during} (v{version} → v{now})"))
            }
            Some(_) => None,
            None => Some(format!("{sop_id} vanished {during}")),
        };
        moved.extend(what.map(|what| Moved { gate: SOP, what }));
    }
    let target = facts.target;
    let what = match facts.target_status {
        Some(TargetStatus::Online) => None,
        Some(other) => Some(format!("target {target} became {other} {during}")),
        None => Some(format!("target {target} vanished {during}")),
    };
    moved.extend(what.map(|what| Moved {
        gate: TARGET_STATE,
        what,
    }));
    moved
}

/// What people's approval of an escalated proposal rests on, as it is when
/// the approval commits.
#[derive(Debug, Clone, Copy)]
pub struct AtFinalApproval<'a> {
    pub proposal_id: &'a str,
    /// The proposal's spec as the gates saw it.
    pub spec: &'a GateSpec,
    /// Its target now (`None`: gone).
    pub target: Option<&'a Target>,
    /// The SOP the decision cites, now (`None`: gone).
    pub sop: Option<SopAtCommit>,
    /// When the escalation opened.
    pub opened_at: Millis,
    /// The operations that may overlap it, as the parallel-operation gate's
    /// facts are gathered (`gates::OtherOperation`).
    pub others: &'a [OtherOperation],
}

/// What becomes of the decision people reached on an escalated proposal,
/// re-checked as its transaction commits. A rejection stands as it is. An
/// approval stands only while the facts the review found still hold: its
/// cited SOP at the same version and active, its target ONLINE, and no
/// overlapping operation (the parallel-operation gate's overlap) approved
/// since the escalation opened. Otherwise it becomes a rejection whose
/// reason names what moved: the `human` gate stays passed, and each moved
/// fact's gate fails with what moved as its detail.
pub fn final_approval(decision: Decision, at: &AtFinalApproval<'_>) -> Decision {
    if decision.outcome != DecisionOutcome::Approve {
        return decision;
    }
    const DURING: &str = "while the escalation was open";
    let facts = FactsAtCommit {
        target: &at.spec.target,
        target_status: at.target.map(|t| t.status),
        sop: at.sop,
    };
    let mut moved = moved_facts(&decision, &facts, DURING);
    let mut approved: Vec<&OtherOperation> = at
        .others
        .iter()
        .filter(|o| {
            o.id != at.proposal_id
                && o.state == ProposalState::Approved
                && o.decided_at.is_some_and(|t| t >= at.opened_at)
                && crate::gates::scopes_overlap(at.spec, at.target, o)
        })
        .collect();
    approved.sort_by(|a, b| (a.decided_at, &a.id).cmp(&(b.decided_at, &b.id)));
    if let Some(first) = approved.first() {
        moved.push(Moved {
            gate: NO_PARALLEL_OPERATION,
            what: format!(
                "{} on {} (proposal {}) was approved {DURING}",
                first.action, first.target, first.id
            ),
        });
    }
    if moved.is_empty() {
        return decision;
    }
    moved_rejection(decision, &moved)
}

/// `approval` turned into the rejection of the facts that `moved`.
fn moved_rejection(approval: Decision, moved: &[Moved]) -> Decision {
    let mut gates = approval.gates.clone();
    for m in moved {
        let failed = GateResult {
            gate: m.gate.to_owned(),
            passed: false,
            detail: m.what.clone(),
        };
        match gates.iter_mut().find(|g| g.gate == m.gate) {
            Some(gate) => *gate = failed,
            None => {
                let at = gates.iter().position(|g| g.gate == HUMAN);
                gates.insert(at.unwrap_or(gates.len()), failed);
            }
        }
    }
    let failed: Vec<&GateResult> = gates.iter().filter(|g| !g.passed).collect();
    let reason = failed
        .iter()
        .map(|g| format!("{}: {}", g.gate, g.detail))
        .collect::<Vec<_>>()
        .join("; ");
    let whats: Vec<&str> = moved.iter().map(|m| m.what.as_str()).collect();
    let notes = format!(
        "Approved by people, but the facts moved before the approval committed: {}. \
         Do not retry this action or a variation until the reason is addressed.",
        whats.join("; ")
    );
    Decision {
        outcome: DecisionOutcome::Reject,
        summary: summary("reject", &gates, &notes),
        reason,
        agent_message: AGENT_REFUSAL.to_owned(),
        missing_gates: failed.iter().map(|g| g.gate.clone()).collect(),
        gates,
        ..approval
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::GateResult;

    fn decision(outcome: DecisionOutcome, sop_version: Option<u32>) -> Decision {
        Decision {
            outcome,
            reason: "r".into(),
            agent_message: "a".into(),
            sop_id: sop_version.map(|_| "SOP-1".into()),
            sop_version,
            rollback_path: None,
            gates: vec![GateResult {
                gate: "sop".into(),
                passed: true,
                detail: "d".into(),
            }],
            missing_gates: Vec::new(),
            reviewer: "w".into(),
            decided_at: 1,
            summary: String::new(),
            sequence: 0,
            digest: String::new(),
            review_latency_ms: 0,
            route_id: None,
            votes: Vec::new(),
            model: None,
        }
    }

    fn online(sop: Option<SopAtCommit>) -> FactsAtCommit<'static> {
        FactsAtCommit {
            target: "node-01",
            target_status: Some(TargetStatus::Online),
            sop,
        }
    }

    const AT_V2: Option<SopAtCommit> = Some(SopAtCommit {
        version: 2,
        retired: false,
    });

    #[test]
    fn an_approval_whose_facts_hold_is_recorded_as_approved() {
        let approve = decision(DecisionOutcome::Approve, Some(2));
        assert_eq!(
            recording("p", ProposalState::Reviewing, &approve, &online(AT_V2)),
            Recording::Record(ProposalState::Approved)
        );
    }

    #[test]
    fn each_moved_fact_says_what_moved() {
        let approve = decision(DecisionOutcome::Approve, Some(2));
        let stale = |facts: FactsAtCommit<'_>| match recording(
            "p",
            ProposalState::Reviewing,
            &approve,
            &facts,
        ) {
            Recording::Stale(why) => why,
            other => panic!("{other:?}"),
        };
        let retired = Some(SopAtCommit {
            version: 3,
            retired: true,
        });
        assert_eq!(
            stale(online(retired)),
            "SOP-1 was retired during the review"
        );
        let changed = Some(SopAtCommit {
            version: 3,
            retired: false,
        });
        assert_eq!(
            stale(online(changed)),
            "SOP-1 changed during the review (v2 → v3)"
        );
        assert_eq!(stale(online(None)), "SOP-1 vanished during the review");
        let mut offline = online(AT_V2);
        offline.target_status = Some(TargetStatus::Maintenance);
        assert_eq!(
            stale(offline),
            "target node-01 became maintenance during the review"
        );
        offline.target_status = None;
        assert_eq!(stale(offline), "target node-01 vanished during the review");
    }

    #[test]
    fn a_rejection_or_time_out_does_not_look_at_the_facts() {
        let gone = FactsAtCommit {
            target: "node-01",
            target_status: None,
            sop: None,
        };
        for (outcome, state) in [
            (DecisionOutcome::Reject, ProposalState::Rejected),
            (DecisionOutcome::TimedOut, ProposalState::TimedOut),
        ] {
            assert_eq!(
                recording(
                    "p",
                    ProposalState::Reviewing,
                    &decision(outcome, None),
                    &gone
                ),
                Recording::Record(state)
            );
        }
    }

    #[test]
    fn a_result_for_a_pending_proposal_is_stale_unless_it_rejects() {
        let approve = decision(DecisionOutcome::Approve, Some(2));
        assert_eq!(
            recording("p", ProposalState::Pending, &approve, &online(AT_V2)),
            Recording::Stale("proposal p is pending; it cannot become approved".into())
        );
        let reject = decision(DecisionOutcome::Reject, None);
        assert_eq!(
            recording("p", ProposalState::Pending, &reject, &online(None)),
            Recording::Record(ProposalState::Rejected)
        );
    }

    fn any_state() -> impl Strategy<Value = ProposalState> {
        prop::sample::select(ProposalState::ALL)
    }

    fn any_outcome() -> impl Strategy<Value = DecisionOutcome> {
        prop::sample::select(DecisionOutcome::ALL)
    }

    fn any_status() -> impl Strategy<Value = Option<TargetStatus>> {
        prop::option::of(prop::sample::select(crate::TargetStatus::ALL))
    }

    fn any_sop() -> impl Strategy<Value = Option<SopAtCommit>> {
        prop::option::of(
            (1..5_u32, any::<bool>())
                .prop_map(|(version, retired)| SopAtCommit { version, retired }),
        )
    }

    proptest! {
        /// A late result never changes a terminal state, whatever it says
        /// and whatever the facts.
        #[test]
        fn a_late_result_never_changes_a_terminal_state(
            state in any_state().prop_filter("terminal", |s| s.is_terminal()),
            outcome in any_outcome(),
            cited in prop::option::of(1..5_u32),
            status in any_status(),
            sop in any_sop(),
        ) {
            let facts = FactsAtCommit { target: "t", target_status: status, sop };
            prop_assert_eq!(
                recording("p", state, &decision(outcome, cited), &facts),
                Recording::Discard
            );
        }

        /// A reviewer's result never decides an escalated proposal: only
        /// people do, so it is dropped as late, whatever it says.
        #[test]
        fn a_reviewers_result_never_decides_an_escalated_proposal(
            outcome in any_outcome(),
            cited in prop::option::of(1..5_u32),
            status in any_status(),
            sop in any_sop(),
        ) {
            let facts = FactsAtCommit { target: "t", target_status: status, sop };
            prop_assert_eq!(
                recording("p", ProposalState::Escalated, &decision(outcome, cited), &facts),
                Recording::Discard
            );
        }

        /// An approval whose SOP version or target status moved (or whose
        /// SOP was retired or is gone) is never recorded as approved.
        #[test]
        fn an_approval_whose_facts_moved_is_never_recorded(
            state in any_state(),
            cited in 1..5_u32,
            status in any_status(),
            sop in any_sop(),
        ) {
            let facts = FactsAtCommit { target: "t", target_status: status, sop };
            let holds = status == Some(TargetStatus::Online)
                && sop == Some(SopAtCommit { version: cited, retired: false });
            let recorded = recording(
                "p",
                state,
                &decision(DecisionOutcome::Approve, Some(cited)),
                &facts,
            );
            if recorded == Recording::Record(ProposalState::Approved) {
                prop_assert!(holds, "{facts:?}");
                prop_assert_eq!(state, ProposalState::Reviewing);
            }
        }

        /// Whatever is recorded is the decision's own state, reached by a
        /// move the state machine allows.
        #[test]
        fn a_recorded_result_makes_an_allowed_move_to_its_outcome(
            state in any_state(),
            outcome in any_outcome(),
            cited in prop::option::of(1..5_u32),
            status in any_status(),
            sop in any_sop(),
        ) {
            let facts = FactsAtCommit { target: "t", target_status: status, sop };
            if let Recording::Record(next) = recording("p", state, &decision(outcome, cited), &facts) {
                prop_assert_eq!(next, outcome.state());
                prop_assert!(state.can_become(next));
            }
        }
    }

    // ---- escalations ----------------------------------------------------

    #[test]
    fn only_a_proposal_under_review_escalates() {
        for state in ProposalState::ALL {
            let fate = escalating("p", *state);
            match state {
                ProposalState::Reviewing => {
                    assert_eq!(fate, Recording::Record(ProposalState::Escalated))
                }
                ProposalState::Pending => assert_eq!(
                    fate,
                    Recording::Stale("proposal p is pending; it cannot become escalated".into())
                ),
                _ => assert_eq!(fate, Recording::Discard, "{state}"),
            }
        }
    }

    const NOW: Millis = 1_000_000;
    const OPENED: Millis = NOW - 60_000;

    /// The five gates passed and the `human` gate: an approval people reached.
    fn people_approved(sop_version: Option<u32>) -> Decision {
        let mut gates: Vec<GateResult> = crate::gates::GATES
            .iter()
            .map(|g| GateResult {
                gate: (*g).into(),
                passed: true,
                detail: "ok".into(),
            })
            .collect();
        gates.push(GateResult {
            gate: HUMAN.into(),
            passed: true,
            detail: "approved by ann".into(),
        });
        Decision {
            gates,
            route_id: Some("r".into()),
            ..decision(DecisionOutcome::Approve, sop_version)
        }
    }

    fn gate_spec(radius: crate::BlastRadius) -> GateSpec {
        GateSpec {
            action: "db_failover".into(),
            class: crate::OperationClass::Write,
            target: "node-01".into(),
            blast_radius: radius,
            rollback_plan: String::new(),
            force_approve_no_sop: false,
        }
    }

    fn node(status: TargetStatus, cluster: &str) -> Target {
        Target {
            id: "node-01".into(),
            status,
            labels: [("cluster".to_owned(), cluster.to_owned())].into(),
            updated_at: 0,
        }
    }

    fn approved_other(id: &str, target: &str, cluster: &str, decided_at: Millis) -> OtherOperation {
        OtherOperation {
            id: id.into(),
            action: "host_restart_service".into(),
            target: target.into(),
            target_cluster: Some(cluster.into()),
            blast_radius: crate::BlastRadius::SingleDevice,
            state: ProposalState::Approved,
            created_at: OPENED - 10,
            decided_at: Some(decided_at),
        }
    }

    fn at<'a>(
        spec: &'a GateSpec,
        target: Option<&'a Target>,
        sop: Option<SopAtCommit>,
        others: &'a [OtherOperation],
    ) -> AtFinalApproval<'a> {
        AtFinalApproval {
            proposal_id: "p",
            spec,
            target,
            sop,
            opened_at: OPENED,
            others,
        }
    }

    #[test]
    fn an_approval_whose_facts_held_while_people_decided_stands() {
        let spec = gate_spec(crate::BlastRadius::SingleDevice);
        let target = node(TargetStatus::Online, "c1");
        // Approved before the escalation opened, or elsewhere: not a moved fact.
        let others = [
            approved_other("early", "node-01", "c1", OPENED - 1),
            approved_other("elsewhere", "node-02", "c1", OPENED + 1),
        ];
        let approval = people_approved(Some(2));
        assert_eq!(
            final_approval(approval.clone(), &at(&spec, Some(&target), AT_V2, &others)),
            approval
        );
    }

    #[test]
    fn each_moved_fact_rejects_a_people_approval_naming_what_moved() {
        let spec = gate_spec(crate::BlastRadius::SingleDevice);
        let online = node(TargetStatus::Online, "c1");
        let offline = node(TargetStatus::Offline, "c1");
        let bumped = Some(SopAtCommit {
            version: 3,
            retired: false,
        });
        let parallel = [approved_other("p2", "node-01", "c1", OPENED + 5)];
        let cases: [(AtFinalApproval<'_>, &str, &str); 4] = [
            (
                at(&spec, Some(&offline), AT_V2, &[]),
                TARGET_STATE,
                "target node-01 became offline while the escalation was open",
            ),
            (
                at(&spec, None, AT_V2, &[]),
                TARGET_STATE,
                "target node-01 vanished while the escalation was open",
            ),
            (
                at(&spec, Some(&online), bumped, &[]),
                SOP,
                "SOP-1 changed while the escalation was open (v2 → v3)",
            ),
            (
                at(&spec, Some(&online), AT_V2, &parallel),
                NO_PARALLEL_OPERATION,
                "host_restart_service on node-01 (proposal p2) was approved while the escalation was open",
            ),
        ];
        for (facts, gate, what) in cases {
            let decided = final_approval(people_approved(Some(2)), &facts);
            assert_eq!(decided.outcome, DecisionOutcome::Reject, "{what}");
            assert_eq!(decided.reason, format!("{gate}: {what}"));
            assert_eq!(decided.missing_gates, [gate]);
            assert_eq!(decided.agent_message, AGENT_REFUSAL);
            let human = decided.gates.iter().find(|g| g.gate == HUMAN).unwrap();
            assert!(human.passed, "people did approve");
            let moved = decided.gates.iter().find(|g| g.gate == gate).unwrap();
            assert_eq!((moved.passed, moved.detail.as_str()), (false, what));
            assert!(
                decided.summary.starts_with("Decision: reject"),
                "{}",
                decided.summary
            );
            assert_eq!(decided.route_id.as_deref(), Some("r"));
        }
    }

    fn any_radius() -> impl Strategy<Value = crate::BlastRadius> {
        prop::sample::select(crate::BlastRadius::ALL)
    }

    fn any_other() -> impl Strategy<Value = OtherOperation> {
        (
            prop::sample::select(vec!["node-01", "node-02", "node-03"]),
            prop::option::of(prop::sample::select(vec!["c1", "c2"])),
            any_radius(),
            any_state(),
            prop::option::of(OPENED - 5..OPENED + 5),
            prop::sample::select(vec!["p", "q", "r"]),
        )
            .prop_map(
                |(target, cluster, radius, state, decided_at, id)| OtherOperation {
                    id: id.into(),
                    action: "a".into(),
                    target: target.into(),
                    target_cluster: cluster.map(Into::into),
                    blast_radius: radius,
                    state,
                    created_at: 0,
                    decided_at,
                },
            )
    }

    proptest! {
        /// People's approval stands exactly while every fact it rests on
        /// held; otherwise it is a rejection that keeps the `human` gate
        /// passed and names each gate whose fact moved.
        #[test]
        fn a_people_approval_stands_exactly_while_its_facts_hold(
            cited in prop::option::of(1..4_u32),
            sop in any_sop(),
            status in any_status(),
            cluster in prop::sample::select(vec!["c1", "c2"]),
            radius in any_radius(),
            others in prop::collection::vec(any_other(), 0..6),
        ) {
            let spec = gate_spec(radius);
            let target = status.map(|s| node(s, cluster));
            let facts = at(&spec, target.as_ref(), sop, &others);
            let sop_holds = cited.is_none()
                || sop == cited.map(|version| SopAtCommit { version, retired: false });
            let target_holds = status == Some(TargetStatus::Online);
            let none_approved = !others.iter().any(|o| {
                o.id != "p"
                    && o.state == ProposalState::Approved
                    && o.decided_at.is_some_and(|t| t >= OPENED)
                    && crate::gates::scopes_overlap(&spec, target.as_ref(), o)
            });
            let decided = final_approval(people_approved(cited), &facts);
            if sop_holds && target_holds && none_approved {
                prop_assert_eq!(decided, people_approved(cited));
            } else {
                prop_assert_eq!(decided.outcome, DecisionOutcome::Reject);
                prop_assert!(decided.gates.iter().any(|g| g.gate == HUMAN && g.passed));
                for (holds, gate) in [
                    (sop_holds, SOP),
                    (target_holds, TARGET_STATE),
                    (none_approved, NO_PARALLEL_OPERATION),
                ] {
                    let failed = decided.gates.iter().any(|g| g.gate == gate && !g.passed);
                    prop_assert_eq!(failed, !holds, "{}", gate);
                    prop_assert_eq!(decided.reason.contains(gate), !holds, "{}", decided.reason);
                }
            }
        }

        /// A rejection people reached (or an expiry) is never touched.
        #[test]
        fn a_people_rejection_stands_whatever_the_facts(
            status in any_status(),
            sop in any_sop(),
            others in prop::collection::vec(any_other(), 0..4),
        ) {
            let spec = gate_spec(crate::BlastRadius::SingleDevice);
            let target = status.map(|s| node(s, "c1"));
            let rejection = Decision {
                route_id: Some("r".into()),
                ..decision(DecisionOutcome::Reject, Some(2))
            };
            prop_assert_eq!(
                final_approval(rejection.clone(), &at(&spec, target.as_ref(), sop, &others)),
                rejection
            );
        }

        /// Opening an escalation never changes a terminal proposal, and only
        /// a proposal under review escalates.
        #[test]
        fn an_escalation_opens_only_from_review(state in any_state()) {
            match escalating("p", state) {
                Recording::Record(next) => {
                    prop_assert_eq!(next, ProposalState::Escalated);
                    prop_assert_eq!(state, ProposalState::Reviewing);
                }
                Recording::Discard => prop_assert!(
                    state.is_terminal() || state == ProposalState::Escalated
                ),
                Recording::Stale(_) => prop_assert!(!state.is_terminal()),
            }
        }
    }
}
