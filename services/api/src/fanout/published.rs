//! An event as handed to watchers, with its wire form built once per view.

use std::sync::OnceLock;

use countersign_domain::{Event, ProposalState};
use countersign_proto::{
    convert::event::{escalated_notification, notification},
    v1,
};
use countersign_store::{EscalationRecord, Escalations};

use crate::services::{Receipts, Viewer};

pub struct Published {
    pub event: Event,
    /// For an event that left its proposal ESCALATED: its escalation and the
    /// votes as of the event, shown as the proposal's waiting decision.
    waiting: Option<EscalationRecord>,
    full: OnceLock<v1::Notification>,
    agent: OnceLock<v1::Notification>,
}

impl Published {
    pub fn new(event: Event) -> Self {
        Published::waiting(event, None)
    }

    /// `event` with the escalation [`waiting_for`] read for it.
    pub fn waiting(event: Event, waiting: Option<EscalationRecord>) -> Self {
        Published {
            event,
            waiting,
            full: OnceLock::new(),
            agent: OnceLock::new(),
        }
    }

    /// The notification as `viewer` may see it (agents: the terse view),
    /// an approval with its signed receipt, as `GetProposal` shows it. Built
    /// once per view: the watchers of an event share its tenant, and so its
    /// receipt lifetime.
    pub fn notification(&self, viewer: Viewer, receipts: &Receipts) -> &v1::Notification {
        let cell = if viewer.agent {
            &self.agent
        } else {
            &self.full
        };
        cell.get_or_init(|| match &self.waiting {
            Some(w) => escalated_notification(&self.event, &w.escalation, &w.votes, viewer.agent),
            None => {
                let mut wire = notification(&self.event, viewer.agent);
                if let Some(proposal) = wire.proposal.as_mut() {
                    receipts.attach(&self.event.proposal, proposal, viewer);
                }
                wire
            }
        })
    }
}

/// The escalation of an event that left its proposal ESCALATED, with the
/// votes as they stood at that event (`Escalations::escalation_at_event`):
/// the same whether the event goes out live or in a replay, however many
/// votes came after. None for any other event, and when it cannot be read:
/// the event then goes out without it rather than being held up.
pub async fn waiting_for(store: &dyn Escalations, event: &Event) -> Option<EscalationRecord> {
    if event.proposal.state != ProposalState::Escalated {
        return None;
    }
    match store
        .escalation_at_event(&event.proposal.tenant, &event.proposal.id, event.cursor)
        .await
    {
        Ok(record) => record,
        Err(error) => {
            tracing::warn!(%error, proposal = %event.proposal.id, "escalation of an event unreadable: sent without it");
            None
        }
    }
}
