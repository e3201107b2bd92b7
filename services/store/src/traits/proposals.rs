use async_trait::async_trait;
use countersign_domain::{Proposal, ProposalSpec};

use std::sync::Arc;

use crate::{NewProposal, Result, SubmitOutcome, SubmitReview};

/// Proposals as their submitters see them: submit, look up, cancel.
#[async_trait]
pub trait Proposals: Send + Sync + 'static {
    /// Stores a PENDING proposal, honouring its idempotency key.
    async fn insert_proposal(&self, new: NewProposal) -> Result<SubmitOutcome>;
    /// Stores the proposal and runs `review` on it in the same transaction:
    /// decided there (the answer's proposal is terminal, with its
    /// decision), or, where `review` does not conclude, PENDING as
    /// [`Proposals::insert_proposal`] stores it. The idempotency key is
    /// honoured the same way.
    async fn submit_reviewed(
        &self,
        new: NewProposal,
        review: Arc<dyn SubmitReview>,
    ) -> Result<SubmitOutcome>;
    /// The earlier proposal that holds `spec`'s idempotency key, if it has the
    /// same spec (what [`Proposals::insert_proposal`] would answer,
    /// deduplicated); `AlreadyExists` if another spec holds it; `None` for a
    /// free key or none.
    async fn find_idempotent(&self, tenant: &str, spec: &ProposalSpec) -> Result<Option<Proposal>>;
    async fn get_proposal(&self, tenant: &str, id: &str) -> Result<Option<Proposal>>;
    /// PENDING or REVIEWING becomes CANCELLED; terminal is
    /// `FailedPrecondition`. With `key`, only what that key submitted: a
    /// proposal another key submitted (or none recorded) is then
    /// `PermissionDenied`, whatever its state.
    async fn cancel_proposal(
        &self,
        tenant: &str,
        id: &str,
        reason: &str,
        key: Option<&str>,
    ) -> Result<Proposal>;
}
