//! The outcome of a review, as stored and shown.

use serde::{Deserialize, Serialize};

use crate::{Millis, ProposalState, escalation::Vote};

crate::named_enum! {
    pub enum DecisionOutcome as "decision outcome" {
        Approve => "approve",
        Reject => "reject",
        TimedOut => "timed_out",
    }
}

impl DecisionOutcome {
    /// The state a proposal takes when a decision with this outcome is recorded.
    pub fn state(self) -> ProposalState {
        match self {
            DecisionOutcome::Approve => ProposalState::Approved,
            DecisionOutcome::Reject => ProposalState::Rejected,
            DecisionOutcome::TimedOut => ProposalState::TimedOut,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GateResult {
    pub gate: String,
    pub passed: bool,
    pub detail: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    #[serde(with = "crate::proposal::by_name::outcome")]
    pub outcome: DecisionOutcome,
    pub reason: String,
    pub agent_message: String,
    pub sop_id: Option<String>,
    pub sop_version: Option<u32>,
    pub rollback_path: Option<String>,
    pub gates: Vec<GateResult>,
    pub missing_gates: Vec<String>,
    pub reviewer: String,
    pub decided_at: Millis,
    pub summary: String,
    pub sequence: u64,
    pub digest: String,
    pub review_latency_ms: u64,
    /// The route that sent the proposal to people (none: it was never escalated).
    /// Absent from the JSON of a decision without one, so that JSON is unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route_id: Option<String>,
    /// The people's votes, in the order they were cast.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub votes: Vec<Vote>,
}

/// What an agent credential is told of any refusal: fixed and non-diagnostic.
pub const AGENT_REFUSAL: &str =
    "Rejected by review. Do not retry this action or a variation of it; ask a human to look.";

impl Decision {
    /// The view an agent credential gets: no reason, no gate details, no
    /// missing-gate names, no votes (nor their comments).
    pub fn for_agent(&self) -> Decision {
        Decision {
            reason: String::new(),
            gates: Vec::new(),
            missing_gates: Vec::new(),
            summary: String::new(),
            votes: Vec::new(),
            ..self.clone()
        }
    }
}
