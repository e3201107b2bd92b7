//! Events on the wire: the notifications of `NotificationService.Watch`.

use countersign_domain::{
    Event, EventKind, Millis,
    escalation::{Escalation, Vote},
};

use super::{escalation::escalated_to_proto, proposal_to_proto, timestamp};
use crate::v1;

pub fn kind_to_proto(kind: EventKind) -> v1::EventKind {
    match kind {
        EventKind::Submitted => v1::EventKind::Submitted,
        EventKind::Requeued => v1::EventKind::Requeued,
        EventKind::ReviewStarted => v1::EventKind::ReviewStarted,
        EventKind::Approved => v1::EventKind::Approved,
        EventKind::Rejected => v1::EventKind::Rejected,
        EventKind::Cancelled => v1::EventKind::Cancelled,
        EventKind::TimedOut => v1::EventKind::TimedOut,
        EventKind::Suppressed => v1::EventKind::Suppressed,
        EventKind::BreakerTripped => v1::EventKind::BreakerTripped,
        EventKind::Escalated => v1::EventKind::Escalated,
        EventKind::Vote => v1::EventKind::Vote,
    }
}

/// The notification for one event; agent viewers get the agent message only.
pub fn notification(event: &Event, agent_viewer: bool) -> v1::Notification {
    v1::Notification {
        cursor: event.cursor,
        event: kind_to_proto(event.kind) as i32,
        proposal: Some(proposal_to_proto(&event.proposal, agent_viewer)),
        emitted_at: Some(timestamp(event.created_at)),
        heartbeat: false,
    }
}

/// The notification for an event that left its proposal ESCALATED, with the
/// escalation's waiting decision (`escalation::escalated_to_proto`).
pub fn escalated_notification(
    event: &Event,
    escalation: &Escalation,
    votes: &[Vote],
    agent_viewer: bool,
) -> v1::Notification {
    v1::Notification {
        proposal: Some(escalated_to_proto(
            &event.proposal,
            escalation,
            votes,
            agent_viewer,
        )),
        ..notification(event, agent_viewer)
    }
}

/// A keep-alive at stream position `cursor`.
pub fn heartbeat(cursor: u64, now: Millis) -> v1::Notification {
    v1::Notification {
        cursor,
        event: v1::EventKind::Unspecified as i32,
        proposal: None,
        emitted_at: Some(timestamp(now)),
        heartbeat: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_event_kind_has_its_wire_name() {
        for &kind in EventKind::ALL {
            let wire = kind_to_proto(kind).as_str_name();
            assert_eq!(wire, format!("EVENT_KIND_{}", kind.as_str()));
        }
    }
}
