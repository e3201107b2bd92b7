//! What a coordinator proposes, and the stored proposal.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::{Millis, decision::Decision, state::ProposalState};

crate::named_enum! {
    /// How far a mutating operation reaches.
    pub enum BlastRadius as "blast radius" {
        SingleDevice => "single_device",
        Cluster => "cluster",
        TenantWide => "tenant_wide",
    }
}

crate::named_enum! {
    /// Read operations are never reviewed, so never submitted.
    pub enum OperationClass as "operation class" {
        Read => "read",
        Write => "write",
        Destructive => "destructive",
    }
}

/// A proposal as submitted. Maps are ordered, so its JSON form is canonical.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProposalSpec {
    pub action: String,
    #[serde(with = "by_name::class")]
    pub class: OperationClass,
    pub target: String,
    /// A JSON object (google.protobuf.Struct on the wire).
    pub parameters: serde_json::Map<String, serde_json::Value>,
    pub reason: String,
    #[serde(with = "by_name::blast_radius")]
    pub blast_radius: BlastRadius,
    pub operator: String,
    pub context_summary: String,
    pub incident_id: String,
    pub labels: BTreeMap<String, String>,
    pub rollback_plan: String,
    pub force_approve_no_sop: bool,
    pub idempotency_key: String,
}

impl ProposalSpec {
    /// Canonical JSON: fixed field order, keys of every map sorted.
    pub fn canonical_json(&self) -> String {
        serde_json::to_string(self).expect("a spec always serializes")
    }

    /// SHA-256 (hex) of everything but the idempotency key: two submissions with
    /// the same key are "the same spec" exactly when these digests match.
    pub fn digest(&self) -> String {
        let mut without_key = self.clone();
        without_key.idempotency_key.clear();
        hex::encode(Sha256::digest(without_key.canonical_json().as_bytes()))
    }
}

/// A stored proposal (serialisable: a shared cache keeps rejected ones).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Proposal {
    pub id: String,
    pub tenant: String,
    pub spec: ProposalSpec,
    #[serde(with = "by_name::state")]
    pub state: ProposalState,
    pub submitted_by: String,
    /// The person behind the submitting key (for an agent key, the person the
    /// agent acts for), recorded at submit; none when the key names no person.
    /// Absent from the JSON when none, so that JSON is unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submitted_by_person: Option<String>,
    pub created_at: Millis,
    pub updated_at: Millis,
    pub decision: Option<Decision>,
    pub suppressed_retries: u64,
    pub cancel_reason: Option<String>,
}

/// One proposal of one tenant, as the reviewer and the outbox name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReviewKey {
    pub tenant: String,
    pub id: String,
}

pub(crate) mod by_name {
    macro_rules! serde_by_name {
        ($module:ident, $ty:ty) => {
            pub mod $module {
                use serde::{Deserialize, Deserializer, Serializer, de::Error};

                pub fn serialize<S: Serializer>(v: &$ty, s: S) -> Result<S::Ok, S::Error> {
                    s.serialize_str(v.as_str())
                }

                pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<$ty, D::Error> {
                    let name = String::deserialize(d)?;
                    name.parse().map_err(D::Error::custom)
                }
            }
        };
    }
    serde_by_name!(class, crate::proposal::OperationClass);
    serde_by_name!(blast_radius, crate::proposal::BlastRadius);
    serde_by_name!(outcome, crate::decision::DecisionOutcome);
    serde_by_name!(state, crate::state::ProposalState);
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The crate's one spec fixture (its other tests change the fields they
    /// are about): a single-device nginx restart.
    pub(crate) fn spec() -> ProposalSpec {
        ProposalSpec {
            action: "host_restart_service".into(),
            class: OperationClass::Write,
            target: "node-01".into(),
            parameters: serde_json::json!({"service": "nginx", "b": 1, "a": [1, 2]})
                .as_object()
                .cloned()
                .unwrap(),
            reason: "502s; nginx OOM".into(),
            blast_radius: BlastRadius::SingleDevice,
            operator: "user_42".into(),
            context_summary: String::new(),
            incident_id: "INC-1".into(),
            labels: BTreeMap::new(),
            rollback_plan: "systemctl start nginx".into(),
            force_approve_no_sop: false,
            idempotency_key: "k1".into(),
        }
    }

    #[test]
    fn the_canonical_form_sorts_parameter_keys() {
        let json = spec().canonical_json();
        assert!(
            json.contains(r#""parameters":{"a":[1,2],"b":1,"service":"nginx"}"#),
            "{json}"
        );
        assert!(json.contains(r#""class":"write""#), "{json}");
    }

    #[test]
    fn the_digest_ignores_the_idempotency_key_but_nothing_else() {
        let a = spec();
        let mut b = spec();
        b.idempotency_key = "another".into();
        assert_eq!(a.digest(), b.digest());
        b.reason.push('!');
        assert_ne!(a.digest(), b.digest());
    }

    #[test]
    fn a_spec_round_trips_through_its_canonical_json() {
        let a = spec();
        let back: ProposalSpec = serde_json::from_str(&a.canonical_json()).unwrap();
        assert_eq!(a, back);
    }

    #[test]
    fn a_rejected_proposal_with_its_decision_round_trips_through_json() {
        use crate::decision::{DecisionOutcome, GateResult};
        let rejected = Proposal {
            id: "01KB".into(),
            tenant: "acme".into(),
            spec: spec(),
            state: ProposalState::Rejected,
            submitted_by: "sre-bot".into(),
            submitted_by_person: None,
            created_at: 1,
            updated_at: 2,
            decision: Some(Decision {
                outcome: DecisionOutcome::Reject,
                reason: "target_state: unknown".into(),
                agent_message: "ask a human".into(),
                sop_id: Some("SOP-007".into()),
                sop_version: Some(3),
                rollback_path: None,
                gates: vec![GateResult {
                    gate: "target_state".into(),
                    passed: false,
                    detail: "unknown".into(),
                }],
                missing_gates: vec!["target_state".into()],
                reviewer: "w-1".into(),
                decided_at: 2,
                summary: "Decision: reject".into(),
                sequence: 7,
                digest: "ab".into(),
                review_latency_ms: 1,
                route_id: None,
                votes: Vec::new(),
                model: Some(crate::model::ModelReview {
                    profile_id: "db".into(),
                    endpoint: "local".into(),
                    model: "qwen".into(),
                    verdict: "reject".into(),
                    latency_ms: 840,
                    usage: crate::model::TokenUsage {
                        prompt: 812,
                        completion: 9,
                        cached_prompt: 768,
                    },
                }),
            }),
            suppressed_retries: 4,
            cancel_reason: None,
        };
        let json = serde_json::to_string(&rejected).unwrap();
        assert!(json.contains(r#""state":"rejected""#), "{json}");
        assert!(json.contains(r#""outcome":"reject""#), "{json}");
        assert!(json.contains(r#""model":{"profile_id":"db""#), "{json}");
        let back: Proposal = serde_json::from_str(&json).unwrap();
        assert_eq!(back, rejected);
        let unreviewed = serde_json::to_string(&Proposal {
            decision: rejected
                .decision
                .clone()
                .map(|d| Decision { model: None, ..d }),
            ..rejected
        })
        .unwrap();
        assert!(!unreviewed.contains("model"), "{unreviewed}");
    }
}
