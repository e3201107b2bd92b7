//! Routes and votes on the wire (`PolicyService`, `EscalationService` and
//! the decision's `votes`).

use countersign_domain::{
    Decision, DecisionOutcome, FieldError, Millis, OperationClass, Proposal,
    escalation::{
        AGENT_AWAITING_HUMAN, Awaiting, Caller, Escalation, InboxFilter, InboxFilterInput, Route,
        RouteInput, RouteMatch, Subject, Verdict, Vote, Voter, validate_filter, validate_route,
    },
    review::summary,
};
use prost_types::Duration;

use super::{
    blast_radius_to_proto, class_to_proto, decision_to_proto, decode_page_token, proposal_to_proto,
    reference::blast_radius_from_proto, timestamp,
};
use crate::v1;

/// The decision of a proposal people are deciding, as `viewer` may see it:
/// the gates as the review left them, the model's review if one reviewed it,
/// the route, the votes so far and what it waits for; no outcome and no
/// decision time. Agent credentials get the terse view of any decision
/// (`Decision::for_agent`): "awaiting human approval" and no reason, gates,
/// votes or model review.
pub fn waiting_decision(
    proposal: &Proposal,
    escalation: &Escalation,
    votes: &[Vote],
    agent_viewer: bool,
) -> v1::Decision {
    let reason = escalation.waiting_reason(votes, &Subject::of(proposal));
    let decision = Decision {
        // Not shown: the wire outcome is unspecified (below) while people decide.
        outcome: DecisionOutcome::Reject,
        summary: summary("escalated", &escalation.gates, &reason),
        reason,
        agent_message: AGENT_AWAITING_HUMAN.to_owned(),
        sop_id: escalation.sop_id.clone(),
        sop_version: escalation.sop_version,
        rollback_path: escalation.rollback_path.clone(),
        gates: escalation.gates.clone(),
        missing_gates: escalation
            .gates
            .iter()
            .filter(|g| !g.passed)
            .map(|g| g.gate.clone())
            .collect(),
        reviewer: escalation.reviewer.clone(),
        decided_at: 0,
        sequence: 0,
        digest: String::new(),
        review_latency_ms: escalation.review_latency_ms,
        route_id: Some(escalation.route_id.clone()),
        votes: votes.to_vec(),
        model: escalation.model.clone(),
    };
    let shown = if agent_viewer {
        decision.for_agent()
    } else {
        decision
    };
    v1::Decision {
        outcome: v1::DecisionOutcome::Unspecified as i32,
        decided_at: None,
        ..decision_to_proto(&shown)
    }
}

/// An ESCALATED proposal with its [`waiting_decision`].
pub fn escalated_to_proto(
    proposal: &Proposal,
    escalation: &Escalation,
    votes: &[Vote],
    agent_viewer: bool,
) -> v1::Proposal {
    v1::Proposal {
        decision: Some(waiting_decision(proposal, escalation, votes, agent_viewer)),
        ..proposal_to_proto(proposal, agent_viewer)
    }
}

/// One open escalation of `ListEscalations`; agent credentials get no votes.
pub fn escalation_to_proto(
    proposal: &Proposal,
    escalation: &Escalation,
    votes: &[Vote],
    agent_viewer: bool,
) -> v1::Escalation {
    let proposal = escalated_to_proto(proposal, escalation, votes, agent_viewer);
    v1::Escalation {
        route_id: escalation.route_id.clone(),
        votes: proposal
            .decision
            .as_ref()
            .map(|d| d.votes.clone())
            .unwrap_or_default(),
        proposal: Some(proposal),
        approvals_required: escalation.approvals_required,
        expires_at: Some(timestamp(escalation.expires_at)),
    }
}

/// Where a page of `ListEscalations` continues: after this escalation's
/// (opened_at, proposal id). Opaque to callers: tagged, in hex.
pub fn page_token(opened_at: Millis, id: &str) -> String {
    hex::encode(format!("e1:{opened_at}:{id}"))
}

/// The (opened_at, proposal id) a page starts after (`None`: the first
/// page), or an error naming `page_token`.
pub fn page_after(token: &str) -> Result<Option<(Millis, String)>, FieldError> {
    decode_page_token(token, |text| {
        let (at, id) = text.strip_prefix("e1:")?.split_once(':')?;
        let at = at.parse().ok()?;
        (!id.is_empty()).then(|| (at, id.to_owned()))
    })
}

/// The filters of a `ListEscalations` request, checked (INVALID_ARGUMENT
/// naming the field); `awaiting_me` keeps what awaits `caller`'s vote at
/// `now`.
pub fn inbox_filter(
    request: &v1::ListEscalationsRequest,
    caller: &Caller<'_>,
    now: Millis,
) -> Result<InboxFilter, FieldError> {
    validate_filter(InboxFilterInput {
        action: &request.action,
        target: &request.target,
        route_id: &request.route_id,
        operator: &request.operator,
        awaiting: request.awaiting_me.then(|| Awaiting {
            voter: Voter::of(caller),
            now,
        }),
    })
}

