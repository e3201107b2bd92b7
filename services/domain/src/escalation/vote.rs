//! Votes, and the four-eyes rules of `Resolve` as one function ([`resolve`]).

use serde::{Deserialize, Serialize};

use super::{Escalation, route::DEFAULT_APPROVER_ROLES, same_person};
use crate::{
    Millis,
    decision::Decision,
    error::{ErrorKind, ServiceError},
    proposal::{Proposal, ProposalSpec},
    role::Role,
    state::ProposalState,
    validation::{FieldError, MAX_REASON},
};

crate::named_enum! {
    /// One person's verdict on an escalated proposal.
    #[derive(Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    pub enum Verdict as "verdict" {
        Approve => "approve",
        Reject => "reject",
    }
}

/// A recorded vote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Vote {
    /// The person behind the key, as the key records it.
    pub person: String,
    pub key_id: String,
    pub verdict: Verdict,
    pub comment: String,
    pub at: Millis,
}

/// Who resolves, from the credential (never from the request).
#[derive(Debug, Clone, Copy)]
pub struct Caller<'a> {
    pub tenant: &'a str,
    pub key_id: &'a str,
    /// The person the key belongs to (for an agent key, the person it acts for).
    pub person: Option<&'a str>,
    pub role: Role,
    pub agent: bool,
}

/// A [`Caller`], owned: for a caller kept beyond the request (a filter, a
/// transaction on another thread).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Voter {
    pub tenant: String,
    pub key_id: String,
    pub person: Option<String>,
    pub role: Role,
    pub agent: bool,
}

impl Voter {
    pub fn of(caller: &Caller<'_>) -> Voter {
        Voter {
            tenant: caller.tenant.to_owned(),
            key_id: caller.key_id.to_owned(),
            person: caller.person.map(str::to_owned),
            role: caller.role,
            agent: caller.agent,
        }
    }

    pub fn caller(&self) -> Caller<'_> {
        Caller {
            tenant: &self.tenant,
            key_id: &self.key_id,
            person: self.person.as_deref(),
            role: self.role,
            agent: self.agent,
        }
    }
}

/// The proposal voted on, as it is now.
#[derive(Debug, Clone, Copy)]
pub struct Subject<'a> {
    pub id: &'a str,
    pub tenant: &'a str,
    pub state: ProposalState,
    /// The person behind the submitting key (for an agent key, the person the
    /// agent acts for).
    pub submitter_person: Option<&'a str>,
    pub spec: &'a ProposalSpec,
}

impl<'a> Subject<'a> {
    /// `proposal` as it is now.
    pub fn of(proposal: &'a Proposal) -> Subject<'a> {
        Subject {
            id: &proposal.id,
            tenant: &proposal.tenant,
            state: proposal.state,
            submitter_person: proposal.submitted_by_person.as_deref(),
            spec: &proposal.spec,
        }
    }
}

/// What the caller asks: a verdict (`None` when unset or unknown on the wire)
/// and a comment.
#[derive(Debug, Clone, Copy)]
pub struct Ballot<'a> {
    pub verdict: Option<Verdict>,
    pub comment: &'a str,
}

/// The longest comment a vote may carry, in bytes.
pub const MAX_COMMENT: usize = MAX_REASON;

crate::named_enum! {
    /// The four-eyes rule a refused caller broke.
    pub enum Rule as "rule" {
        /// Agent keys never resolve.
        Agent => "agent",
        /// The key names no person.
        Person => "person",
        /// The key's role is not one the route lets approve.
        Role => "role",
        /// The caller's person submitted the proposal (or owns the agent that did).
        Submitter => "submitter",
        /// The caller's person is the proposal's operator.
        Operator => "operator",
    }
}

/// Why a vote is refused. The kinds follow `Resolve`'s order of checks:
/// NOT_FOUND, PERMISSION_DENIED, INVALID_ARGUMENT, then the state.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    #[error("proposal `{0}` not found")]
    NotFound(String),
    #[error("permission denied ({rule}): {detail}")]
    PermissionDenied { rule: Rule, detail: String },
    #[error("{0}")]
    InvalidArgument(FieldError),
    #[error("proposal `{id}` is {state}, not escalated: it takes no more votes")]
    NotEscalated { id: String, state: ProposalState },
    #[error("{person} already voted {recorded} on this proposal: one vote per person")]
    AlreadyVoted { person: String, recorded: Verdict },
    /// The escalation ran out before this vote; the vote is not recorded. The
    /// caller applies the expiry ([`Escalation::conclude`]) before answering.
    #[error(
        "proposal is rejected: the escalation expired with {approvals} of {required} approvals"
    )]
    Expired { approvals: usize, required: u32 },
    /// The proposal is ESCALATED but its escalation was not supplied.
    #[error("escalated proposal `{0}` has no escalation record")]
    Inconsistent(String),
}

