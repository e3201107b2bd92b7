//! Recording a batch of review results: the part both backends share. Each
//! backend reads, inside the transaction that writes the decisions, every
//! proposal of the batch as it is then ([`Found`]) and, after the state
//! changes, the rejected proposals' operators' breakers ([`Breakers`]) and
//! recent rejections; what to write is decided here, by the domain's rules
//! ([`commit::recording`], [`BreakerRule::tripping`]).

use std::collections::HashMap;

use countersign_domain::{
    Decision, DecisionOutcome, Millis, ProposalState, TargetStatus,
    breaker::BreakerRule,
    commit::{self, FactsAtCommit, Recording, SopAtCommit},
};

use crate::{RecordOutcome, Result, ReviewKey, StoreError};

/// A proposal of the batch as the transaction finds it.
pub(crate) struct Found {
    pub state: ProposalState,
    pub target: String,
    pub operator: String,
    /// For an approval: the SOP it cites, as it is now (`None`: gone).
    pub sop: Option<SopAtCommit>,
    /// For an approval: its target's status now (`None`: gone).
    pub target_status: Option<TargetStatus>,
}

impl Found {
    /// From the columns as stored: `state`, and for an approval the cited
    /// SOP's `version` and `retired` and the target's `status`.
    pub fn parse(
        id: &str,
        state: &str,
        target: String,
        operator: String,
        approval: Option<(Option<i64>, Option<bool>, Option<String>)>,
    ) -> Result<Found> {
        let corrupt = |what: String| StoreError::Corrupt(format!("proposal {id}: {what}"));
        let state = state.parse().map_err(|e| corrupt(format!("{e}")))?;
        let (mut sop, mut target_status) = (None, None);
        if let Some((version, retired, status)) = approval {
            sop = version
                .map(|v| {
                    let version =
                        u32::try_from(v).map_err(|_| corrupt(format!("its SOP's version {v}")))?;
                    Ok::<_, StoreError>(SopAtCommit {
                        version,
                        retired: retired.unwrap_or(false),
                    })
                })
                .transpose()?;
            target_status = status
                .map(|s| s.parse().map_err(|e| corrupt(format!("its target: {e}"))))
                .transpose()?;
        }
        Ok(Found {
            state,
            target,
            operator,
            sop,
            target_status,
        })
    }
}

/// A decision to write, and the move its proposal makes (none where `prev`
/// is `next`: the proposal was stored in its decided state, `at_submission`).
pub(crate) struct Write<'a> {
    pub key: &'a ReviewKey,
    pub decision: &'a Decision,
    pub prev: ProposalState,
    pub next: ProposalState,
    /// The proposal's operator (whose breaker a rejection may trip).
    pub operator: String,
}

/// What a batch (or one tenant's part of it) writes.
pub(crate) struct Plan<'a> {
    /// One per item, in order.
    pub outcomes: Vec<RecordOutcome>,
    /// Late results and the state they found, for `discarded_results`.
    pub discarded: Vec<(&'a ReviewKey, &'a Decision, ProposalState)>,
    pub writes: Vec<Write<'a>>,
}

/// Decides each item's fate by [`commit::recording`]; `found` gives each
/// proposal as the transaction found it (a proposal it did not find is
/// NotFound: the whole batch fails).
pub(crate) fn plan<'a, 'f>(
    items: impl IntoIterator<Item = &'a (ReviewKey, Decision)>,
    found: impl Fn(&ReviewKey) -> Option<&'f Found>,
) -> Result<Plan<'a>> {
    let mut plan = Plan {
        outcomes: Vec::new(),
        discarded: Vec::new(),
        writes: Vec::new(),
    };
    for (key, decision) in items {
        let proposal =
            found(key).ok_or_else(|| StoreError::NotFound(format!("proposal `{}`", key.id)))?;
        let facts = FactsAtCommit {
            target: &proposal.target,
            target_status: proposal.target_status,
            sop: proposal.sop,
        };
        plan.outcomes.push(
            match commit::recording(&key.id, proposal.state, decision, &facts) {
                Recording::Record(next) => {
                    plan.writes.push(Write {
                        key,
                        decision,
                        prev: proposal.state,
                        next,
                        operator: proposal.operator.clone(),
                    });
                    RecordOutcome::Recorded
                }
                Recording::Discard => {
                    plan.discarded.push((key, decision, proposal.state));
                    RecordOutcome::Discarded(proposal.state)
                }
                Recording::Stale(why) => RecordOutcome::Stale(why),
            },
        );
    }
    Ok(plan)
}

