//! The outcome of a review, as stored and shown.

use serde::{Deserialize, Serialize};

use crate::{Millis, ProposalState, escalation::Vote, model::ModelReview};

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
    /// The model's review, where a tenant's profile asked for one (none: no
    /// model reviewed it). Kept beside the decision and in its audit record,
    /// which the log's chain covers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelReview>,
}

/// What an agent credential is told of any refusal: fixed and non-diagnostic.
pub const AGENT_REFUSAL: &str =
    "Rejected by review. Do not retry this action or a variation of it; ask a human to look.";

impl Decision {
    /// The view an agent credential gets: no reason, no gate details, no
    /// missing-gate names, no votes (nor their comments), no model review.
    pub fn for_agent(&self) -> Decision {
        Decision {
            reason: String::new(),
            gates: Vec::new(),
            missing_gates: Vec::new(),
            summary: String::new(),
            votes: Vec::new(),
            model: None,
            ..self.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{
        model::{ModelReview, TokenUsage},
        review::{ReviewStamp, failed},
    };

    #[test]
    fn an_agent_sees_no_model_review() {
        let stamp = ReviewStamp {
            reviewer: "w".into(),
            decided_at: 1,
            latency_ms: 0,
        };
        let mut reviewed = failed("the SOP covers restarts, not failovers", stamp);
        reviewed.model = Some(ModelReview {
            profile_id: "db-changes".into(),
            endpoint: "local".into(),
            model: "qwen2.5-7b-instruct".into(),
            verdict: "reject".into(),
            latency_ms: 840,
            usage: TokenUsage::default(),
        });
        let agent = reviewed.for_agent();
        assert_eq!(agent.model, None);
        let json = serde_json::to_string(&agent).unwrap();
        for hidden in ["db-changes", "local", "qwen", "failovers"] {
            assert!(!json.contains(hidden), "{hidden}: {json}");
        }
        assert_eq!(agent.agent_message, reviewed.agent_message);
    }
}
