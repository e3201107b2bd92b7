//! When a reviewed proposal goes to people instead of being decided, what
//! an open escalation keeps, and the decision that ends one.

use std::collections::BTreeMap;

use super::{
    route::{Route, route_for},
    vote::{Subject, Tally, Vote, tally},
};
use crate::{
    Millis,
    decision::{AGENT_REFUSAL, Decision, DecisionOutcome, GateResult},
    gates::{GATES, HUMAN, ReviewFacts, Verdict},
    model::ModelReview,
    review::{ReviewStamp, summary},
    role::Role,
};

/// What an agent credential is told while people decide.
pub const AGENT_AWAITING_HUMAN: &str = "Awaiting human approval.";
/// What an agent credential is told of a proposal people approved.
pub const AGENT_HUMAN_APPROVED: &str = "Approved by review and by people.";

/// What happens to a reviewed proposal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterGates<'a> {
    /// Decided as the gates say (`review::decide`): no route applies, or it
    /// failed a gate the route does not send to people.
    Decide,
    /// Sent to people under this route, instead of being decided.
    Escalate(&'a Route),
}

/// The step after the gates, under the route that applies (if any). It
/// escalates only when the gates are exactly the five, in order, and every
/// failed one is named in the route's `escalate_on` (read literally; with
/// none failed, a matching route always escalates). `target_state` and
/// `no_parallel_operation` never escalate, whatever the route says.
pub fn after_gates<'a>(verdict: &Verdict, route: Option<&'a Route>) -> AfterGates<'a> {
    let Some(route) = route else {
        return AfterGates::Decide;
    };
    let the_five = verdict.gates.len() == GATES.len()
        && verdict
            .gates
            .iter()
            .zip(GATES)
            .all(|(g, name)| g.gate == name);
    if the_five
        && verdict
            .gates
            .iter()
            .all(|g| g.passed || route.escalates(&g.gate))
    {
        AfterGates::Escalate(route)
    } else {
        AfterGates::Decide
    }
}

/// [`after_gates`] under the strictest of the tenant's `routes` that matches
/// the proposal and its target as the review saw them.
pub fn after_review<'a>(
    facts: &ReviewFacts,
    verdict: &Verdict,
    routes: &'a [Route],
) -> AfterGates<'a> {
    let none = BTreeMap::new();
    let labels = facts.target.as_ref().map_or(&none, |t| &t.labels);
    after_gates(verdict, route_for(routes, &facts.spec, labels))
}

/// An open escalation: the route's terms as they were when it opened (a later
/// change to the route does not move them) and what the review found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Escalation {
    pub route_id: String,
    pub approvals_required: u32,
    pub approver_roles: Vec<Role>,
    pub opened_at: Millis,
    pub expires_at: Millis,
    /// The five gates as the review left them.
    pub gates: Vec<GateResult>,
    pub sop_id: Option<String>,
    pub sop_version: Option<u32>,
    pub rollback_path: Option<String>,
    pub reviewer: String,
    pub review_latency_ms: u64,
    /// The model's review of the proposal before it went to people (none:
    /// no model reviewed it); the decision that ends the escalation keeps it.
    pub model: Option<ModelReview>,
}

