//! The proposal state machine. Terminal states never change.
//!
//! ```text
//! PENDING ⇄ REVIEWING → APPROVED | REJECTED | CANCELLED | TIMED_OUT
//!              ↓
//!          ESCALATED → APPROVED | REJECTED | CANCELLED      (people decide)
//! ```

crate::named_enum! {
    pub enum ProposalState as "proposal state" {
        Pending => "pending",
        Reviewing => "reviewing",
        Approved => "approved",
        Rejected => "rejected",
        Cancelled => "cancelled",
        TimedOut => "timed_out",
        /// The gates ran and a route sent the proposal to people.
        Escalated => "escalated",
    }
}

impl ProposalState {
    pub fn is_terminal(self) -> bool {
        !matches!(
            self,
            ProposalState::Pending | ProposalState::Reviewing | ProposalState::Escalated
        )
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
                | (Reviewing, Escalated)
                | (Escalated, Approved)
                | (Escalated, Rejected)
                | (Escalated, Cancelled)
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
    fn only_reviewed_or_escalated_proposals_are_approved() {
        for &from in ProposalState::ALL {
            assert_eq!(
                from.can_become(ProposalState::Approved),
                matches!(from, ProposalState::Reviewing | ProposalState::Escalated),
                "{from}"
            );
        }
    }

    #[test]
    fn only_a_review_escalates_and_people_end_an_escalation() {
        use ProposalState::*;
        for &from in ProposalState::ALL {
            assert_eq!(from.can_become(Escalated), from == Reviewing, "{from}");
        }
        assert!(!Escalated.is_terminal());
        for &to in ProposalState::ALL {
            assert_eq!(
                Escalated.can_become(to),
                matches!(to, Approved | Rejected | Cancelled),
                "escalated -> {to}: no requeue, no review timeout"
            );
        }
    }

    #[test]
    fn exactly_the_four_endings_are_terminal() {
        use ProposalState::*;
        for &st in ProposalState::ALL {
            assert_eq!(
                st.is_terminal(),
                matches!(st, Approved | Rejected | Cancelled | TimedOut),
                "{st}"
            );
        }
    }

    proptest::proptest! {
        /// Any walk along allowed moves: once terminal, nothing moves it, and
        /// every approval comes straight from a review or an escalation.
        #[test]
        fn walks_never_leave_a_terminal_state(
            steps in proptest::collection::vec(0..ProposalState::ALL.len(), 0..40)
        ) {
            let mut state = ProposalState::Pending;
            for step in steps {
                let next = ProposalState::ALL[step];
                if state.is_terminal() {
                    proptest::prop_assert!(!state.can_become(next), "{state} -> {next}");
                    continue;
                }
                if state.can_become(next) {
                    if next == ProposalState::Approved {
                        proptest::prop_assert!(matches!(
                            state,
                            ProposalState::Reviewing | ProposalState::Escalated
                        ));
                    }
                    state = next;
                }
            }
        }
    }

    #[test]
    fn states_round_trip_through_their_names() {
        for &st in ProposalState::ALL {
            assert_eq!(st.as_str().parse::<ProposalState>().unwrap(), st);
        }
    }
}
