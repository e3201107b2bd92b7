//! How a proposal is shown to a caller: as the caller's credential may see
//! it (agents get the terse view), an ESCALATED one with its escalation's
//! gate results, route and votes, and an approval with its signed receipt.

use std::sync::Arc;

use countersign_domain::{Millis, Proposal, ProposalState, audit::SigningKey, receipt::Receipt};
use countersign_proto::{
    OrStatus,
    convert::{escalation::escalated_to_proto, proposal_to_proto, receipt_to_proto},
    v1,
};
use countersign_store::Escalations;
use tonic::Status;

use crate::context::Caller;

/// Who a proposal is shown to: whether the credential is an agent's (the
/// terse view), and how long its tenant's receipts last (tenant policy).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Viewer {
    pub agent: bool,
    pub receipt_ttl_ms: Millis,
}

impl Viewer {
    pub fn of(caller: &Caller) -> Viewer {
        Viewer {
            agent: caller.principal.agent,
            receipt_ttl_ms: caller.tenant.policy.receipt_ttl_ms,
        }
    }
}

/// Signs approvals' receipts with the checkpoint key; without a key, no
/// approval carries one.
#[derive(Clone)]
pub struct Receipts {
    key: Option<SigningKey>,
}

impl Receipts {
    pub fn new(key: Option<SigningKey>) -> Self {
        Receipts { key }
    }

    /// Gives `wire`, the wire form of `proposal`, its approval's receipt,
    /// good for the viewer's tenant's receipt lifetime.
    pub fn attach(&self, proposal: &Proposal, wire: &mut v1::Proposal, viewer: Viewer) {
        if let (Some(key), Some(decision)) = (&self.key, wire.decision.as_mut())
            && let Some(receipt) = Receipt::issue(key, proposal, viewer.receipt_ttl_ms)
        {
            decision.receipt = Some(receipt_to_proto(&receipt));
        }
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

    /// `proposal` as `viewer` may see it; an ESCALATED one carries its
    /// escalation (read here) in place of a decision.
    pub async fn proposal(
        &self,
        proposal: &Proposal,
        viewer: Viewer,
    ) -> Result<v1::Proposal, Status> {
        if proposal.state != ProposalState::Escalated {
            return Ok(self.decided(proposal, viewer));
        }
        let record = self
            .escalations
            .get_escalation(&proposal.tenant, &proposal.id)
            .await
            .or_status()?;
        Ok(match record {
            Some(r) if r.proposal.state == ProposalState::Escalated => {
                escalated_to_proto(&r.proposal, &r.escalation, &r.votes, viewer.agent)
            }
            // Decided since it was read: the newer view.
            Some(r) => self.decided(&r.proposal, viewer),
            None => self.decided(proposal, viewer),
        })
    }

    /// A proposal that is not ESCALATED, with its receipt if approved.
    pub fn decided(&self, proposal: &Proposal, viewer: Viewer) -> v1::Proposal {
        let mut wire = proposal_to_proto(proposal, viewer.agent);
        self.receipts.attach(proposal, &mut wire, viewer);
        wire
    }

    /// What signs the receipts these views attach.
    pub fn receipts(&self) -> &Receipts {
        &self.receipts
    }
}
