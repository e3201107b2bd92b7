//! Routes, escalations and votes: the part both backends share (and the
//! match columns a model profile shares with a route). Each backend
//! reads, inside the transaction that votes (or expires), the proposal, its
//! escalation and its votes as they are then ([`Found`]); what to write is
//! decided here, by the domain's rules (`escalation::resolve`,
//! `Escalation::conclude`, `commit::final_approval`), and the rows are mapped
//! here both ways.

use std::collections::HashMap;

use countersign_domain::{
    Decision, DecisionOutcome, Millis, Proposal, ProposalState, Role, Target,
    commit::{self, AtFinalApproval, Recording, SopAtCommit},
    escalation::{
        Ballot, Caller, Escalation, Resolution, ResolveError, Route, RouteMatch, Subject, Verdict,
        Vote, normalize_person, resolve,
    },
    gates::GateSpec,
};

use crate::{
    EscalationRecord, RecordOutcome, Result, ReviewKey, StoreError, Voted, facts,
    policy::{Param, PolicyDocument},
    recording::Write,
    rows::{Columns, target_from_row},
};

fn corrupt(what: String) -> StoreError {
    StoreError::Corrupt(what)
}

/// A value as stored: its JSON (what is stored never fails to serialize).
macro_rules! json {
    ($value:expr) => {
        serde_json::to_string($value).expect("stored values serialize")
    };
}

/// Names as stored: a JSON array of each one's `as_str`.
fn names<T: Copy>(items: &[T], name: impl Fn(T) -> &'static str) -> String {
    json!(&items.iter().map(|i| name(*i)).collect::<Vec<_>>())
}

/// A JSON array of names, each parsed.
fn parse_names<T: std::str::FromStr>(what: &str, text: &str) -> Result<Vec<T>>
where
    T::Err: std::fmt::Display,
{
    let names: Vec<String> =
        serde_json::from_str(text).map_err(|e| corrupt(format!("{what}: {e}")))?;
    names
        .iter()
        .map(|n| n.parse().map_err(|e| corrupt(format!("{what}: {e}"))))
        .collect()
}

fn count(what: &str, n: i64) -> Result<u32> {
    u32::try_from(n).map_err(|_| corrupt(format!("{what}: {n}")))
}

/// The match columns of a route or a model profile, as both backends store
/// them: `actions_json`, `classes_json`, `blast_radii_json`,
/// `target_selector_json`.
pub(crate) fn match_params(m: &RouteMatch) -> [Param; 4] {
    [
        Param::Text(json!(&m.actions)),
        Param::Text(names(&m.classes, |c| c.as_str())),
        Param::Text(names(&m.blast_radii, |r| r.as_str())),
        Param::Text(json!(&m.target_selector)),
    ]
}

/// The match columns of a row; `what` names the row and a column in an error.
pub(crate) fn match_from_row(
    row: &impl Columns,
    what: impl Fn(&str) -> String,
) -> Result<RouteMatch> {
    Ok(RouteMatch {
        actions: serde_json::from_str(&row.text("actions_json")?)
            .map_err(|e| corrupt(format!("{}: {e}", what("actions_json"))))?,
        classes: parse_names(&what("classes_json"), &row.text("classes_json")?)?,
        blast_radii: parse_names(&what("blast_radii_json"), &row.text("blast_radii_json")?)?,
        target_selector: serde_json::from_str(&row.text("target_selector_json")?)
            .map_err(|e| corrupt(format!("{}: {e}", what("target_selector_json"))))?,
    })
}

