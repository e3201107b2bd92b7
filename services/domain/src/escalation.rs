//! Human countersignature: routes that send a reviewed proposal to people
//! instead of deciding it, the four-eyes rules for their votes, and the
//! decision that ends an escalation (approved by N distinct people, rejected
//! by one, or expired). Pure functions; the clock is an argument.
//!
//! - [`route`]: what a route is, which proposals it matches, the strictest of
//!   several.
//! - [`decide`]: whether a reviewed proposal escalates ([`after_gates`]), the
//!   open [`Escalation`], and its ending ([`Escalation::conclude`]).
//! - [`vote`]: votes and `Resolve`'s checks ([`resolve`]), and whether a
//!   proposal awaits a caller's vote ([`awaits`]).
//! - [`inbox`]: what the inbox keeps of the open escalations.

pub mod decide;
pub mod inbox;
pub mod route;
pub mod vote;

pub use decide::{
    AGENT_AWAITING_HUMAN, AGENT_HUMAN_APPROVED, AfterGates, Escalation, after_gates, after_review,
};
pub use inbox::{Awaiting, InboxFilter, InboxFilterInput, validate_filter};
pub use route::{
    Route, RouteInput, RouteMatch, glob_matches, route_for, strictest, validate_route,
};
pub use vote::{
    Ballot, Caller, MAX_COMMENT, Resolution, ResolveError, Rule, Subject, Tally, Verdict, Vote,
    Voter, awaits, resolve, tally,
};

/// The one form persons and operators are compared in: surrounding
/// whitespace trimmed, ASCII letters lower-cased.
pub fn normalize_person(name: &str) -> String {
    name.trim().to_ascii_lowercase()
}

/// Whether two names are the same person. A blank name is nobody's.
pub fn same_person(a: &str, b: &str) -> bool {
    let a = normalize_person(a);
    !a.is_empty() && a == normalize_person(b)
}

#[cfg(test)]
mod tests;