/// How an escalation ends.
enum Ending<'v> {
    Approved(Vec<&'v Vote>),
    Rejected(&'v Vote),
    Expired { approvals: usize },
}

impl Escalation {
    /// The escalation of a reviewed proposal under `route`, opened when the
    /// review finished; the model stage sets `model` where a model reviewed
    /// the proposal.
    pub fn open(route: &Route, verdict: &Verdict, stamp: &ReviewStamp) -> Escalation {
        Escalation {
            route_id: route.id.clone(),
            approvals_required: route.approvals_required,
            approver_roles: route.approver_roles.clone(),
            opened_at: stamp.decided_at,
            expires_at: stamp.decided_at.saturating_add(route.expires_after_ms),
            gates: verdict.gates.clone(),
            sop_id: verdict.sop.as_ref().map(|s| s.id.clone()),
            sop_version: verdict.sop.as_ref().map(|s| s.version),
            rollback_path: verdict.rollback_path.clone(),
            reviewer: stamp.reviewer.clone(),
            review_latency_ms: stamp.latency_ms,
            model: None,
        }
    }

    /// Whether it has run out at `now`: from `expires_at` on, no vote counts.
    pub fn is_expired(&self, now: Millis) -> bool {
        now >= self.expires_at
    }

    /// Approvals needed; a stored 0 counts as 1, so no escalation approves
    /// without a person.
    fn required(&self) -> usize {
        self.approvals_required.max(1) as usize
    }

    /// What people are told while it is open: what it waits for, and which
    /// gates failed.
    pub fn waiting_reason(&self, votes: &[Vote], subject: &Subject<'_>) -> String {
        let approvals = tally(votes, subject, self.expires_at).approvals.len();
        let mut reason = format!(
            "awaiting human approval under route {}: {approvals} of {} approvals",
            self.route_id,
            self.required()
        );
        let failed = failed_details(&self.gates);
        if !failed.is_empty() {
            reason.push_str("; escalated with failed gates: ");
            reason.push_str(&failed.join("; "));
        }
        reason
    }

    /// Where `votes` and the clock leave the escalation: `None` while it is
    /// open, else the decision that ends it. Only votes cast before
    /// `expires_at` count ([`tally`]); any rejection rejects; the N-th
    /// distinct eligible approving person approves; otherwise, from
    /// `expires_at` on, it is rejected as expired with the `human` gate failed.
    pub fn conclude(&self, subject: &Subject<'_>, votes: &[Vote], now: Millis) -> Option<Decision> {
        let Tally {
            approvals,
            rejection,
        } = tally(votes, subject, self.expires_at);
        let ending = if let Some(vote) = rejection {
            Ending::Rejected(vote)
        } else if approvals.len() >= self.required() {
            Ending::Approved(approvals)
        } else if self.is_expired(now) {
            Ending::Expired {
                approvals: approvals.len(),
            }
        } else {
            return None;
        };
        Some(self.decision(subject, ending, votes, now))
    }

    fn decision(
        &self,
        subject: &Subject<'_>,
        ending: Ending<'_>,
        votes: &[Vote],
        now: Millis,
    ) -> Decision {
        let human = human_gate(&ending, self.required());
        let approve = matches!(ending, Ending::Approved(_));
        let mut gates = self.gates.clone();
        gates.push(human.clone());
        let failed = failed_details(&gates);
        let missing: Vec<String> = gates
            .iter()
            .filter(|g| !g.passed)
            .map(|g| g.gate.clone())
            .collect();
        let spec = subject.spec;
        let route = &self.route_id;
        let (outcome, reason, agent_message, notes) = match &ending {
            Ending::Approved(approvals) => {
                let mut reason = format!("{} under route {route}", human.detail);
                if !failed.is_empty() {
                    reason.push_str("; escalated with failed gates: ");
                    reason.push_str(&failed.join("; "));
                }
                let notes = format!(
                    "{} on {} ({}) approved by {} of {} required people under route {route}; roll back with: {}.",
                    spec.action,
                    spec.target,
                    spec.blast_radius,
                    approvals.len(),
                    self.required(),
                    self.rollback_path.as_deref().unwrap_or("-")
                );
                (
                    DecisionOutcome::Approve,
                    reason,
                    AGENT_HUMAN_APPROVED,
                    notes,
                )
            }
            Ending::Rejected(vote) => (
                DecisionOutcome::Reject,
                failed.join("; "),
                AGENT_REFUSAL,
                format!(
                    "Rejected by {} under route {route}. Do not retry this action or a variation until the reason is addressed.",
                    vote.person
                ),
            ),
            Ending::Expired { approvals } => (
                DecisionOutcome::Reject,
                failed.join("; "),
                AGENT_REFUSAL,
                format!(
                    "Nobody completed the approvals under route {route} in time ({approvals} of {}); expiry counts as a denial.",
                    self.required()
                ),
            ),
        };
        let word = if approve { "approve" } else { "reject" };
        Decision {
            outcome,
            summary: summary(word, &gates, &notes),
            reason,
            agent_message: agent_message.to_owned(),
            sop_id: self.sop_id.clone(),
            sop_version: self.sop_version,
            rollback_path: self.rollback_path.clone(),
            gates,
            missing_gates: missing,
            reviewer: self.reviewer.clone(),
            decided_at: now,
            sequence: 0,
            digest: String::new(),
            review_latency_ms: self.review_latency_ms,
            route_id: Some(self.route_id.clone()),
            votes: votes.to_vec(),
            model: self.model.clone(),
        }
    }
}

fn failed_details(gates: &[GateResult]) -> Vec<String> {
    gates
        .iter()
        .filter(|g| !g.passed)
        .map(|g| format!("{}: {}", g.gate, g.detail))
        .collect()
}

/// The `human` gate of an ending: passed "approved by a, b"; failed
/// "rejected by x: comment" or "expired: K of N approvals".
fn human_gate(ending: &Ending<'_>, required: usize) -> GateResult {
    let (passed, detail) = match ending {
        Ending::Approved(approvals) => {
            let people: Vec<&str> = approvals.iter().map(|v| v.person.as_str()).collect();
            (true, format!("approved by {}", people.join(", ")))
        }
        Ending::Rejected(vote) if vote.comment.trim().is_empty() => {
            (false, format!("rejected by {}", vote.person))
        }
        Ending::Rejected(vote) => (
            false,
            format!("rejected by {}: {}", vote.person, vote.comment.trim()),
        ),
        Ending::Expired { approvals } => (
            false,
            format!("expired: {approvals} of {required} approvals"),
        ),
    };
    GateResult {
        gate: HUMAN.to_owned(),
        passed,
        detail,
    }
}
