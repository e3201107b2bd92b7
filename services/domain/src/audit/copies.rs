//! The copies of a record's fields that the store keeps beside the chained
//! record: the log's filter columns (what `ListDecisions` matches and its time
//! index seeks), the decision row and the proposal's columns (what
//! `GetProposal` and `AwaitDecision` answer). The chain covers the record
//! alone, so verification also checks that every copy says what the record
//! says: a copy changed under the store would otherwise go unseen while a
//! query or a caller acts on it.

use std::borrow::Cow;

use serde::Deserialize;

use super::time_index::Tide;
use crate::{DecisionOutcome, Millis, ProposalState, model::ModelReview};

/// An `audit_log` row's columns besides the record and its digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogColumns {
    pub tenant: String,
    pub proposal_id: String,
    pub decided_at: Millis,
    pub action: String,
    pub target: String,
    pub operator: String,
    pub submitted_by: String,
    pub outcome: String,
    pub blast_radius: String,
    pub sop_id: Option<String>,
    pub decided_max: Millis,
    pub lateness_max: i64,
}

/// A `decisions` row, as stored (text as text: a value that does not decode
/// disagrees, it is never an error of the read).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecisionColumns {
    pub tenant: String,
    pub outcome: String,
    pub reason: String,
    pub agent_message: String,
    pub sop_id: Option<String>,
    pub sop_version: Option<i64>,
    pub rollback_path: Option<String>,
    pub gates_json: String,
    pub missing_gates_json: String,
    pub reviewer: String,
    pub decided_at: Millis,
    pub summary: String,
    pub review_latency_ms: i64,
    /// NULL for a decision of a proposal that was never escalated.
    pub route_id: Option<String>,
    /// The votes as JSON; NULL when there are none.
    pub votes_json: Option<String>,
    /// The model's review as JSON; NULL where no model reviewed it.
    pub model_json: Option<String>,
}

/// The columns of a `proposals` row that the record copies, and its state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProposalColumns {
    pub tenant: String,
    pub state: String,
    pub action: String,
    pub target: String,
    pub operator: String,
    pub submitted_by: String,
    pub blast_radius: String,
}

/// Everything stored beside one entry's record; a missing decision or
/// proposal row is `None`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredCopies {
    pub log: LogColumns,
    pub decision: Option<DecisionColumns>,
    pub proposal: Option<ProposalColumns>,
}

/// What an entry's copies say beside its record: checked on its own
/// ([`StoredCopies::check`], which can run apart from the chain), then in
/// the log's order by the verifier (the running time values).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyCheck {
    /// The record's decision time.
    pub decided_at: Millis,
    /// The running time values stored with the entry.
    pub stored_tide: Tide,
    /// The first copy that disagrees with the record, as `table.column`.
    pub disagrees: Option<&'static str>,
}

/// The proposal state a decision of `outcome` leaves.
fn state_after(outcome: DecisionOutcome) -> &'static str {
    match outcome {
        DecisionOutcome::Approve => ProposalState::Approved,
        DecisionOutcome::Reject => ProposalState::Rejected,
        DecisionOutcome::TimedOut => ProposalState::TimedOut,
    }
    .as_str()
}

/// A record read for comparison only: its text borrowed from the stored
/// JSON where it can be (a log is checked a million entries at a time).
/// Enumerations stay text: a copy must hold the same name.
#[derive(Deserialize)]
struct RecordView<'a> {
    #[serde(borrow)]
    tenant: Cow<'a, str>,
    #[serde(borrow)]
    proposal_id: Cow<'a, str>,
    #[serde(borrow)]
    action: Cow<'a, str>,
    #[serde(borrow)]
    target: Cow<'a, str>,
    #[serde(borrow)]
    operator: Cow<'a, str>,
    #[serde(borrow)]
    submitted_by: Cow<'a, str>,
    #[serde(borrow)]
    blast_radius: Cow<'a, str>,
    #[serde(borrow)]
    outcome: Cow<'a, str>,
    #[serde(borrow)]
    reason: Cow<'a, str>,
    #[serde(borrow)]
    agent_message: Cow<'a, str>,
    #[serde(borrow)]
    sop_id: Option<Cow<'a, str>>,
    sop_version: Option<u32>,
    #[serde(borrow)]
    rollback_path: Option<Cow<'a, str>>,
    #[serde(borrow)]
    gates: Vec<GateView<'a>>,
    #[serde(borrow)]
    missing_gates: Vec<Cow<'a, str>>,
    #[serde(borrow)]
    reviewer: Cow<'a, str>,
    decided_at: Millis,
    #[serde(borrow)]
    summary: Cow<'a, str>,
    review_latency_ms: u64,
    #[serde(borrow, default)]
    route_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    votes: Vec<VoteView<'a>>,
    #[serde(default)]
    model: Option<ModelReview>,
}

#[derive(Deserialize, PartialEq)]
struct VoteView<'a> {
    #[serde(borrow)]
    person: Cow<'a, str>,
    #[serde(borrow)]
    key_id: Cow<'a, str>,
    #[serde(borrow)]
    verdict: Cow<'a, str>,
    #[serde(borrow)]
    comment: Cow<'a, str>,
    at: Millis,
}

