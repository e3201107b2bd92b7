//! Whether a review's result may be recorded, decided inside the transaction
//! that would write it: from the proposal's state at that moment and, for an
//! approval, the facts it rests on as they are then. Both stores ask
//! [`recording`] for every result they are handed; no other path writes a
//! decision.

use crate::{Decision, DecisionOutcome, ProposalState, TargetStatus};

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
        && let Some(why) = approval_stale_because(decision, facts)
    {
        return Recording::Stale(why);
    }
    Recording::Record(next)
}

/// Why an approval's facts no longer hold at commit; `None` while they do.
fn approval_stale_because(decision: &Decision, facts: &FactsAtCommit<'_>) -> Option<String> {
    let sop_id = decision.sop_id.as_deref().unwrap_or_default();
    if let Some(version) = decision.sop_version {
        match facts.sop {
            Some(SopAtCommit { retired: true, .. }) => {
                return Some(format!("{sop_id} was retired during the review"));
            }
            Some(SopAtCommit { version: now, .. }) if now != version => {
                return Some(format!(
                    "{sop_id} changed during the review (v{version} → v{now})"
                ));
            }
            Some(_) => {}
            None => return Some(format!("{sop_id} vanished during the review")),
        }
    }
    let target = facts.target;
    match facts.target_status {
        Some(TargetStatus::Online) => None,
        Some(other) => Some(format!("target {target} became {other} during the review")),
        None => Some(format!("target {target} vanished during the review")),
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
}
