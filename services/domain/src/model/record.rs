//! What a decision records of its model review: which profile sent it to
//! which endpoint and model, what came back, how long it took and what it
//! cost. People see it; agent credentials never do (`Decision::for_agent`).
//! It is part of the decision's audit record (`AuditRecord::model`), so the
//! log's chain covers it beside the `model` gate's result.

use serde::{Deserialize, Serialize};

use super::{ModelOutcome, TokenUsage};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelReview {
    /// The tenant's profile that asked for the review.
    pub profile_id: String,
    /// The operator's name for the endpoint, and the model it serves.
    pub endpoint: String,
    pub model: String,
    /// `approve`, `reject` or `unsure`, or the failure: `timeout`,
    /// `provider_error`, `malformed`, `over_budget` ([`ModelOutcome::verdict`]).
    pub verdict: String,
    pub latency_ms: u64,
    pub usage: TokenUsage,
}

impl ModelReview {
    /// The record of a review by `profile_id`'s endpoint that came to `outcome`.
    pub fn new(
        profile_id: &str,
        endpoint: &str,
        model: &str,
        outcome: &ModelOutcome,
        latency_ms: u64,
        usage: TokenUsage,
    ) -> ModelReview {
        ModelReview {
            profile_id: profile_id.to_owned(),
            endpoint: endpoint.to_owned(),
            model: model.to_owned(),
            verdict: outcome.verdict().to_owned(),
            latency_ms,
            usage,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Failure, parse_reply};

    #[test]
    fn the_record_names_the_verdict_or_the_failure() {
        let cases = [
            (
                ModelOutcome::Replied(parse_reply(r#"{"verdict": "approve"}"#)),
                "approve",
            ),
            (
                ModelOutcome::Replied(parse_reply("Decision: reject")),
                "reject",
            ),
            (
                ModelOutcome::Replied(parse_reply("approve with caveats")),
                "unsure",
            ),
            (ModelOutcome::Failed(Failure::Timeout), "timeout"),
            (
                ModelOutcome::Failed(Failure::ProviderError),
                "provider_error",
            ),
            (ModelOutcome::Failed(Failure::Malformed), "malformed"),
            (ModelOutcome::Failed(Failure::OverBudget), "over_budget"),
        ];
        for (outcome, verdict) in cases {
            let usage = TokenUsage {
                prompt: 812,
                completion: 9,
                cached_prompt: 768,
            };
            let review = ModelReview::new("db", "local", "qwen", &outcome, 42, usage);
            assert_eq!(review.verdict, verdict, "{outcome:?}");
            assert_eq!((review.latency_ms, review.usage), (42, usage));
        }
    }
}