#[derive(Deserialize, PartialEq)]
struct GateView<'a> {
    #[serde(borrow)]
    gate: Cow<'a, str>,
    passed: bool,
    #[serde(borrow)]
    detail: Cow<'a, str>,
}

impl StoredCopies {
    /// Reads the stored record and compares every copy with it; `Err` when
    /// the record does not parse.
    pub fn check(&self, record: &str) -> Result<CopyCheck, String> {
        let record: RecordView<'_> = serde_json::from_str(record).map_err(|e| e.to_string())?;
        Ok(CopyCheck {
            decided_at: record.decided_at,
            stored_tide: Tide {
                decided_max: self.log.decided_max,
                lateness_max: self.log.lateness_max,
            },
            disagrees: self.disagreement_with(&record),
        })
    }

    /// The first copy that does not say what `r` says, as `table.column`.
    fn disagreement_with(&self, r: &RecordView<'_>) -> Option<&'static str> {
        let log = &self.log;
        let text = |copy: &Option<String>, record: &Option<Cow<'_, str>>| {
            copy.as_deref() == record.as_deref()
        };
        let log_checks = [
            ("audit_log.tenant", log.tenant == r.tenant),
            ("audit_log.proposal_id", log.proposal_id == r.proposal_id),
            ("audit_log.decided_at", log.decided_at == r.decided_at),
            ("audit_log.action", log.action == r.action),
            ("audit_log.target", log.target == r.target),
            ("audit_log.operator", log.operator == r.operator),
            ("audit_log.submitted_by", log.submitted_by == r.submitted_by),
            ("audit_log.outcome", log.outcome == r.outcome),
            ("audit_log.blast_radius", log.blast_radius == r.blast_radius),
            ("audit_log.sop_id", text(&log.sop_id, &r.sop_id)),
        ];
        if let Some((column, _)) = log_checks.iter().find(|(_, agrees)| !agrees) {
            return Some(column);
        }
        let Some(d) = &self.decision else {
            return Some("decisions.proposal_id");
        };
        let decision_checks: [(&'static str, &dyn Fn() -> bool); 16] = [
            ("decisions.tenant", &|| d.tenant == r.tenant),
            ("decisions.outcome", &|| d.outcome == r.outcome),
            ("decisions.reason", &|| d.reason == r.reason),
            ("decisions.agent_message", &|| {
                d.agent_message == r.agent_message
            }),
            ("decisions.sop_id", &|| text(&d.sop_id, &r.sop_id)),
            ("decisions.sop_version", &|| {
                d.sop_version == r.sop_version.map(i64::from)
            }),
            ("decisions.rollback_path", &|| {
                text(&d.rollback_path, &r.rollback_path)
            }),
            ("decisions.gates_json", &|| {
                serde_json::from_str::<Vec<GateView<'_>>>(&d.gates_json)
                    .is_ok_and(|gates| gates == r.gates)
            }),
            ("decisions.missing_gates_json", &|| {
                serde_json::from_str::<Vec<Cow<'_, str>>>(&d.missing_gates_json)
                    .is_ok_and(|missing| missing == r.missing_gates)
            }),
            ("decisions.reviewer", &|| d.reviewer == r.reviewer),
            ("decisions.decided_at", &|| d.decided_at == r.decided_at),
            ("decisions.summary", &|| d.summary == r.summary),
            ("decisions.review_latency_ms", &|| {
                u64::try_from(d.review_latency_ms).is_ok_and(|ms| ms == r.review_latency_ms)
            }),
            ("decisions.route_id", &|| text(&d.route_id, &r.route_id)),
            ("decisions.votes_json", &|| match &d.votes_json {
                None => r.votes.is_empty(),
                Some(json) => serde_json::from_str::<Vec<VoteView<'_>>>(json)
                    .is_ok_and(|votes| !votes.is_empty() && votes == r.votes),
            }),
            ("decisions.model_json", &|| match &d.model_json {
                None => r.model.is_none(),
                Some(json) => serde_json::from_str::<ModelReview>(json)
                    .is_ok_and(|model| r.model.as_ref() == Some(&model)),
            }),
        ];
        if let Some((column, _)) = decision_checks.iter().find(|(_, agrees)| !agrees()) {
            return Some(column);
        }
        let Some(p) = &self.proposal else {
            return Some("proposals.id");
        };
        let state = r.outcome.parse::<DecisionOutcome>().ok().map(state_after);
        let proposal_checks = [
            ("proposals.tenant", p.tenant == r.tenant),
            ("proposals.state", Some(p.state.as_str()) == state),
            ("proposals.action", p.action == r.action),
            ("proposals.target", p.target == r.target),
            ("proposals.operator", p.operator == r.operator),
            ("proposals.submitted_by", p.submitted_by == r.submitted_by),
            ("proposals.blast_radius", p.blast_radius == r.blast_radius),
        ];
        proposal_checks
            .iter()
            .find(|(_, agrees)| !agrees)
            .map(|(column, _)| *column)
    }
}