pub fn verdict_to_proto(verdict: Verdict) -> v1::Verdict {
    match verdict {
        Verdict::Approve => v1::Verdict::Approve,
        Verdict::Reject => v1::Verdict::Reject,
    }
}

/// The verdict a request asks for; unset and unknown values are `None`, which
/// `Resolve` refuses as INVALID_ARGUMENT after its permission checks.
pub fn verdict_from_proto(value: i32) -> Option<Verdict> {
    match v1::Verdict::try_from(value) {
        Ok(v1::Verdict::Approve) => Some(Verdict::Approve),
        Ok(v1::Verdict::Reject) => Some(Verdict::Reject),
        Ok(v1::Verdict::Unspecified) | Err(_) => None,
    }
}

pub fn vote_to_proto(vote: &Vote) -> v1::Vote {
    v1::Vote {
        person: vote.person.clone(),
        key_id: vote.key_id.clone(),
        verdict: verdict_to_proto(vote.verdict) as i32,
        comment: vote.comment.clone(),
        at: Some(timestamp(vote.at)),
    }
}

fn class_from_proto(field: &str, value: i32) -> Result<OperationClass, FieldError> {
    match v1::OperationClass::try_from(value) {
        Ok(v1::OperationClass::Read) => Ok(OperationClass::Read),
        Ok(v1::OperationClass::Write) => Ok(OperationClass::Write),
        Ok(v1::OperationClass::Destructive) => Ok(OperationClass::Destructive),
        Ok(v1::OperationClass::Unspecified) => Err(FieldError::new(field, "must be set")),
        Err(_) => Err(FieldError::new(field, "unknown value")),
    }
}

/// The match of a route or a model profile (`owner`, named in the field of
/// an error) from the wire, its enums read; the domain checks the rest.
pub fn match_from_proto(
    owner: &str,
    matcher: Option<v1::RouteMatch>,
) -> Result<RouteMatch, FieldError> {
    let matcher = matcher.unwrap_or_default();
    let classes_field = format!("{owner}.match.classes");
    let classes = matcher
        .classes
        .into_iter()
        .map(|c| class_from_proto(&classes_field, c))
        .collect::<Result<_, _>>()?;
    let radii_field = format!("{owner}.match.blast_radii");
    let blast_radii = matcher
        .blast_radii
        .into_iter()
        .map(|r| blast_radius_from_proto(&radii_field, r))
        .collect::<Result<_, _>>()?;
    Ok(RouteMatch {
        actions: matcher.actions,
        classes,
        blast_radii,
        target_selector: matcher.target_selector.into_iter().collect(),
    })
}

pub fn match_to_proto(m: &RouteMatch) -> v1::RouteMatch {
    v1::RouteMatch {
        actions: m.actions.clone(),
        classes: m
            .classes
            .iter()
            .map(|c| class_to_proto(*c) as i32)
            .collect(),
        blast_radii: m
            .blast_radii
            .iter()
            .map(|r| blast_radius_to_proto(*r) as i32)
            .collect(),
        target_selector: m
            .target_selector
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    }
}

/// A `google.protobuf.Duration` in milliseconds (sub-millisecond parts dropped).
fn duration_ms(field: &str, d: &Duration) -> Result<Millis, FieldError> {
    d.seconds
        .checked_mul(1000)
        .and_then(|ms| ms.checked_add(i64::from(d.nanos) / 1_000_000))
        .ok_or_else(|| FieldError::new(field, "out of range"))
}

fn duration(ms: Millis) -> Duration {
    Duration {
        seconds: ms.div_euclid(1000),
        nanos: (ms.rem_euclid(1000) * 1_000_000) as i32,
    }
}