/// Whether a decision reached inside a submission's own transaction is
/// recorded there ([`commit::recording`] on the proposal as it is written,
/// under review, and the facts it was reached on, which that transaction
/// read): `None` leaves the proposal PENDING for the reviewers.
pub(crate) fn at_submission(
    proposal_id: &str,
    decision: &Decision,
    facts: &countersign_domain::gates::ReviewFacts,
) -> Option<ProposalState> {
    let sop = decision
        .sop_id
        .as_deref()
        .and_then(|id| facts.sops.iter().find(|sop| sop.id == id))
        .map(|sop| SopAtCommit {
            version: sop.version,
            retired: sop.retired,
        });
    let at = FactsAtCommit {
        target: &facts.spec.target,
        target_status: facts.target.as_ref().map(|t| t.status),
        sop,
    };
    match commit::recording(proposal_id, ProposalState::Reviewing, decision, &at) {
        Recording::Record(next) => Some(next),
        Recording::Discard | Recording::Stale(_) => None,
    }
}

impl Write<'_> {
    /// Whether the proposal's state changes with this write.
    pub fn moves(&self) -> bool {
        self.prev != self.next
    }

    /// The decision's row as a JSON object, as PostgreSQL reads a batch of them.
    pub fn row(&self) -> serde_json::Value {
        let d = self.decision;
        serde_json::json!({
            "proposal_id": self.key.id,
            "tenant": self.key.tenant,
            "outcome": d.outcome.as_str(),
            "reason": d.reason,
            "agent_message": d.agent_message,
            "sop_id": d.sop_id,
            "sop_version": d.sop_version,
            "rollback_path": d.rollback_path,
            "gates_json": serde_json::to_string(&d.gates).expect("gates serialize"),
            "missing_gates_json": serde_json::to_string(&d.missing_gates).expect("names serialize"),
            "reviewer": d.reviewer,
            "decided_at": d.decided_at,
            "summary": d.summary,
            "review_latency_ms": i64::try_from(d.review_latency_ms).unwrap_or(i64::MAX),
            "route_id": d.route_id,
            "votes_json": crate::escalation::votes_json(&d.votes),
            "model_json": crate::model::review_json(d.model.as_ref()),
        })
    }

    pub fn rejects(&self) -> bool {
        self.decision.outcome == DecisionOutcome::Reject
    }
}

/// A tenant's breakers as read at commit, for the operators of a batch's
/// rejections: the tenant's rule and each operator's last reset.
pub(crate) struct Breakers {
    pub rule: BreakerRule,
    resets: HashMap<String, Millis>,
}

impl Breakers {
    /// From rows of (operator, threshold, window, last reset or 0), all of one
    /// tenant; `None` without rows (no such tenant).
    pub fn from_rows(rows: Vec<(String, i64, Millis, Millis)>) -> Option<Breakers> {
        let (_, threshold, window_ms, _) = rows.first()?;
        let rule = BreakerRule {
            threshold: u32::try_from((*threshold).max(0)).unwrap_or(u32::MAX),
            window_ms: *window_ms,
        };
        let resets = rows
            .into_iter()
            .map(|(operator, _, _, reset_at)| (operator, reset_at))
            .collect();
        Some(Breakers { rule, resets })
    }

    /// Of `rejected` (the tenant's just-rejected proposals: id and
    /// operator), those that trip their operator's breaker at `now`, in the
    /// order given: each operator's [`BreakerRule::tripping`] rejection, when
    /// it is one of them. `rejections` are the operators' (operator, decided
    /// at, id) since the rule's window start.
    pub fn trips(
        &self,
        rejections: Vec<(String, Millis, String)>,
        rejected: &[(&str, &str)],
        now: Millis,
    ) -> Vec<String> {
        let mut by_operator: HashMap<String, Vec<(Millis, String)>> = HashMap::new();
        for (operator, at, id) in rejections {
            by_operator.entry(operator).or_default().push((at, id));
        }
        let tripping: HashMap<&str, &str> = by_operator
            .iter()
            .filter_map(|(operator, rejections)| {
                let reset_at = self.resets.get(operator).copied().unwrap_or(0);
                let id = self.rule.tripping(rejections, reset_at, now)?;
                Some((operator.as_str(), id.as_str()))
            })
            .collect();
        rejected
            .iter()
            .filter(|(id, operator)| tripping.get(operator) == Some(id))
            .map(|(id, _)| (*id).to_owned())
            .collect()
    }
}
