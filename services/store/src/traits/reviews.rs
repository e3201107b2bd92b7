use async_trait::async_trait;
use countersign_domain::{Decision, Millis, Proposal, gates::ReviewFacts};

use crate::{BeginReview, OverdueReview, RecordOutcome, Result, ReviewKey, StoreError};

/// What the reviewers do to a proposal: begin its review, gather its facts,
/// record the decision, and find reviews that ran past their deadline.
#[async_trait]
pub trait Reviews: Send + Sync + 'static {
    /// Moves the PENDING proposals of `items` to REVIEWING (with their events)
    /// in one transaction; a REVIEWING one (redelivered) stays so and keeps its
    /// first start time. Answers in order.
    async fn begin_reviews(&self, items: &[ReviewKey]) -> Result<Vec<BeginReview>>;
    /// Everything the gates look at, as of now, for a batch, in order, from
    /// one snapshot where the backend has them: the outer error fails the
    /// whole batch, an inner one only its proposal.
    async fn review_facts_many(&self, proposals: &[Proposal]) -> Result<Vec<Result<ReviewFacts>>>;
    /// Writes the decision, the state change and its event in one transaction,
    /// only if the proposal is still open. Approvals are re-checked against the
    /// SOP and target as they are at commit.
    async fn record_decision(
        &self,
        tenant: &str,
        id: &str,
        decision: Decision,
    ) -> Result<RecordOutcome> {
        let key = ReviewKey {
            tenant: tenant.to_owned(),
            id: id.to_owned(),
        };
        let mut recorded = self.record_decisions(vec![(key, decision)]).await?;
        recorded
            .pop()
            .ok_or_else(|| StoreError::NotFound(format!("proposal `{id}`")))
    }
    /// [`Reviews::record_decision`] for many in one transaction, in order.
    async fn record_decisions(
        &self,
        items: Vec<(ReviewKey, Decision)>,
    ) -> Result<Vec<RecordOutcome>>;
    /// Reviews that started before `started_before` and are still REVIEWING.
    async fn overdue_reviews(
        &self,
        started_before: Millis,
        limit: u32,
    ) -> Result<Vec<OverdueReview>>;
}
