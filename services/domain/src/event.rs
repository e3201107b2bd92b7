//! Events: every state change of a proposal, written in the same transaction
//! as the change and numbered twice, in commit order: by its tenant's own
//! cursor (what the tenant's watchers see and resume from) and by its position
//! in the whole log (the order the fan-out reads every tenant's events in).

use crate::{Millis, Proposal, ProposalState};

crate::named_enum! {
    pub enum EventKind as "event kind" {
        Submitted => "SUBMITTED",
        /// A review handed back to the queue (REVIEWING → PENDING).
        Requeued => "REQUEUED",
        ReviewStarted => "REVIEW_STARTED",
        Approved => "APPROVED",
        Rejected => "REJECTED",
        Cancelled => "CANCELLED",
        TimedOut => "TIMED_OUT",
        /// Identical retries of a rejected proposal were answered from the
        /// suppression cache (one event per batch of retries).
        Suppressed => "SUPPRESSED",
        /// This rejection was the operator's K-th within the breaker window:
        /// their further submissions are refused until it passes or is reset.
        BreakerTripped => "BREAKER_TRIPPED",
        /// The gates ran and a route sent the proposal to people
        /// (REVIEWING → ESCALATED).
        Escalated => "ESCALATED",
        /// A person voted on an escalated proposal.
        Vote => "VOTE",
    }
}

impl EventKind {
    /// Whether this event ends its proposal.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            EventKind::Approved | EventKind::Rejected | EventKind::Cancelled | EventKind::TimedOut
        )
    }
}

/// One logged event, with its proposal as the event left it.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// The tenant's own cursor: 1, 2, 3… over its events only, so it tells
    /// nothing of other tenants' activity.
    pub cursor: u64,
    /// The place in the whole log, every tenant's events together; internal
    /// (the fan-out's read position), never shown to a tenant.
    pub position: u64,
    pub kind: EventKind,
    /// When the change committed.
    pub created_at: Millis,
    pub proposal: Proposal,
}

impl Event {
    pub fn tenant(&self) -> &str {
        &self.proposal.tenant
    }

    /// Builds the event's view of `current` (the proposal as stored now): the
    /// state the event recorded, and the decision and cancel reason only once
    /// that state is terminal.
    pub fn at(
        position: u64,
        cursor: u64,
        kind: EventKind,
        state: ProposalState,
        created_at: Millis,
        mut current: Proposal,
    ) -> Event {
        current.state = state;
        current.updated_at = created_at;
        if !state.is_terminal() {
            current.decision = None;
        }
        if state != ProposalState::Cancelled {
            current.cancel_reason = None;
        }
        Event {
            cursor,
            position,
            kind,
            created_at,
            proposal: current,
        }
    }
}

/// What the event log still holds: of one tenant, in its own cursors, or of
/// the whole log, in positions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EventHorizon {
    /// Every event up to and including this cursor has been pruned (0: none).
    pub pruned_through: u64,
    /// The newest cursor written (0: none yet).
    pub latest: u64,
}

impl EventHorizon {
    /// Whether resuming after `cursor` would miss pruned events.
    pub fn is_pruned(&self, after: u64) -> bool {
        after != 0 && after < self.pruned_through
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_four_endings_are_terminal() {
        for &kind in EventKind::ALL {
            let terminal = matches!(
                kind,
                EventKind::Approved
                    | EventKind::Rejected
                    | EventKind::Cancelled
                    | EventKind::TimedOut
            );
            assert_eq!(kind.is_terminal(), terminal, "{kind}");
        }
    }

    #[test]
    fn resuming_before_the_pruned_range_is_refused_but_zero_always_works() {
        let horizon = EventHorizon {
            pruned_through: 100,
            latest: 500,
        };
        assert!(horizon.is_pruned(1));
        assert!(horizon.is_pruned(99));
        assert!(!horizon.is_pruned(100), "everything after 100 is kept");
        assert!(!horizon.is_pruned(0), "0 means the start of what is kept");
        assert!(!EventHorizon::default().is_pruned(1));
    }
}
