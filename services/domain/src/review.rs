//! Turning a verdict (or a failure) into the decision that is stored.
//! The only way to an approving decision is [`decide`] with a verdict that
//! [`Verdict::approves`]; every other constructor here rejects or times out.

use crate::{
    Millis,
    decision::{AGENT_REFUSAL, Decision, DecisionOutcome, GateResult},
    gates::{GateSpec, REVIEW, Verdict},
};

pub const AGENT_APPROVED: &str = "Approved by review.";
pub const AGENT_TIMED_OUT: &str = "The review did not finish in time. Do not retry this action or a variation of it; ask a human to look.";
pub const REVIEW_FAILED: &str = "review failed";

/// Who reviewed and when.
#[derive(Debug, Clone)]
pub struct ReviewStamp {
    pub reviewer: String,
    pub decided_at: Millis,
    pub latency_ms: u64,
}

/// The reviewer's format: `Decision: <outcome>`, the gates one per line
/// (✓ passed, ✗ failed, with their detail), then the notes.
pub fn summary(outcome: &str, gates: &[GateResult], notes: &str) -> String {
    let mut out = format!("Decision: {outcome}\n\nGates\n");
    for g in gates {
        let mark = if g.passed { '✓' } else { '✗' };
        out.push_str(&format!("- {mark} {}: {}\n", g.gate, g.detail));
    }
    out.push_str("\nNotes\n");
    out.push_str(notes);
    out
}

/// The decision for a completed review of `spec` (the spec as the gates saw it).
pub fn decide(verdict: &Verdict, spec: &GateSpec, stamp: ReviewStamp) -> Decision {
    let approve = verdict.approves();
    let missing = if approve {
        Vec::new()
    } else {
        verdict.missing_gates()
    };
    let failed: Vec<String> = verdict
        .gates
        .iter()
        .filter(|g| !g.passed)
        .map(|g| format!("{}: {}", g.gate, g.detail))
        .collect();
    let (outcome, reason, agent_message, notes) = if approve {
        (
            DecisionOutcome::Approve,
            "every gate passed".to_owned(),
            AGENT_APPROVED.to_owned(),
            format!(
                "{} on {} ({}); roll back with: {}.",
                spec.action,
                spec.target,
                spec.blast_radius,
                verdict.rollback_path.as_deref().unwrap_or("-")
            ),
        )
    } else {
        let reason = if failed.is_empty() {
            "the review's result was incomplete".to_owned()
        } else {
            failed.join("; ")
        };
        (
            DecisionOutcome::Reject,
            reason,
            AGENT_REFUSAL.to_owned(),
            format!(
                "Missing gates: {}. Do not retry this action or a variation until they are fixed.",
                missing.join(", ")
            ),
        )
    };
    let outcome_word = if approve { "approve" } else { "reject" };
    Decision {
        outcome,
        summary: summary(outcome_word, &verdict.gates, &notes),
        reason,
        agent_message,
        sop_id: verdict.sop.as_ref().map(|s| s.id.clone()),
        sop_version: verdict.sop.as_ref().map(|s| s.version),
        rollback_path: verdict.rollback_path.clone(),
        gates: verdict.gates.clone(),
        missing_gates: missing,
        reviewer: stamp.reviewer,
        decided_at: stamp.decided_at,
        sequence: 0,
        digest: String::new(),
        review_latency_ms: stamp.latency_ms,
        route_id: None,
        votes: Vec::new(),
        model: None,
    }
}

/// The review could not be completed (repeated errors, a crash, bad data).
pub fn failed(why: &str, stamp: ReviewStamp) -> Decision {
    let gates = vec![GateResult {
        gate: REVIEW.to_owned(),
        passed: false,
        detail: format!("{REVIEW_FAILED}: {why}"),
    }];
    Decision {
        outcome: DecisionOutcome::Reject,
        reason: format!("{REVIEW_FAILED}: {why}"),
        agent_message: AGENT_REFUSAL.to_owned(),
        summary: summary(
            "reject",
            &gates,
            "The review could not be completed; unsure means reject.",
        ),
        gates,
        missing_gates: vec![REVIEW.to_owned()],
        sop_id: None,
        sop_version: None,
        rollback_path: None,
        reviewer: stamp.reviewer,
        decided_at: stamp.decided_at,
        sequence: 0,
        digest: String::new(),
        review_latency_ms: stamp.latency_ms,
        route_id: None,
        votes: Vec::new(),
        model: None,
    }
}

/// The review ran past its deadline.
pub fn timed_out(deadline_ms: u64, stamp: ReviewStamp) -> Decision {
    let gates = vec![GateResult {
        gate: REVIEW.to_owned(),
        passed: false,
        detail: format!("no decision within the review deadline of {deadline_ms} ms"),
    }];
    Decision {
        outcome: DecisionOutcome::TimedOut,
        reason: gates[0].detail.clone(),
        agent_message: AGENT_TIMED_OUT.to_owned(),
        summary: summary(
            "reject",
            &gates,
            "Timed out; a late result will be discarded.",
        ),
        gates,
        missing_gates: vec![REVIEW.to_owned()],
        sop_id: None,
        sop_version: None,
        rollback_path: None,
        reviewer: stamp.reviewer,
        decided_at: stamp.decided_at,
        sequence: 0,
        digest: String::new(),
        review_latency_ms: stamp.latency_ms,
        route_id: None,
        votes: Vec::new(),
        model: None,
    }
}
