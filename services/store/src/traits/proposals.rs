use async_trait::async_trait;
use countersign_domain::{Proposal, ProposalSpec};

use crate::{NewProposal, Result, SubmitOutcome};

/// Proposals as their submitters see them: submit, look up, cancel.
#[async_trait]
pub trait Proposals: Send + Sync + 'static {
    /// Stores a PENDING proposal, honouring its idempotency key.
    async fn insert_proposal(&self, new: NewProposal) -> Result<SubmitOutcome>;
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
