//! What the inbox (`ListEscalations`) keeps of a tenant's open escalations.
//! Each filter applies a rule that has its home elsewhere: an action glob as
//! a route matches one ([`glob_matches`]), operators compared as persons
//! ([`same_person`]), and "awaiting me" as `Resolve` would admit a vote
//! ([`awaits`]).

use super::{
    Escalation,
    route::{action_glob_ok, glob_matches},
    same_person,
    vote::{Subject, Vote, Voter, awaits},
};
use crate::{
    Millis, Proposal,
    validation::{FieldError, MAX_SHORT_TEXT, MAX_TARGET, identifier, validate_sop_id},
};

/// Only the escalations awaiting `voter`'s vote at `now`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Awaiting {
    pub voter: Voter,
    pub now: Millis,
}

/// The filters as a caller gives them; empty text filters nothing.
#[derive(Debug, Clone, Default)]
pub struct InboxFilterInput<'a> {
    pub action: &'a str,
    pub target: &'a str,
    pub route_id: &'a str,
    pub operator: &'a str,
    pub awaiting: Option<Awaiting>,
}

/// Checked filters: an escalation is kept when it passes every one that is
/// set. The default keeps every escalation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InboxFilter {
    /// An action glob: `*` any run of characters, `?` exactly one.
    pub action: Option<String>,
    /// The target's id, exactly.
    pub target: Option<String>,
    /// The id of the route that opened the escalation, exactly.
    pub route_id: Option<String>,
    /// The proposal's operator, compared as persons are.
    pub operator: Option<String>,
    pub awaiting: Option<Awaiting>,
}

/// Checks each filter that is set; the first broken one is returned, naming
/// its field (`action`, `target`, `route_id`, `operator`).
pub fn validate_filter(input: InboxFilterInput<'_>) -> Result<InboxFilter, FieldError> {
    fn set(value: &str) -> Option<String> {
        (!value.is_empty()).then(|| value.to_owned())
    }
    if !input.action.is_empty() {
        action_glob_ok("action", input.action, "it")?;
    }
    if !input.target.is_empty() {
        identifier("target", input.target, MAX_TARGET)?;
    }
    if !input.route_id.is_empty() {
        validate_sop_id("route_id", input.route_id)?;
    }
    if !input.operator.is_empty() {
        identifier("operator", input.operator, MAX_SHORT_TEXT)?;
    }
    Ok(InboxFilter {
        action: set(input.action),
        target: set(input.target),
        route_id: set(input.route_id),
        operator: set(input.operator),
        awaiting: input.awaiting,
    })
}

impl InboxFilter {
    /// Whether it keeps every escalation.
    pub fn is_empty(&self) -> bool {
        *self == InboxFilter::default()
    }

    /// Whether `proposal`, escalated as `escalation` with `votes` so far, is
    /// kept.
    pub fn keeps(&self, proposal: &Proposal, escalation: &Escalation, votes: &[Vote]) -> bool {
        let spec = &proposal.spec;
        self.action
            .as_deref()
            .is_none_or(|glob| glob_matches(glob, &spec.action))
            && self.target.as_deref().is_none_or(|t| t == spec.target)
            && self
                .route_id
                .as_deref()
                .is_none_or(|r| r == escalation.route_id)
            && self
                .operator
                .as_deref()
                .is_none_or(|o| same_person(o, &spec.operator))
            && self.awaiting.as_ref().is_none_or(|a| {
                awaits(
                    &a.voter.caller(),
                    &Subject::of(proposal),
                    Some(escalation),
                    votes,
                    a.now,
                )
            })
    }
}