impl ServiceError for ResolveError {
    fn kind(&self) -> ErrorKind {
        match self {
            ResolveError::NotFound(_) => ErrorKind::NotFound,
            ResolveError::PermissionDenied { .. } => ErrorKind::PermissionDenied,
            ResolveError::InvalidArgument(_) => ErrorKind::InvalidArgument,
            ResolveError::NotEscalated { .. }
            | ResolveError::AlreadyVoted { .. }
            | ResolveError::Expired { .. } => ErrorKind::FailedPrecondition,
            ResolveError::Inconsistent(_) => ErrorKind::Internal,
        }
    }
}

/// What an accepted vote does.
#[derive(Debug, Clone, PartialEq)]
pub enum Resolution {
    /// The caller's person already voted this verdict: nothing changes, and the
    /// answer is the proposal as it is now.
    Repeat,
    /// The vote is recorded; the escalation stays open.
    Recorded {
        vote: Vote,
        approvals: usize,
        required: u32,
    },
    /// The vote is recorded and decides the proposal: any reject rejects, the
    /// N-th distinct approving person approves.
    Decided { vote: Vote, decision: Box<Decision> },
}

/// The votes that count, cast before the escalation expired: the first
/// approval of each eligible person (not the submitter's person, not the
/// operator, not blank), and the first rejection by anyone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tally<'v> {
    pub approvals: Vec<&'v Vote>,
    pub rejection: Option<&'v Vote>,
}

/// Counts `votes` on `subject` for an escalation expiring at `expires_at`.
pub fn tally<'v>(votes: &'v [Vote], subject: &Subject<'_>, expires_at: Millis) -> Tally<'v> {
    let mut approvals: Vec<&Vote> = Vec::new();
    let mut rejection = None;
    for vote in votes.iter().filter(|v| v.at < expires_at) {
        match vote.verdict {
            Verdict::Reject => {
                rejection = rejection.or(Some(vote));
            }
            Verdict::Approve => {
                let eligible = !vote.person.trim().is_empty()
                    && !subject
                        .submitter_person
                        .is_some_and(|s| same_person(s, &vote.person))
                    && !same_person(&subject.spec.operator, &vote.person);
                if eligible
                    && !approvals
                        .iter()
                        .any(|a| same_person(&a.person, &vote.person))
                {
                    approvals.push(vote);
                }
            }
        }
    }
    Tally {
        approvals,
        rejection,
    }
}

fn denied(rule: Rule, detail: impl Into<String>) -> ResolveError {
    ResolveError::PermissionDenied {
        rule,
        detail: detail.into(),
    }
}

/// The caller's person, once every permission rule holds.
fn permitted<'a>(
    caller: &Caller<'a>,
    subject: &Subject<'_>,
    escalation: Option<&Escalation>,
) -> Result<&'a str, ResolveError> {
    if caller.agent {
        return Err(denied(
            Rule::Agent,
            "agent keys may not resolve escalations; a person must",
        ));
    }
    let Some(person) = caller.person.map(str::trim).filter(|p| !p.is_empty()) else {
        return Err(denied(
            Rule::Person,
            "this key names no person; only a key with a person may resolve escalations",
        ));
    };
    let roles = escalation.map_or(&DEFAULT_APPROVER_ROLES[..], |e| &e.approver_roles[..]);
    if !roles.contains(&caller.role) {
        let allowed: Vec<&str> = roles.iter().map(|r| r.as_str()).collect();
        return Err(denied(
            Rule::Role,
            format!(
                "role {} may not resolve this escalation (allowed: {})",
                caller.role,
                allowed.join(", ")
            ),
        ));
    }
    if subject
        .submitter_person
        .is_some_and(|s| same_person(s, person))
    {
        return Err(denied(
            Rule::Submitter,
            format!(
                "{person} submitted this proposal (or owns the agent that did) and may not resolve it"
            ),
        ));
    }
    if same_person(&subject.spec.operator, person) {
        return Err(denied(
            Rule::Operator,
            format!("{person} is this proposal's operator and may not resolve it"),
        ));
    }
    Ok(person)
}

/// The vote `person` already cast among `votes` (one per person).
fn recorded<'v>(votes: &'v [Vote], person: &str) -> Option<&'v Vote> {
    votes.iter().find(|v| same_person(&v.person, person))
}