impl PolicyDocument for Route {
    const KIND: &'static str = "route";
    const TABLE: &'static str = "routes";
    const PUT: &'static str = "
INSERT INTO routes (tenant, id, actions_json, classes_json, blast_radii_json,
    target_selector_json, approvals_required, approver_roles_json, expires_after_ms,
    escalate_on_json, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
ON CONFLICT (tenant, id) DO UPDATE SET
    actions_json = excluded.actions_json, classes_json = excluded.classes_json,
    blast_radii_json = excluded.blast_radii_json,
    target_selector_json = excluded.target_selector_json,
    approvals_required = excluded.approvals_required,
    approver_roles_json = excluded.approver_roles_json,
    expires_after_ms = excluded.expires_after_ms, escalate_on_json = excluded.escalate_on_json,
    updated_at = excluded.updated_at
RETURNING *";

    fn id(&self) -> &str {
        &self.id
    }

    fn params(&self) -> Vec<Param> {
        let mut params = match_params(&self.matcher).to_vec();
        params.extend([
            Param::Int(i64::from(self.approvals_required)),
            Param::Text(names(&self.approver_roles, Role::as_str)),
            Param::Int(self.expires_after_ms),
            Param::Text(json!(&self.escalate_on)),
        ]);
        params
    }

    fn from_row(row: &impl Columns) -> Result<Route> {
        let id = row.text("id")?;
        let what = |column: &str| format!("route {id} {column}");
        Ok(Route {
            matcher: match_from_row(row, what)?,
            approvals_required: count(&what("approvals_required"), row.int("approvals_required")?)?,
            approver_roles: parse_names(
                &what("approver_roles_json"),
                &row.text("approver_roles_json")?,
            )?,
            expires_after_ms: row.int("expires_after_ms")?,
            escalate_on: serde_json::from_str(&row.text("escalate_on_json")?)
                .map_err(|e| corrupt(format!("{}: {e}", what("escalate_on_json"))))?,
            id,
        })
    }
}

/// An escalation's columns as both backends store them.
pub(crate) struct EscalationRow {
    pub approver_roles_json: String,
    pub gates_json: String,
    pub model_json: Option<String>,
}

impl EscalationRow {
    pub fn of(e: &Escalation) -> EscalationRow {
        EscalationRow {
            approver_roles_json: names(&e.approver_roles, Role::as_str),
            gates_json: json!(&e.gates),
            model_json: crate::model::review_json(e.model.as_ref()),
        }
    }
}

/// An `escalations` row.
pub(crate) fn escalation_from_row(row: &impl Columns) -> Result<Escalation> {
    let id = row.text("proposal_id")?;
    let what = |column: &str| format!("escalation of {id} {column}");
    Ok(Escalation {
        route_id: row.text("route_id")?,
        approvals_required: count(&what("approvals_required"), row.int("approvals_required")?)?,
        approver_roles: parse_names(
            &what("approver_roles_json"),
            &row.text("approver_roles_json")?,
        )?,
        opened_at: row.int("opened_at")?,
        expires_at: row.int("expires_at")?,
        gates: serde_json::from_str(&row.text("gates_json")?)
            .map_err(|e| corrupt(format!("{}: {e}", what("gates_json"))))?,
        sop_id: row.opt_text("sop_id")?,
        sop_version: row
            .opt_int("sop_version")?
            .map(|v| count(&what("sop_version"), v))
            .transpose()?,
        rollback_path: row.opt_text("rollback_path")?,
        reviewer: row.text("reviewer")?,
        review_latency_ms: row.int("review_latency_ms")?.max(0) as u64,
        model: crate::model::review_from_row(row, || format!("escalation of {id}"))?,
    })
}

/// A `votes` row, with the proposal it is on.
pub(crate) fn vote_from_row(row: &impl Columns) -> Result<(String, Vote)> {
    let id = row.int("id")?;
    let verdict: Verdict = row
        .text("verdict")?
        .parse()
        .map_err(|e| corrupt(format!("vote {id}: {e}")))?;
    Ok((
        row.text("proposal_id")?,
        Vote {
            person: row.text("person")?,
            key_id: row.text("key_id")?,
            verdict,
            comment: row.text("comment")?,
            at: row.int("at")?,
        },
    ))
}

/// The one form a vote's person is kept unique in (`votes.person_key`).
pub(crate) fn person_key(vote: &Vote) -> String {
    normalize_person(&vote.person)
}

/// The votes as a decision row keeps them: NULL when there are none.
pub(crate) fn votes_json(votes: &[Vote]) -> Option<String> {
    (!votes.is_empty()).then(|| json!(&votes))
}

/// A page of `escalations` rows: each one's proposal id, and the escalation.
pub(crate) fn page<R: Columns>(rows: &[R]) -> Result<(Vec<String>, Vec<Escalation>)> {
    rows.iter()
        .map(|row| Ok((row.text("proposal_id")?, escalation_from_row(row)?)))
        .collect::<Result<Vec<_>>>()
        .map(|page| page.into_iter().unzip())
}

/// Escalations as read, each with its proposal (`proposals`, by id) and its
/// votes (`votes`, in the order cast), in the escalations' order. A proposal
/// missing beside its escalation is corrupt.
pub(crate) fn records(
    escalations: Vec<Escalation>,
    ids: &[String],
    mut proposals: HashMap<String, Proposal>,
    votes: Vec<(String, Vote)>,
) -> Result<Vec<EscalationRecord>> {
    let mut by_proposal: HashMap<String, Vec<Vote>> = HashMap::new();
    for (id, vote) in votes {
        by_proposal.entry(id).or_default().push(vote);
    }
    escalations
        .into_iter()
        .zip(ids)
        .map(|(escalation, id)| {
            let proposal = proposals
                .remove(id)
                .ok_or_else(|| corrupt(format!("escalation of {id}: no proposal")))?;
            Ok(EscalationRecord {
                proposal,
                escalation,
                votes: by_proposal.remove(id).unwrap_or_default(),
            })
        })
        .collect()
}

/// The fate of an escalation a review opens for `key`'s proposal, found in
/// the state named `state` at commit (`commit::escalating`): only
/// `Recorded` is written.
pub(crate) fn opening(key: &ReviewKey, state: &str) -> Result<RecordOutcome> {
    let state: ProposalState = state
        .parse()
        .map_err(|e| corrupt(format!("proposal {}: {e}", key.id)))?;
    Ok(match commit::escalating(&key.id, state) {
        Recording::Record(_) => RecordOutcome::Recorded,
        Recording::Discard => RecordOutcome::Discarded(state),
        Recording::Stale(why) => RecordOutcome::Stale(why),
    })
}

/// A caller of `cast_vote`, owned (a backend's transaction may run on
/// another thread).
pub(crate) struct OwnedCaller {
    tenant: String,
    key_id: String,
    person: Option<String>,
    role: Role,
    agent: bool,
}

impl OwnedCaller {
    pub fn of(caller: &Caller<'_>) -> OwnedCaller {
        OwnedCaller {
            tenant: caller.tenant.to_owned(),
            key_id: caller.key_id.to_owned(),
            person: caller.person.map(str::to_owned),
            role: caller.role,
            agent: caller.agent,
        }
    }

