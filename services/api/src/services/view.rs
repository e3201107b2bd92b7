//! How a proposal is shown to a caller: as the caller's credential may see
//! it (agents get the terse view), an ESCALATED one with its escalation's
//! gate results, route and votes, and an approval with its signed receipt.

use std::sync::Arc;

use countersign_domain::{
    Millis, Proposal, ProposalState,
    audit::SigningKey,
    receipt::{DEFAULT_RECEIPT_TTL_MS, Receipt},
};
use countersign_proto::{
    OrStatus,
    convert::{escalation::escalated_to_proto, proposal_to_proto, receipt_to_proto},
    v1,
};
use countersign_store::Escalations;
use tonic::Status;

/// Signs approvals' receipts with the checkpoint key; without a key, no
/// approval carries one.
#[derive(Clone)]
pub struct Receipts {
    key: Option<SigningKey>,
    ttl_ms: Millis,
}

impl Receipts {
    pub fn new(key: Option<SigningKey>) -> Self {
        Receipts {
            key,
            ttl_ms: DEFAULT_RECEIPT_TTL_MS,
        }
    }

    /// `wire`, the wire form of `proposal`, with its approval's receipt.
    fn attach(&self, proposal: &Proposal, mut wire: v1::Proposal) -> v1::Proposal {
        if let (Some(key), Some(decision)) = (&self.key, wire.decision.as_mut())
            && let Some(receipt) = Receipt::issue(key, proposal, self.ttl_ms)
        {
            decision.receipt = Some(receipt_to_proto(&receipt));
        }
        wire
    }
}

/// The one way services show a proposal.
#[derive(Clone)]
pub struct Views {
    escalations: Arc<dyn Escalations>,
    receipts: Receipts,
}

impl Views {
    pub fn new(escalations: Arc<dyn Escalations>, receipts: Receipts) -> Self {
        Views {
            escalations,
            receipts,
        }
    }

    /// `proposal` as `agent_viewer` may see it; an ESCALATED one carries its
    /// escalation (read here) in place of a decision.
    pub async fn proposal(
        &self,
        proposal: &Proposal,
        agent_viewer: bool,
    ) -> Result<v1::Proposal, Status> {
        if proposal.state != ProposalState::Escalated {
            return Ok(self.decided(proposal, agent_viewer));
        }
        let record = self
            .escalations
            .get_escalation(&proposal.tenant, &proposal.id)
            .await
            .or_status()?;
        Ok(match record {
            Some(r) if r.proposal.state == ProposalState::Escalated => {
                escalated_to_proto(&r.proposal, &r.escalation, &r.votes, agent_viewer)
            }
            // Decided since it was read: the newer view.
            Some(r) => self.decided(&r.proposal, agent_viewer),
            None => self.decided(proposal, agent_viewer),
        })
    }

    /// A proposal that is not ESCALATED, with its receipt if approved.
    pub fn decided(&self, proposal: &Proposal, agent_viewer: bool) -> v1::Proposal {
        self.receipts
            .attach(proposal, proposal_to_proto(proposal, agent_viewer))
    }
}
