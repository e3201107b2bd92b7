//! A group of submissions reviewed in the transaction that stores them: the
//! part both backends share. The backend reads the facts of every submission
//! of the group before it writes any (the earlier operations as the database
//! shows them), then takes the submissions one at a time: each is reviewed on
//! its facts with the group's earlier submissions added as the database would
//! show them once written (queued, or decided), so the group is decided as if
//! one writer took its submissions one at a time. A submission the review
//! decides goes in decided, its decision written beside it before the commit:
//! no queue entry, and no PENDING or REVIEWING state written only to be
//! overwritten (its events are still SUBMITTED, then the decision: the
//! insert's trigger writes both). One whose review does not conclude (a
//! route, a model, a panic, facts that could not be read) is stored PENDING
//! and queued like any other.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use countersign_domain::{
    Decision, Millis, Proposal, ProposalState,
    gates::{OtherOperation, ReviewFacts},
};

use crate::facts::add_blocking;
use crate::recording::{self, Write};
use crate::types::Submission;
use crate::{ReviewKey, SubmitReview};

/// The proposal each submission of `group` would be, for the facts read
/// before the group writes anything; `None` where no submission asks for a
/// review (no facts to read).
pub(crate) fn proposals<'a>(
    group: impl IntoIterator<Item = &'a Submission> + Clone,
    now: Millis,
) -> Option<Vec<Proposal>> {
    if group.clone().into_iter().all(|s| s.review.is_none()) {
        return None;
    }
    Some(
        group
            .into_iter()
            .map(|s| s.new.clone().into_pending(s.new.id.clone(), now))
            .collect(),
    )
}

/// Each proposal with its facts as read (`None` where they are malformed:
/// its review then leaves it PENDING).
pub(crate) fn with_facts(
    facts: Vec<crate::Result<ReviewFacts>>,
    proposals: Vec<Proposal>,
) -> Vec<Option<(ReviewFacts, Proposal)>> {
    facts
        .into_iter()
        .zip(proposals)
        .map(|(facts, proposal)| Some((facts.ok()?, proposal)))
        .collect()
}

/// What the review of one submission concluded, and what a later review of
/// the group must know of it.
pub(crate) struct Reviewed {
    /// The decision and the state it leaves; `None`: stored PENDING.
    pub decided: Option<(Decision, ProposalState)>,
    /// Its target's cluster, as its facts knew it.
    cluster: Option<String>,
    /// The proposal its facts were read for (none without facts).
    proposal: Option<Proposal>,
}

impl Reviewed {
    /// The state the submission's row goes in with, and when it was decided:
    /// its decided state when it is decided in this transaction, PENDING
    /// (queued) otherwise.
    pub fn stored_as(&self) -> (ProposalState, Option<Millis>) {
        match &self.decided {
            Some((decision, next)) => (*next, Some(decision.decided_at)),
            None => (ProposalState::Pending, None),
        }
    }
}

/// A submission decided in its group's transaction.
struct Decided {
    key: ReviewKey,
    operator: String,
    decision: Decision,
    next: ProposalState,
    review: Arc<dyn SubmitReview>,
}

/// One group's reviews, taken in order.
#[derive(Default)]
pub(crate) struct InOrder {
    /// What the group has stored so far, as a later review's facts see it.
    written: Vec<(String, OtherOperation)>,
    decided: Vec<Decided>,
}

impl InOrder {
    /// Reviews `submission` on its `facts` (with the proposal it would be)
    /// and the group's earlier submissions of its tenant; nothing to review
    /// (no review asked, or no facts) leaves it PENDING.
    pub fn review(
        &self,
        submission: &Submission,
        facts: Option<(ReviewFacts, Proposal)>,
    ) -> Reviewed {
        let (facts, proposal) = facts.unzip();
        let cluster = facts
            .as_ref()
            .and_then(|f| f.target.as_ref())
            .and_then(|t| t.cluster())
            .map(str::to_owned);
        let decided = match (&submission.review, facts, &proposal) {
            (Some(review), Some(mut facts), Some(proposal)) => {
                let tenant = &submission.new.tenant;
                add_blocking(
                    &mut facts,
                    self.written
                        .iter()
                        .filter(|(t, _)| t == tenant)
                        .map(|(_, other)| other),
                );
                // A review that panics leaves its submission to the
                // reviewers, as one that does not conclude does; the group,
                // and the committer that runs it, go on.
                let reviewed = catch_unwind(AssertUnwindSafe(|| review.review(proposal, &facts)));
                reviewed.ok().flatten().and_then(|decision| {
                    let next = recording::at_submission(&proposal.id, &decision, &facts)?;
                    Some((decision, next))
                })
            }
            _ => None,
        };
        Reviewed {
            decided,
            cluster,
            proposal,
        }
    }

    /// `submission`, reviewed as `reviewed`, was stored at `now`: the
    /// proposal it is (decided, or PENDING), which later reviews of the
    /// group see.
    pub fn stored(&mut self, submission: &Submission, reviewed: Reviewed, now: Millis) -> Proposal {
        let (state, decided_at) = reviewed.stored_as();
        let Reviewed {
            decided,
            cluster,
            proposal,
        } = reviewed;
        let new = &submission.new;
        let mut proposal =
            proposal.unwrap_or_else(|| new.clone().into_pending(new.id.clone(), now));
        let id = proposal.id.clone();
        self.written.push((
            proposal.tenant.clone(),
            OtherOperation {
                id: id.clone(),
                action: proposal.spec.action.clone(),
                target: proposal.spec.target.clone(),
                target_cluster: cluster,
                blast_radius: proposal.spec.blast_radius,
                state,
                created_at: now,
                decided_at,
            },
        ));
        if let (Some((decision, next)), Some(review)) = (decided, &submission.review) {
            proposal.state = next;
            proposal.decision = Some(decision.clone());
            self.decided.push(Decided {
                key: ReviewKey {
                    tenant: proposal.tenant.clone(),
                    id,
                },
                operator: proposal.spec.operator.clone(),
                decision,
                next,
                review: review.clone(),
            });
        }
        proposal
    }

    /// The decisions to write before the commit, each beside a proposal
    /// stored in its decided state already (no state to change).
    pub fn writes(&self) -> Vec<Write<'_>> {
        self.decided
            .iter()
            .map(|d| Write {
                key: &d.key,
                decision: &d.decision,
                prev: d.next,
                next: d.next,
                operator: d.operator.clone(),
            })
            .collect()
    }

    /// Whether any submission of the group was decided.
    pub fn decides_any(&self) -> bool {
        !self.decided.is_empty()
    }

    /// The group committed: each review hears of the decision it gave.
    pub fn committed(&self) {
        for d in &self.decided {
            d.review.recorded(&d.decision);
        }
    }
}
