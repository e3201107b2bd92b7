//! Model profiles and model reviews on the wire (`PolicyService` and the
//! decision's `model`).

use countersign_domain::{
    FieldError,
    model::{ModelProfile, ModelProfileInput, ModelReview, OnUnsure, validate_profile},
};

use super::escalation::{match_from_proto, match_to_proto};
use crate::v1;

fn on_unsure_to_proto(on_unsure: OnUnsure) -> v1::OnUnsure {
    match on_unsure {
        OnUnsure::Reject => v1::OnUnsure::Reject,
        OnUnsure::Escalate => v1::OnUnsure::Escalate,
    }
}

/// The name `validate_profile` reads: unset is empty (its default, reject).
fn on_unsure_name(value: i32) -> Result<&'static str, FieldError> {
    match v1::OnUnsure::try_from(value) {
        Ok(v1::OnUnsure::Unspecified) => Ok(""),
        Ok(v1::OnUnsure::Reject) => Ok(OnUnsure::Reject.as_str()),
        Ok(v1::OnUnsure::Escalate) => Ok(OnUnsure::Escalate.as_str()),
        Err(_) => Err(FieldError::new("profile.on_unsure", "unknown value")),
    }
}

/// A wire profile, checked against the names of the configured endpoints
/// (`endpoints`), or the first field that breaks a rule.
pub fn profile_from_proto(
    profile: v1::ModelProfile,
    endpoints: &[&str],
) -> Result<ModelProfile, FieldError> {
    let matcher = match_from_proto("profile", profile.r#match)?;
    let on_unsure = on_unsure_name(profile.on_unsure)?;
    validate_profile(
        ModelProfileInput {
            id: profile.id,
            matcher,
            endpoint: profile.endpoint,
            on_unsure: on_unsure.to_owned(),
            calls_per_minute: profile.calls_per_minute,
        },
        endpoints,
    )
}

pub fn profile_to_proto(profile: &ModelProfile) -> v1::ModelProfile {
    v1::ModelProfile {
        id: profile.id.clone(),
        r#match: Some(match_to_proto(&profile.matcher)),
        endpoint: profile.endpoint.clone(),
        on_unsure: on_unsure_to_proto(profile.on_unsure) as i32,
        calls_per_minute: profile.calls_per_minute,
    }
}

pub fn review_to_proto(review: &ModelReview) -> v1::ModelReview {
    v1::ModelReview {
        profile_id: review.profile_id.clone(),
        endpoint: review.endpoint.clone(),
        model: review.model.clone(),
        verdict: review.verdict.clone(),
        latency_ms: review.latency_ms,
        prompt_tokens: review.usage.prompt,
        completion_tokens: review.usage.completion,
        cached_prompt_tokens: review.usage.cached_prompt,
    }
}

#[cfg(test)]
mod tests {
    use countersign_domain::{BlastRadius, OperationClass, model::TokenUsage};

    use super::*;

    fn wire_profile() -> v1::ModelProfile {
        v1::ModelProfile {
            id: "db-changes".into(),
            r#match: Some(v1::RouteMatch {
                actions: vec!["db_*".into()],
                classes: vec![v1::OperationClass::Destructive as i32],
                blast_radii: vec![v1::BlastRadius::Cluster as i32],
                target_selector: [("env".to_owned(), "production".to_owned())].into(),
            }),
            endpoint: "local".into(),
            on_unsure: v1::OnUnsure::Escalate as i32,
            calls_per_minute: 30,
        }
    }

    #[test]
    fn a_profile_survives_the_round_trip_through_the_wire() {
        let profile = profile_from_proto(wire_profile(), &["local"]).unwrap();
        assert_eq!(profile.on_unsure, OnUnsure::Escalate);
        assert_eq!(profile.matcher.classes, [OperationClass::Destructive]);
        assert_eq!(profile.matcher.blast_radii, [BlastRadius::Cluster]);
        assert_eq!(profile_to_proto(&profile), wire_profile());
        let bare = v1::ModelProfile {
            id: "all".into(),
            endpoint: "local".into(),
            ..Default::default()
        };
        let profile = profile_from_proto(bare, &["local"]).unwrap();
        assert_eq!(profile.on_unsure, OnUnsure::Reject, "unset is reject");
        assert_eq!(
            profile_to_proto(&profile).on_unsure,
            v1::OnUnsure::Reject as i32
        );
    }

    #[test]
    fn bad_wire_values_name_their_field() {
        type Breaks = fn(&mut v1::ModelProfile);
        let cases: [(Breaks, &str); 5] = [
            (|p| p.on_unsure = 9, "profile.on_unsure"),
            (
                |p| p.r#match.as_mut().unwrap().classes = vec![0],
                "profile.match.classes",
            ),
            (
                |p| p.r#match.as_mut().unwrap().blast_radii = vec![42],
                "profile.match.blast_radii",
            ),
            (
                |p| p.endpoint = "http://169.254.169.254/latest".into(),
                "profile.endpoint",
            ),
            (|p| p.id = String::new(), "profile.id"),
        ];
        for (breaks, field) in cases {
            let mut wire = wire_profile();
            breaks(&mut wire);
            let error = profile_from_proto(wire, &["local", "remote"]).unwrap_err();
            assert_eq!(error.field, field, "{error}");
        }
    }

    fn review() -> ModelReview {
        ModelReview {
            profile_id: "db-changes".into(),
            endpoint: "local".into(),
            model: "qwen2.5-7b-instruct".into(),
            verdict: "timeout".into(),
            latency_ms: 60_000,
            usage: TokenUsage {
                prompt: 812,
                completion: 9,
                cached_prompt: 768,
            },
        }
    }

    #[test]
    fn a_review_shows_its_verdict_latency_and_tokens() {
        let wire = review_to_proto(&review());
        assert_eq!(
            (wire.verdict.as_str(), wire.latency_ms),
            ("timeout", 60_000)
        );
        assert_eq!(
            (
                wire.prompt_tokens,
                wire.completion_tokens,
                wire.cached_prompt_tokens
            ),
            (812, 9, 768)
        );
    }

    #[test]
    fn only_people_see_a_decisions_model_review() {
        let mut proposal: countersign_domain::Proposal =
            serde_json::from_value(serde_json::json!({
                "id": "p1", "tenant": "acme", "state": "rejected", "submitted_by": "bot",
                "created_at": 1, "updated_at": 2, "suppressed_retries": 0, "cancel_reason": null,
                "decision": {
                    "outcome": "reject", "reason": "model: timeout", "agent_message": "no",
                    "sop_id": null, "sop_version": null, "rollback_path": null, "gates": [],
                    "missing_gates": ["model"], "reviewer": "w", "decided_at": 2, "summary": "",
                    "sequence": 0, "digest": "", "review_latency_ms": 1
                },
                "spec": {
                    "action": "db_failover", "class": "destructive", "target": "db-1",
                    "parameters": {}, "reason": "primary down", "blast_radius": "cluster",
                    "operator": "alice", "context_summary": "", "incident_id": "", "labels": {},
                    "rollback_plan": "", "force_approve_no_sop": false, "idempotency_key": ""
                }
            }))
            .unwrap();
        let unreviewed = crate::convert::proposal_to_proto(&proposal, false);
        assert_eq!(unreviewed.decision.unwrap().model, None);
        proposal.decision.as_mut().unwrap().model = Some(review());
        let person = crate::convert::proposal_to_proto(&proposal, false);
        assert_eq!(
            person.decision.unwrap().model,
            Some(review_to_proto(&review()))
        );
        let agent = crate::convert::proposal_to_proto(&proposal, true);
        assert_eq!(agent.decision.unwrap().model, None);
    }
}