    pub fn get(&self) -> Caller<'_> {
        Caller {
            tenant: &self.tenant,
            key_id: &self.key_id,
            person: self.person.as_deref(),
            role: self.role,
            agent: self.agent,
        }
    }

    pub fn tenant(&self) -> &str {
        &self.tenant
    }
}

/// A ballot, owned.
pub(crate) struct OwnedBallot {
    verdict: Option<Verdict>,
    comment: String,
}

impl OwnedBallot {
    pub fn of(ballot: &Ballot<'_>) -> OwnedBallot {
        OwnedBallot {
            verdict: ballot.verdict,
            comment: ballot.comment.to_owned(),
        }
    }

    pub fn get(&self) -> Ballot<'_> {
        Ballot {
            verdict: self.verdict,
            comment: &self.comment,
        }
    }
}

/// A proposal as a vote's (or an expiry's) transaction finds it, locked
/// against every other writer of it: with its decision once decided, its
/// escalation if it was ever escalated, and its votes in the order cast.
pub(crate) struct Found {
    pub proposal: Proposal,
    pub escalation: Option<Escalation>,
    pub votes: Vec<Vote>,
}

impl Found {
    fn subject(&self) -> Subject<'_> {
        let p = &self.proposal;
        Subject {
            id: &p.id,
            tenant: &p.tenant,
            state: p.state,
            submitter_person: p.submitted_by_person.as_deref(),
            spec: &p.spec,
        }
    }

    fn key(&self) -> ReviewKey {
        ReviewKey {
            tenant: self.proposal.tenant.clone(),
            id: self.proposal.id.clone(),
        }
    }
}

/// What a vote's transaction writes, and what it answers once written.
pub(crate) struct VotePlan {
    /// The vote to insert (recorded, or deciding).
    pub vote: Option<Vote>,
    /// The decision to write: the deciding vote's, or the expiry a vote
    /// arriving too late found (re-checked before it is written when it
    /// approves: [`Decide::recheck`]).
    pub decide: Option<Decide>,
    answer: std::result::Result<Resolution, ResolveError>,
}

/// A decision to write for an escalated proposal.
pub(crate) struct Decide {
    pub decision: Decision,
    pub key: ReviewKey,
    pub operator: String,
    /// When its escalation opened (the re-check's start).
    pub opened_at: Millis,
}