/// The escalation a new vote of `person` (permitted, with `recorded` the
/// vote they cast before, if any) counts in: the proposal must be ESCALATED,
/// the person must not have voted, and the escalation must not have expired
/// at `now`; otherwise the refusal, by state.
fn open_to<'e>(
    person: &str,
    recorded: Option<&Vote>,
    subject: &Subject<'_>,
    escalation: Option<&'e Escalation>,
    votes: &[Vote],
    now: Millis,
) -> Result<&'e Escalation, ResolveError> {
    if subject.state != ProposalState::Escalated {
        return Err(ResolveError::NotEscalated {
            id: subject.id.to_owned(),
            state: subject.state,
        });
    }
    let Some(escalation) = escalation else {
        return Err(ResolveError::Inconsistent(subject.id.to_owned()));
    };
    if let Some(recorded) = recorded {
        return Err(ResolveError::AlreadyVoted {
            person: person.to_owned(),
            recorded: recorded.verdict,
        });
    }
    if escalation.is_expired(now) {
        return Err(ResolveError::Expired {
            approvals: tally(votes, subject, escalation.expires_at).approvals.len(),
            required: escalation.approvals_required,
        });
    }
    Ok(escalation)
}

/// Whether `subject` awaits `caller`'s vote at `now`: a vote of either
/// verdict would be counted. These are [`resolve`]'s own checks, in its
/// order, but the ballot's: the caller's tenant, the permission rules (a
/// person, not an agent key, a role the route allows, neither the
/// submitter's person nor the operator), and the state (ESCALATED, no vote
/// of this person yet, not expired).
pub fn awaits(
    caller: &Caller<'_>,
    subject: &Subject<'_>,
    escalation: Option<&Escalation>,
    votes: &[Vote],
    now: Millis,
) -> bool {
    caller.tenant == subject.tenant
        && permitted(caller, subject, escalation).is_ok_and(|person| {
            open_to(
                person,
                recorded(votes, person),
                subject,
                escalation,
                votes,
                now,
            )
            .is_ok()
        })
}

/// One vote, checked and counted. In order: the proposal must be the
/// caller's tenant's (else NOT_FOUND); the caller must be a person, not an
/// agent key, in a role the route allows, and neither the submitter's person
/// nor the operator (PERMISSION_DENIED naming the [`Rule`]); the verdict must
/// be set and the comment at most [`MAX_COMMENT`] bytes (INVALID_ARGUMENT).
/// Then the state: the caller's recorded verdict repeated is
/// [`Resolution::Repeat`] whatever the state; any other vote needs the
/// proposal ESCALATED, no earlier vote by the same person, and the
/// escalation not expired at `now` (FAILED_PRECONDITION).
///
/// `votes` are the proposal's recorded votes; `escalation` is its
/// escalation, if it was ever escalated.
pub fn resolve(
    caller: &Caller<'_>,
    subject: &Subject<'_>,
    escalation: Option<&Escalation>,
    votes: &[Vote],
    ballot: &Ballot<'_>,
    now: Millis,
) -> Result<Resolution, ResolveError> {
    if caller.tenant != subject.tenant {
        return Err(ResolveError::NotFound(subject.id.to_owned()));
    }
    let person = permitted(caller, subject, escalation)?;
    let Some(verdict) = ballot.verdict else {
        return Err(ResolveError::InvalidArgument(FieldError::new(
            "verdict",
            "must be VERDICT_APPROVE or VERDICT_REJECT",
        )));
    };
    if ballot.comment.len() > MAX_COMMENT {
        return Err(ResolveError::InvalidArgument(FieldError::new(
            "comment",
            format!(
                "must be at most {MAX_COMMENT} bytes (got {})",
                ballot.comment.len()
            ),
        )));
    }

    let recorded = recorded(votes, person);
    if recorded.is_some_and(|r| r.verdict == verdict) {
        return Ok(Resolution::Repeat);
    }
    let escalation = open_to(person, recorded, subject, escalation, votes, now)?;

    let vote = Vote {
        person: person.to_owned(),
        key_id: caller.key_id.to_owned(),
        verdict,
        comment: ballot.comment.to_owned(),
        at: now,
    };
    let mut all = votes.to_vec();
    all.push(vote.clone());
    Ok(match escalation.conclude(subject, &all, now) {
        Some(decision) => Resolution::Decided {
            vote,
            decision: Box::new(decision),
        },
        None => Resolution::Recorded {
            vote,
            approvals: tally(&all, subject, escalation.expires_at).approvals.len(),
            required: escalation.approvals_required,
        },
    })
}