/// A wire route, checked and with its defaults applied, or the first field
/// that breaks a rule.
pub fn route_from_proto(route: v1::Route) -> Result<Route, FieldError> {
    let matcher = match_from_proto("route", route.r#match)?;
    let expires_after_ms = route
        .expires_after
        .as_ref()
        .map(|d| duration_ms("route.expires_after", d))
        .transpose()?;
    validate_route(RouteInput {
        id: route.id,
        matcher,
        approvals_required: route.approvals_required,
        approver_roles: route.approver_roles,
        expires_after_ms,
        escalate_on: route.escalate_on,
    })
}

pub fn route_to_proto(route: &Route) -> v1::Route {
    v1::Route {
        id: route.id.clone(),
        r#match: Some(match_to_proto(&route.matcher)),
        approvals_required: route.approvals_required,
        approver_roles: route
            .approver_roles
            .iter()
            .map(|r| r.as_str().to_owned())
            .collect(),
        expires_after: Some(duration(route.expires_after_ms)),
        escalate_on: route.escalate_on.clone(),
    }
}

#[cfg(test)]
mod tests {
    use countersign_domain::{BlastRadius, ProposalState, Role};

    use super::*;
    use crate::convert::state_to_proto;

    fn wire_route() -> v1::Route {
        v1::Route {
            id: "prod-db".into(),
            r#match: Some(v1::RouteMatch {
                actions: vec!["db_*".into()],
                classes: vec![v1::OperationClass::Destructive as i32],
                blast_radii: vec![v1::BlastRadius::Cluster as i32],
                target_selector: [("env".to_owned(), "production".to_owned())].into(),
            }),
            approvals_required: 2,
            approver_roles: vec!["oncall".into()],
            expires_after: Some(Duration {
                seconds: 900,
                nanos: 0,
            }),
            escalate_on: vec!["sop".into(), "rollback".into(), "blast_radius".into()],
        }
    }

    #[test]
    fn a_route_survives_the_round_trip_through_the_wire() {
        let route = route_from_proto(wire_route()).unwrap();
        assert_eq!(route.expires_after_ms, 900_000);
        assert_eq!(route.approver_roles, [Role::Oncall]);
        assert_eq!(route.matcher.blast_radii, [BlastRadius::Cluster]);
        assert_eq!(route_to_proto(&route), wire_route());
        assert_eq!(route_from_proto(route_to_proto(&route)).unwrap(), route);
    }

    #[test]
    fn a_bare_route_gets_its_defaults_and_zero_approvals_is_refused() {
        let bare = v1::Route {
            id: "r".into(),
            approvals_required: 1,
            ..Default::default()
        };
        let route = route_from_proto(bare.clone()).unwrap();
        assert_eq!(route.expires_after_ms, 3_600_000);
        assert_eq!(route.approver_roles, [Role::Oncall, Role::Admin]);
        let zero = v1::Route {
            approvals_required: 0,
            ..bare
        };
        assert_eq!(
            route_from_proto(zero).unwrap_err().field,
            "route.approvals_required"
        );
    }

    #[test]
    fn bad_wire_values_name_their_field() {
        let mut r = wire_route();
        r.r#match.as_mut().unwrap().classes = vec![0];
        assert_eq!(
            route_from_proto(r).unwrap_err().field,
            "route.match.classes"
        );
        let mut r = wire_route();
        r.r#match.as_mut().unwrap().blast_radii = vec![42];
        assert_eq!(
            route_from_proto(r).unwrap_err().field,
            "route.match.blast_radii"
        );
        for bad in [
            Duration {
                seconds: 0,
                nanos: 0,
            },
            Duration {
                seconds: -5,
                nanos: 0,
            },
            Duration {
                seconds: i64::MAX,
                nanos: 0,
            },
        ] {
            let mut r = wire_route();
            r.expires_after = Some(bad);
            assert_eq!(
                route_from_proto(r).unwrap_err().field,
                "route.expires_after"
            );
        }
        let mut r = wire_route();
        r.escalate_on = vec!["target_state".into()];
        assert_eq!(route_from_proto(r).unwrap_err().field, "route.escalate_on");
    }

    #[test]
    fn unset_or_unknown_verdicts_are_none() {
        assert_eq!(verdict_from_proto(0), None);
        assert_eq!(verdict_from_proto(7), None);
        for &v in Verdict::ALL {
            assert_eq!(verdict_from_proto(verdict_to_proto(v) as i32), Some(v));
            assert_eq!(
                verdict_to_proto(v).as_str_name(),
                format!("VERDICT_{}", v.as_str().to_ascii_uppercase())
            );
        }
    }

    #[test]
    fn every_proposal_state_has_its_wire_name() {
        for &state in ProposalState::ALL {
            assert_eq!(
                state_to_proto(state).as_str_name(),
                format!("PROPOSAL_STATE_{}", state.as_str().to_ascii_uppercase())
            );
        }
    }

    /// An escalation under `prod-db` needing two people, its `sop` gate
    /// failed, with ann's approval and comment.
    fn waiting() -> (countersign_domain::Proposal, Escalation, Vec<Vote>) {
        use countersign_domain::{GateResult, gates::GATES};
        let proposal: countersign_domain::Proposal = serde_json::from_value(serde_json::json!({
            "id": "p1", "tenant": "acme", "state": "escalated", "submitted_by": "bot",
            "submitted_by_person": "sam@example.com",
            "created_at": 1, "updated_at": 2, "decision": null, "suppressed_retries": 0,
            "cancel_reason": null,
            "spec": {
                "action": "db_failover", "class": "destructive", "target": "db-1",
                "parameters": {}, "reason": "primary down", "blast_radius": "cluster",
                "operator": "alice", "context_summary": "", "incident_id": "", "labels": {},
                "rollback_plan": "", "force_approve_no_sop": false, "idempotency_key": ""
            }
        }))
        .unwrap();
        let escalation = Escalation {
            route_id: "prod-db".into(),
            approvals_required: 2,
            approver_roles: vec![Role::Oncall],
            opened_at: 1_000,
            expires_at: 3_601_000,
            gates: GATES
                .iter()
                .map(|g| GateResult {
                    gate: (*g).into(),
                    passed: *g != "sop",
                    detail: format!("{g} detail"),
                })
                .collect(),
            sop_id: None,
            sop_version: None,
            rollback_path: None,
            reviewer: "w1".into(),
            review_latency_ms: 4,
            model: Some(countersign_domain::model::ModelReview {
                profile_id: "db".into(),
                endpoint: "local".into(),
                model: "qwen2.5-7b-instruct".into(),
                verdict: "unsure".into(),
                latency_ms: 900,
                usage: Default::default(),
            }),
        };
        let votes = vec![Vote {
            person: "ann@example.com".into(),
            key_id: "k1".into(),
            verdict: Verdict::Approve,
            comment: "ann's note".into(),
            at: 2_000,
        }];
        (proposal, escalation, votes)
    }

    #[test]
    fn an_escalated_proposal_shows_its_gates_route_and_votes_with_no_outcome() {
        let (proposal, escalation, votes) = waiting();
        let wire = escalated_to_proto(&proposal, &escalation, &votes, false);
        assert_eq!(wire.state, v1::ProposalState::Escalated as i32);
        assert_eq!(wire.submitted_by_person, "sam@example.com");
        let d = wire.decision.unwrap();
        assert_eq!(d.outcome, v1::DecisionOutcome::Unspecified as i32);
        assert_eq!(d.decided_at, None);
        assert_eq!(d.route_id, "prod-db");
        assert_eq!(d.gates.len(), 5);
        assert_eq!(d.missing_gates, ["sop"]);
        assert_eq!(d.votes.len(), 1);
        assert_eq!(d.model.map(|m| m.verdict).as_deref(), Some("unsure"));
        assert!(d.reason.contains("1 of 2 approvals"), "{}", d.reason);
        assert!(
            d.summary.starts_with("Decision: escalated"),
            "{}",
            d.summary
        );
        assert_eq!(d.agent_message, AGENT_AWAITING_HUMAN);
        let listed = escalation_to_proto(&proposal, &escalation, &votes, false);
        assert_eq!(listed.votes.len(), 1);
        assert_eq!(listed.approvals_required, 2);
        assert_eq!(
            crate::convert::millis(&listed.expires_at.unwrap()),
            3_601_000
        );
    }

    #[test]
    fn an_agent_is_told_only_that_people_are_deciding() {
        let (proposal, escalation, votes) = waiting();
        let listed = escalation_to_proto(&proposal, &escalation, &votes, true);
        assert!(listed.votes.is_empty());
        let d = listed.proposal.unwrap().decision.unwrap();
        assert_eq!(d.agent_message, AGENT_AWAITING_HUMAN);
        assert_eq!(d.outcome, v1::DecisionOutcome::Unspecified as i32);
        assert!(d.reason.is_empty() && d.summary.is_empty());
        assert!(d.gates.is_empty() && d.missing_gates.is_empty() && d.votes.is_empty());
        assert_eq!(d.model, None);
        assert!(!format!("{d:?}").contains("ann's note"));
    }

    #[test]
    fn inbox_page_tokens_round_trip_and_refuse_what_the_service_did_not_issue() {
        for (at, id) in [
            (0, "p1"),
            (1_764_000_000_123, "01KB:with:colons"),
            (-5, "x"),
        ] {
            assert_eq!(
                page_after(&page_token(at, id)),
                Ok(Some((at, id.to_owned())))
            );
        }
        assert_eq!(page_after(""), Ok(None));
        let sops =
            crate::convert::reference::page_token(crate::convert::reference::List::Sops, "p1");
        for bad in [
            "zz".to_owned(),
            sops,
            hex::encode("e1:12:"),
            hex::encode("e1:soon:p1"),
            hex::encode("e1:12"),
        ] {
            assert_eq!(page_after(&bad).unwrap_err().field, "page_token", "{bad}");
        }
    }

    #[test]
    fn a_vote_keeps_its_time_to_the_millisecond() {
        let vote = Vote {
            person: "ann@example.com".into(),
            key_id: "k1".into(),
            verdict: Verdict::Reject,
            comment: "no".into(),
            at: 1_764_000_000_123,
        };
        let wire = vote_to_proto(&vote);
        assert_eq!(wire.verdict, v1::Verdict::Reject as i32);
        assert_eq!(crate::convert::millis(&wire.at.unwrap()), vote.at);
    }
}
