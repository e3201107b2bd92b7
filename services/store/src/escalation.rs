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
        Ballot, Caller, Escalation, InboxFilter, Resolution, ResolveError, Route, RouteMatch,
        Subject, Verdict, Vote, normalize_person, resolve,
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

/// One page of a filtered inbox, read in chunks of the open escalations
/// (in page order) until `limit` are kept or the list runs out; each backend
/// reads the chunks [`Scan::next`] asks for, in one read transaction:
///
/// ```text
/// while let Some((after, n)) = scan.next() { scan.take(read(after, n)?, n) }
/// ```
///
/// A page token names the last escalation kept, so the next page carries on
/// from it under the same filter.
pub(crate) struct Scan<'f> {
    filter: &'f InboxFilter,
    limit: u32,
    /// At least this many rows a chunk reads under a filter.
    chunk: u32,
    after: Option<(Millis, String)>,
    kept: Vec<EscalationRecord>,
    exhausted: bool,
}

impl<'f> Scan<'f> {
    /// At least this many rows a chunk reads under a filter: most of them
    /// may be dropped.
    const CHUNK: u32 = 256;

    pub fn new(filter: &'f InboxFilter, after: Option<(Millis, String)>, limit: u32) -> Self {
        Scan {
            filter,
            limit,
            chunk: Self::CHUNK,
            after,
            kept: Vec::new(),
            exhausted: false,
        }
    }

    /// The chunk to read next: after which (opened_at, proposal id), how
    /// many rows; `None` once the page is full or the list has run out.
    pub fn next(&self) -> Option<(Option<(Millis, String)>, u32)> {
        let wanted = self.limit.saturating_sub(self.kept.len() as u32);
        if self.exhausted || wanted == 0 {
            return None;
        }
        let n = if self.filter.is_empty() {
            wanted
        } else {
            wanted.max(self.chunk)
        };
        Some((self.after.clone(), n))
    }

    /// A chunk of `asked` rows read as [`Scan::next`] said: the records the
    /// filter keeps are kept, up to the page's limit.
    pub fn take(&mut self, chunk: Vec<EscalationRecord>, asked: u32) {
        self.exhausted = (chunk.len() as u64) < u64::from(asked);
        if let Some(last) = chunk.last() {
            self.after = Some((last.escalation.opened_at, last.proposal.id.clone()));
        }
        let room = self.limit as usize - self.kept.len();
        self.kept.extend(
            chunk
                .into_iter()
                .filter(|r| self.filter.keeps(&r.proposal, &r.escalation, &r.votes))
                .take(room),
        );
    }

    /// The page: at most `limit` records, in page order.
    pub fn finish(self) -> Vec<EscalationRecord> {
        self.kept
    }
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
        Subject::of(&self.proposal)
    }

    /// Its escalation record, if it was ever escalated.
    pub fn record(self) -> Option<EscalationRecord> {
        Some(EscalationRecord {
            escalation: self.escalation?,
            proposal: self.proposal,
            votes: self.votes,
        })
    }

    /// [`Found::record`] with the votes as they stood at an event of the
    /// proposal that `later` of its VOTE events follow. A proposal's votes
    /// and their VOTE events are written one by one in the same order (each
    /// vote under the proposal's lock, its event in its transaction), so
    /// those are its last `later` votes. The count is the same whenever it
    /// is read: a vote cast since adds a vote and a later event alike.
    pub fn record_at_event(mut self, later: i64) -> Option<EscalationRecord> {
        let later = usize::try_from(later).unwrap_or(0);
        self.votes.truncate(self.votes.len().saturating_sub(later));
        self.record()
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

#[cfg(test)]
mod tests {
    use countersign_domain::{
        Proposal, ProposalState,
        escalation::{Escalation, InboxFilter},
    };
    use countersign_test_support::fixtures;

    use super::Scan;
    use crate::EscalationRecord;

    /// An open escalation of a proposal on `target`, opened at `at`.
    fn record(target: &str, at: i64) -> EscalationRecord {
        let mut spec = fixtures::spec();
        spec.target = target.into();
        EscalationRecord {
            proposal: Proposal {
                id: format!("P{at:03}"),
                tenant: "a".into(),
                spec,
                state: ProposalState::Escalated,
                submitted_by: "bot".into(),
                submitted_by_person: None,
                created_at: at,
                updated_at: at,
                decision: None,
                suppressed_retries: 0,
                cancel_reason: None,
            },
            escalation: Escalation {
                route_id: "r".into(),
                approvals_required: 1,
                approver_roles: Vec::new(),
                opened_at: at,
                expires_at: at + 1_000,
                gates: Vec::new(),
                sop_id: None,
                sop_version: None,
                rollback_path: None,
                reviewer: "w".into(),
                review_latency_ms: 0,
                model: None,
            },
            votes: Vec::new(),
        }
    }

    /// The page `scan` reads from `all` (in page order), chunk by chunk; the
    /// chunks it asked for.
    fn run(mut scan: Scan<'_>, all: &[EscalationRecord]) -> (Vec<String>, usize) {
        let mut chunks = 0;
        while let Some((after, n)) = scan.next() {
            chunks += 1;
            let chunk = all
                .iter()
                .filter(|r| {
                    after
                        .as_ref()
                        .is_none_or(|(at, id)| (r.escalation.opened_at, &r.proposal.id) > (*at, id))
                })
                .take(n as usize)
                .cloned()
                .collect();
            scan.take(chunk, n);
        }
        let ids = scan.finish().into_iter().map(|r| r.proposal.id).collect();
        (ids, chunks)
    }

    /// A filter whose matches lie chunks apart is read on, chunk after
    /// chunk, until the page is full or the list runs out, and the next page
    /// carries on after the last kept.
    #[test]
    fn a_filtered_page_reads_on_past_chunks_that_keep_nothing() {
        let all: Vec<EscalationRecord> = (1..=9)
            .map(|at| record(if at % 4 == 0 { "db-01" } else { "node" }, at))
            .collect();
        let filter = InboxFilter {
            target: Some("db-01".into()),
            ..InboxFilter::default()
        };
        let scan = |after: Option<(i64, String)>, limit| Scan {
            chunk: 2,
            ..Scan::new(&filter, after, limit)
        };
        assert_eq!(
            run(scan(None, 5), &all),
            (vec!["P004".into(), "P008".into()], 3)
        );
        assert_eq!(run(scan(None, 1), &all), (vec!["P004".into()], 2));
        let after = Some((4, "P004".to_owned()));
        assert_eq!(run(scan(after, 1), &all), (vec!["P008".into()], 2));
        let after = Some((8, "P008".to_owned()));
        assert_eq!(run(scan(after, 1), &all), (Vec::<String>::new(), 1));

        // Unfiltered, a page is one read of exactly its size.
        let everything = InboxFilter::default();
        let page = Scan::new(&everything, None, 3);
        assert_eq!(
            run(page, &all),
            (vec!["P001".into(), "P002".into(), "P003".into()], 1)
        );
    }
}
