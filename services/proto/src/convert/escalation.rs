//! Routes and votes on the wire (`PolicyService`, `EscalationService` and
//! the decision's `votes`).

use countersign_domain::{
    FieldError, Millis, OperationClass,
    escalation::{Route, RouteInput, RouteMatch, Verdict, Vote, validate_route},
};
use prost_types::Duration;

use super::{blast_radius_to_proto, class_to_proto, reference::blast_radius_from_proto, timestamp};
use crate::v1;

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
