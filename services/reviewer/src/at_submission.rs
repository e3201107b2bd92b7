//! The review a waiting submission gets inside its own transaction
//! (`Proposals::submit_reviewed`): the same gates, routes and model profiles
//! a worker applies ([`conclude`]), on the facts that transaction reads. It
//! decides only what the gates decide alone; where people or a model are to
//! be asked, or the review panicked, the proposal is queued for the workers,
//! who review it again from the start. A decision it gives is recorded with
//! the submission, so there is no lease, no REVIEWING state written and
//! overwritten, and no second transaction.

use std::sync::Arc;

use countersign_domain::{Decision, Proposal, gates::ReviewFacts, review::ReviewStamp};
use countersign_store::SubmitReview;

use crate::{
    ReviewerConfig,
    worker::{conclude, now_ms, record_metrics},
};

/// The reviewer of submissions decided as they are stored.
pub struct AtSubmission {
    /// The decisions' reviewer: `NAME/submit`.
    name: String,
    config: Arc<ReviewerConfig>,
}

impl AtSubmission {
    pub fn new(config: &ReviewerConfig) -> AtSubmission {
        AtSubmission {
            name: format!("{}/submit", config.name),
            config: Arc::new(config.clone()),
        }
    }
}

impl SubmitReview for AtSubmission {
    fn review(&self, proposal: &Proposal, facts: &ReviewFacts) -> Option<Decision> {
        let concluded = conclude(&self.config.evaluator, proposal, facts)?;
        let stamp = ReviewStamp {
            reviewer: self.name.clone(),
            decided_at: now_ms(),
            latency_ms: 0,
        };
        concluded.decided_alone(proposal, stamp)
    }

    fn recorded(&self, decision: &Decision) {
        record_metrics(decision);
    }
}
