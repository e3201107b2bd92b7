//! The proposal state machine. Terminal states never change.

crate::named_enum! {
    pub enum ProposalState as "proposal state" {
        Pending => "pending",
        Reviewing => "reviewing",
        Approved => "approved",
        Rejected => "rejected",
        Cancelled => "cancelled",
        TimedOut => "timed_out",
    }
}

impl ProposalState {
    pub fn is_terminal(self) -> bool {
        !matches!(self, ProposalState::Pending | ProposalState::Reviewing)
    }

    /// The only moves a proposal may make.
    pub fn can_become(self, next: ProposalState) -> bool {
        use ProposalState::*;
        matches!(
            (self, next),
            (Pending, Reviewing)
                | (Pending, Cancelled)
                | (Pending, Rejected)
                | (Reviewing, Approved)
                | (Reviewing, Rejected)
                | (Reviewing, Cancelled)
                | (Reviewing, TimedOut)
                | (Reviewing, Pending)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_states_never_change() {
        for &from in ProposalState::ALL.iter().filter(|s| s.is_terminal()) {
            for &to in ProposalState::ALL {
                assert!(!from.can_become(to), "{from} -> {to}");
            }
        }
    }

    #[test]
    fn only_reviewing_proposals_are_approved() {
        for &from in ProposalState::ALL {
            assert_eq!(
                from.can_become(ProposalState::Approved),
                from == ProposalState::Reviewing,
                "{from}"
            );
        }
    }

    #[test]
    fn states_round_trip_through_their_names() {
        for &st in ProposalState::ALL {
            assert_eq!(st.as_str().parse::<ProposalState>().unwrap(), st);
        }
    }
}
