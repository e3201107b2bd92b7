//! An event as handed to watchers, with its wire form built once per view.

use std::sync::OnceLock;

use countersign_domain::{Event, ProposalState};
use countersign_proto::{
    convert::event::{escalated_notification, notification},
    v1,
};
use countersign_store::{EscalationRecord, Escalations};

pub struct Published {
    pub event: Event,
    /// For an event that left its proposal ESCALATED: its escalation and the
    /// votes so far, shown as the proposal's waiting decision.
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

    /// The notification as this viewer may see it (agents: the terse view).
    pub fn notification(&self, agent_viewer: bool) -> &v1::Notification {
        let cell = if agent_viewer {
            &self.agent
        } else {
            &self.full
        };
        cell.get_or_init(|| match &self.waiting {
            Some(w) => escalated_notification(&self.event, &w.escalation, &w.votes, agent_viewer),
            None => notification(&self.event, agent_viewer),
        })
    }
}

/// The escalation of an event that left its proposal ESCALATED (its votes
/// as they are now). None for any other event, and when it cannot be read:
/// the event then goes out without it rather than being held up.
pub async fn waiting_for(store: &dyn Escalations, event: &Event) -> Option<EscalationRecord> {
    if event.proposal.state != ProposalState::Escalated {
        return None;
    }
    match store
        .get_escalation(&event.proposal.tenant, &event.proposal.id)
        .await
    {
        Ok(record) => record,
        Err(error) => {
            tracing::warn!(%error, proposal = %event.proposal.id, "escalation of an event unreadable: sent without it");
            None
        }
    }
}