impl Decide {
    fn of(found: &Found, decision: Decision) -> Option<Decide> {
        Some(Decide {
            decision,
            key: found.key(),
            operator: found.proposal.spec.operator.clone(),
            opened_at: found.escalation.as_ref()?.opened_at,
        })
    }

    /// Whether it approves: only then are the facts at commit read.
    pub fn approves(&self) -> bool {
        self.decision.outcome == DecisionOutcome::Approve
    }

    /// The approval re-checked against the facts as they are at commit
    /// (`commit::final_approval`): `target` the proposal's target row now,
    /// `sop` its cited SOP's (version, retired) now, `candidate_rows` the
    /// operations that may overlap it, read by the review's candidates
    /// query with the escalation's opening as the window's start.
    pub fn recheck<R: Columns>(
        mut self,
        spec: &GateSpec,
        target: Option<&R>,
        sop: Option<(i64, bool)>,
        candidate_rows: &[R],
    ) -> Result<Decide> {
        let id = &self.key.id;
        let target: Option<Target> = target.map(target_from_row).transpose()?;
        let sop = sop
            .map(|(version, retired)| {
                Ok::<_, StoreError>(SopAtCommit {
                    version: u32::try_from(version)
                        .map_err(|_| corrupt(format!("proposal {id}: its SOP's version")))?,
                    retired,
                })
            })
            .transpose()?;
        let others = facts::others_from(candidate_rows)?;
        let at = AtFinalApproval {
            proposal_id: id,
            spec,
            target: target.as_ref(),
            sop,
            opened_at: self.opened_at,
            others: &others,
        };
        self.decision = commit::final_approval(self.decision, &at);
        Ok(self)
    }

    /// The row and state change to write.
    pub fn write(&self) -> Write<'_> {
        Write {
            key: &self.key,
            decision: &self.decision,
            prev: ProposalState::Escalated,
            next: self.decision.outcome.state(),
            operator: self.operator.clone(),
        }
    }
}

/// The vote of `caller` on `found`, by `domain::escalation::resolve`.
pub(crate) fn plan_vote(
    caller: &Caller<'_>,
    found: &Found,
    ballot: &Ballot<'_>,
    now: Millis,
) -> VotePlan {
    let subject = found.subject();
    let answer = resolve(
        caller,
        &subject,
        found.escalation.as_ref(),
        &found.votes,
        ballot,
        now,
    );
    match &answer {
        Ok(Resolution::Recorded { vote, .. }) => VotePlan {
            vote: Some(vote.clone()),
            decide: None,
            answer,
        },
        Ok(Resolution::Decided { vote, decision }) => match Decide::of(found, (**decision).clone())
        {
            Some(decide) => VotePlan {
                vote: Some(vote.clone()),
                decide: Some(decide),
                answer,
            },
            // `resolve` decides only with the escalation in hand.
            None => VotePlan {
                vote: None,
                decide: None,
                answer: Err(ResolveError::Inconsistent(subject.id.to_owned())),
            },
        },
        Err(ResolveError::Expired { .. }) => VotePlan {
            vote: None,
            decide: expiry(found, now),
            answer,
        },
        Ok(Resolution::Repeat) | Err(_) => VotePlan {
            vote: None,
            decide: None,
            answer,
        },
    }
}

/// The decision that ends `found`'s escalation at `now`, if it has run out
/// (or its votes decide it) and the proposal is still ESCALATED.
pub(crate) fn expiry(found: &Found, now: Millis) -> Option<Decide> {
    if found.proposal.state != ProposalState::Escalated {
        return None;
    }
    let escalation = found.escalation.as_ref()?;
    let decision = escalation.conclude(&found.subject(), &found.votes, now)?;
    Decide::of(found, decision)
}

impl VotePlan {
    /// The answer once the plan is written: the proposal as it is after it,
    /// and a deciding vote's decision as written.
    pub fn answer(
        self,
        mut proposal: Proposal,
        now: Millis,
    ) -> std::result::Result<Voted, ResolveError> {
        if let Some(decide) = &self.decide {
            proposal.state = decide.decision.outcome.state();
            proposal.updated_at = now;
            proposal.decision = Some(decide.decision.clone());
        }
        let resolution = match (self.answer?, self.decide) {
            (Resolution::Decided { vote, .. }, Some(decide)) => Resolution::Decided {
                vote,
                decision: Box::new(decide.decision),
            },
            (resolution, _) => resolution,
        };
        Ok(Voted {
            resolution,
            proposal,
        })
    }
}
