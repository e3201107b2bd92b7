use async_trait::async_trait;
use countersign_domain::{
    Millis,
    escalation::{Ballot, Caller, Escalation, InboxFilter, ResolveError},
};

use crate::{EscalationRecord, RecordOutcome, Result, ReviewKey, Voted};

/// Escalated proposals: the reviewer opens them, people vote on them, the
/// janitor expires them.
#[async_trait]
pub trait Escalations: Send + Sync + 'static {
    /// Reviewer: moves each REVIEWING proposal to ESCALATED (ESCALATED event
    /// by trigger) and stores its escalation, in one transaction, in order.
    /// Fates as `record_decisions`: terminal or already ESCALATED ->
    /// `RecordOutcome::Discarded(state)`; otherwise a move the state machine
    /// refuses -> `Stale` (`domain::commit::escalating`).
    async fn open_escalations(
        &self,
        items: Vec<(ReviewKey, Escalation)>,
    ) -> Result<Vec<RecordOutcome>>;
    /// The tenant's ESCALATED proposals that `filter` keeps, oldest opened
    /// first, after the previous page's last (opened_at, proposal id), at
    /// most `limit`.
    async fn list_escalations(
        &self,
        tenant: &str,
        filter: &InboxFilter,
        after: Option<(Millis, String)>,
        limit: u32,
    ) -> Result<Vec<EscalationRecord>>;
    /// One proposal's escalation and votes; `None` if it is not the tenant's
    /// or was never escalated.
    async fn get_escalation(&self, tenant: &str, id: &str) -> Result<Option<EscalationRecord>>;
    /// [`Escalations::get_escalation`] with the votes as they stood at the
    /// tenant's event `cursor`, an ESCALATED or VOTE event of the proposal:
    /// those whose VOTE events are at or before it. What the review stream
    /// shows with that event, live or replayed, whatever came after.
    async fn escalation_at_event(
        &self,
        tenant: &str,
        id: &str,
        cursor: u64,
    ) -> Result<Option<EscalationRecord>>;
    /// Resolve, as one transaction that serializes against every other vote
    /// and decision of that proposal: reads the proposal (a missing or other
    /// tenant's one: `Ok(Err(ResolveError::NotFound))`), its escalation and
    /// votes; applies `domain::escalation::resolve(caller, subject, ...,
    /// ballot, now)`; on `Err` writes nothing and returns it (Expired: the
    /// store applies the expiry decision in the same transaction first);
    /// `Recorded` inserts the vote (VOTE event); `Decided` inserts the vote
    /// and writes the decision (with route_id and votes; an approval
    /// re-checked at commit by `domain::commit::final_approval`, a moved fact
    /// turning it into the rejection), the state change and its event,
    /// exactly once. The answer's `Decided` carries the decision as written.
    async fn cast_vote(
        &self,
        caller: Caller<'_>,
        proposal_id: &str,
        ballot: Ballot<'_>,
        now: Millis,
    ) -> Result<std::result::Result<Voted, ResolveError>>;
    /// Janitor: decides, as expired, up to `limit` escalations whose
    /// expires_at <= now (each in a transaction that re-reads its state);
    /// returns the keys decided.
    async fn expire_escalations(&self, now: Millis, limit: u32) -> Result<Vec<ReviewKey>>;
    /// The earliest expires_at of any open escalation (the janitor's timer).
    async fn next_expiry(&self) -> Result<Option<Millis>>;
    /// Open escalations by tenant (the gauge), by tenant name.
    async fn open_escalations_by_tenant(&self) -> Result<Vec<(String, u64)>>;
}
