//! Conversions between the wire types and the domain types.

use countersign_domain::{
    BlastRadius, Decision, DecisionOutcome, FieldError, GateResult, Millis, OperationClass,
    Proposal, ProposalSpec, ProposalState,
};
use prost_types::{ListValue, Struct, Timestamp, Value, value::Kind};
use serde_json::{Map, Number, Value as Json};

use crate::v1;

pub mod audit;
pub mod escalation;
pub mod event;
pub mod model;

/// Most items one page of a list may hold.
pub const MAX_PAGE_SIZE: u32 = 1_000;
/// A page when the request names no size.
pub const DEFAULT_PAGE_SIZE: u32 = 100;

/// The value a page token carries (`None`: the first page), decoded from the
/// hex of its text by `parse`; a token that is not hex of UTF-8 text, or that
/// `parse` refuses, was not issued by this service: an error naming
/// `page_token`.
pub(crate) fn decode_page_token<T>(
    token: &str,
    parse: impl FnOnce(&str) -> Option<T>,
) -> Result<Option<T>, FieldError> {
    if token.is_empty() {
        return Ok(None);
    }
    hex::decode(token)
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .and_then(|text| parse(&text))
        .map(Some)
        .ok_or_else(|| FieldError::new("page_token", "is not a token this service issued"))
}

/// A request's `page_size`: 0 is the default, more than the maximum is refused.
pub fn page_size(requested: u32) -> Result<u32, FieldError> {
    match requested {
        0 => Ok(DEFAULT_PAGE_SIZE),
        n if n <= MAX_PAGE_SIZE => Ok(n),
        _ => Err(FieldError::new(
            "page_size",
            format!("must be at most {MAX_PAGE_SIZE}"),
        )),
    }
}

/// A `google.protobuf.Duration` that must not be negative, as a
/// `std::time::Duration`; malformed (nanos out of range, or of the other sign
/// than the seconds) or negative, an error naming `field`.
pub fn wait_from_proto(
    field: &str,
    d: &prost_types::Duration,
) -> Result<std::time::Duration, FieldError> {
    let nanos_in_range = d.nanos.unsigned_abs() < 1_000_000_000;
    let signs_agree = !(d.seconds > 0 && d.nanos < 0 || d.seconds < 0 && d.nanos > 0);
    if !nanos_in_range || !signs_agree {
        return Err(FieldError::new(field, "is not a valid duration"));
    }
    if d.seconds < 0 || d.nanos < 0 {
        return Err(FieldError::new(field, "must not be negative"));
    }
    Ok(std::time::Duration::new(d.seconds as u64, d.nanos as u32))
}

/// A wire spec becomes a domain spec, or the first field that cannot.
pub fn spec_from_proto(spec: v1::ProposalSpec) -> Result<ProposalSpec, FieldError> {
    let class = match v1::OperationClass::try_from(spec.class) {
        Ok(v1::OperationClass::Unspecified) => {
            return Err(FieldError::new("spec.class", "must be set"));
        }
        Ok(v1::OperationClass::Read) => OperationClass::Read,
        Ok(v1::OperationClass::Write) => OperationClass::Write,
        Ok(v1::OperationClass::Destructive) => OperationClass::Destructive,
        Err(_) => return Err(FieldError::new("spec.class", "unknown value")),
    };
    let blast_radius = match v1::BlastRadius::try_from(spec.blast_radius) {
        Ok(v1::BlastRadius::Unspecified) => {
            return Err(FieldError::new("spec.blast_radius", "must be set"));
        }
        Ok(v1::BlastRadius::SingleDevice) => BlastRadius::SingleDevice,
        Ok(v1::BlastRadius::Cluster) => BlastRadius::Cluster,
        Ok(v1::BlastRadius::TenantWide) => BlastRadius::TenantWide,
        Err(_) => return Err(FieldError::new("spec.blast_radius", "unknown value")),
    };
    let parameters = match spec.parameters {
        Some(s) => {
            struct_to_json(s).map_err(|message| FieldError::new("spec.parameters", message))?
        }
        None => Map::new(),
    };
    Ok(ProposalSpec {
        action: spec.action,
        class,
        target: spec.target,
        parameters,
        reason: spec.reason,
        blast_radius,
        operator: spec.operator,
        context_summary: spec.context_summary,
        incident_id: spec.incident_id,
        labels: spec.labels.into_iter().collect(),
        rollback_plan: spec.rollback_plan,
        force_approve_no_sop: spec.force_approve_no_sop,
        idempotency_key: spec.idempotency_key,
    })
}

pub fn spec_to_proto(spec: &ProposalSpec) -> v1::ProposalSpec {
    v1::ProposalSpec {
        action: spec.action.clone(),
        class: class_to_proto(spec.class) as i32,
        target: spec.target.clone(),
        parameters: Some(json_to_struct(&spec.parameters)),
        reason: spec.reason.clone(),
        blast_radius: blast_radius_to_proto(spec.blast_radius) as i32,
        operator: spec.operator.clone(),
        context_summary: spec.context_summary.clone(),
        incident_id: spec.incident_id.clone(),
        labels: spec
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        rollback_plan: spec.rollback_plan.clone(),
        force_approve_no_sop: spec.force_approve_no_sop,
        idempotency_key: spec.idempotency_key.clone(),
    }
}

pub fn class_to_proto(class: OperationClass) -> v1::OperationClass {
    match class {
        OperationClass::Read => v1::OperationClass::Read,
        OperationClass::Write => v1::OperationClass::Write,
        OperationClass::Destructive => v1::OperationClass::Destructive,
    }
}

pub fn blast_radius_to_proto(radius: BlastRadius) -> v1::BlastRadius {
    match radius {
        BlastRadius::SingleDevice => v1::BlastRadius::SingleDevice,
        BlastRadius::Cluster => v1::BlastRadius::Cluster,
        BlastRadius::TenantWide => v1::BlastRadius::TenantWide,
    }
}

pub fn state_to_proto(state: ProposalState) -> v1::ProposalState {
    match state {
        ProposalState::Pending => v1::ProposalState::Pending,
        ProposalState::Reviewing => v1::ProposalState::Reviewing,
        ProposalState::Approved => v1::ProposalState::Approved,
        ProposalState::Rejected => v1::ProposalState::Rejected,
        ProposalState::Cancelled => v1::ProposalState::Cancelled,
        ProposalState::TimedOut => v1::ProposalState::TimedOut,
        ProposalState::Escalated => v1::ProposalState::Escalated,
    }
}

pub fn outcome_to_proto(outcome: DecisionOutcome) -> v1::DecisionOutcome {
    match outcome {
        DecisionOutcome::Approve => v1::DecisionOutcome::Approve,
        DecisionOutcome::Reject => v1::DecisionOutcome::Reject,
        DecisionOutcome::TimedOut => v1::DecisionOutcome::TimedOut,
    }
}

pub fn timestamp(ms: Millis) -> Timestamp {
    Timestamp {
        seconds: ms.div_euclid(1000),
        nanos: (ms.rem_euclid(1000) * 1_000_000) as i32,
    }
}

/// A timestamp this service wrote (always in range) as milliseconds; for a
/// caller's timestamp use [`millis_from_proto`], which refuses what is out of range.
pub fn millis(ts: &Timestamp) -> Millis {
    ts.seconds
        .saturating_mul(1000)
        .saturating_add(i64::from(ts.nanos) / 1_000_000)
}

/// The range of `google.protobuf.Timestamp`: 0001-01-01T00:00:00Z to
/// 9999-12-31T23:59:59.999999999Z, in whole seconds since the epoch.
const TIMESTAMP_SECONDS: std::ops::RangeInclusive<i64> = -62_135_596_800..=253_402_300_799;

/// A caller's timestamp as milliseconds, or an error naming `field`: seconds
/// outside the range of `google.protobuf.Timestamp` or nanos outside
/// 0..=999,999,999 are refused (never wrapped or clamped into a filter).
pub fn millis_from_proto(field: &str, ts: &Timestamp) -> Result<Millis, FieldError> {
    if !(0..=999_999_999).contains(&ts.nanos) {
        return Err(FieldError::new(
            field,
            format!("nanos must be 0 to 999999999 (got {})", ts.nanos),
        ));
    }
    if !TIMESTAMP_SECONDS.contains(&ts.seconds) {
        return Err(FieldError::new(
            field,
            format!(
                "must be between 0001-01-01T00:00:00Z and 9999-12-31T23:59:59Z (got {} s)",
                ts.seconds
            ),
        ));
    }
    Ok(millis(ts))
}

fn gate_to_proto(gate: &GateResult) -> v1::GateResult {
    v1::GateResult {
        gate: gate.gate.clone(),
        passed: gate.passed,
        detail: gate.detail.clone(),
    }
}

pub fn decision_to_proto(decision: &Decision) -> v1::Decision {
    v1::Decision {
        outcome: outcome_to_proto(decision.outcome) as i32,
        reason: decision.reason.clone(),
        agent_message: decision.agent_message.clone(),
        sop_id: decision.sop_id.clone().unwrap_or_default(),
        sop_version: decision.sop_version.unwrap_or_default(),
        rollback_path: decision.rollback_path.clone().unwrap_or_default(),
        gates: decision.gates.iter().map(gate_to_proto).collect(),
        missing_gates: decision.missing_gates.clone(),
        reviewer: decision.reviewer.clone(),
        decided_at: Some(timestamp(decision.decided_at)),
        summary: decision.summary.clone(),
        sequence: decision.sequence,
        digest: decision.digest.clone(),
        review_latency_ms: decision.review_latency_ms,
        route_id: decision.route_id.clone().unwrap_or_default(),
        votes: decision
            .votes
            .iter()
            .map(escalation::vote_to_proto)
            .collect(),
        model: decision.model.as_ref().map(model::review_to_proto),
        receipt: None,
    }
}

pub fn receipt_to_proto(r: &countersign_domain::receipt::Receipt) -> v1::Receipt {
    v1::Receipt {
        tenant: r.tenant.clone(),
        proposal_id: r.proposal_id.clone(),
        spec_digest: r.spec_digest.clone(),
        outcome: r.outcome.clone(),
        decided_at: r.decided_at,
        expires_at: r.expires_at,
        signature: r.signature.clone(),
    }
}

pub fn receipt_from_proto(r: v1::Receipt) -> countersign_domain::receipt::Receipt {
    countersign_domain::receipt::Receipt {
        tenant: r.tenant,
        proposal_id: r.proposal_id,
        spec_digest: r.spec_digest,
        outcome: r.outcome,
        decided_at: r.decided_at,
        expires_at: r.expires_at,
        signature: r.signature,
    }
}

/// The proposal as `viewer` may see it: agent credentials get the terse view
/// of any decision (no reason, no gate details, no missing-gate names).
pub fn proposal_to_proto(proposal: &Proposal, agent_viewer: bool) -> v1::Proposal {
    let decision = proposal.decision.as_ref().map(|d| {
        if agent_viewer {
            decision_to_proto(&d.for_agent())
        } else {
            decision_to_proto(d)
        }
    });
    v1::Proposal {
        id: proposal.id.clone(),
        tenant: proposal.tenant.clone(),
        spec: Some(spec_to_proto(&proposal.spec)),
        state: state_to_proto(proposal.state) as i32,
        submitted_by: proposal.submitted_by.clone(),
        created_at: Some(timestamp(proposal.created_at)),
        updated_at: Some(timestamp(proposal.updated_at)),
        decision,
        suppressed_retries: proposal.suppressed_retries,
        cancel_reason: proposal.cancel_reason.clone().unwrap_or_default(),
        submitted_by_person: proposal.submitted_by_person.clone().unwrap_or_default(),
    }
}

/// A `google.protobuf.Struct` as a JSON object. Non-finite numbers have no JSON
/// form and are refused.
pub fn struct_to_json(s: Struct) -> Result<Map<String, Json>, String> {
    s.fields
        .into_iter()
        .map(|(k, v)| value_to_json(v).map(|v| (k, v)))
        .collect()
}

fn value_to_json(v: Value) -> Result<Json, String> {
    Ok(match v.kind {
        None | Some(Kind::NullValue(_)) => Json::Null,
        Some(Kind::BoolValue(b)) => Json::Bool(b),
        Some(Kind::StringValue(s)) => Json::String(s),
        Some(Kind::NumberValue(n)) => {
            Json::Number(Number::from_f64(n).ok_or_else(|| "numbers must be finite".to_owned())?)
        }
        Some(Kind::StructValue(s)) => Json::Object(struct_to_json(s)?),
        Some(Kind::ListValue(l)) => Json::Array(
            l.values
                .into_iter()
                .map(value_to_json)
                .collect::<Result<_, _>>()?,
        ),
    })
}

pub fn json_to_struct(map: &Map<String, Json>) -> Struct {
    Struct {
        fields: map
            .iter()
            .map(|(k, v)| (k.clone(), json_to_value(v)))
            .collect(),
    }
}

fn json_to_value(v: &Json) -> Value {
    let kind = match v {
        Json::Null => Kind::NullValue(0),
        Json::Bool(b) => Kind::BoolValue(*b),
        Json::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or(f64::NAN)),
        Json::String(s) => Kind::StringValue(s.clone()),
        Json::Array(items) => Kind::ListValue(ListValue {
            values: items.iter().map(json_to_value).collect(),
        }),
        Json::Object(map) => Kind::StructValue(json_to_struct(map)),
    };
    Value { kind: Some(kind) }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_wait_is_a_non_negative_well_formed_duration() {
        use prost_types::Duration as Wire;
        let wire = |seconds, nanos| Wire { seconds, nanos };
        assert_eq!(
            super::wait_from_proto("w", &wire(2, 500_000_000)),
            Ok(std::time::Duration::from_millis(2_500))
        );
        assert_eq!(
            super::wait_from_proto("w", &wire(0, 0)),
            Ok(std::time::Duration::ZERO)
        );
        for (seconds, nanos, message) in [
            (-1, 0, "must not be negative"),
            (0, -1, "must not be negative"),
            (1, 1_000_000_000, "is not a valid duration"),
            (1, -5, "is not a valid duration"),
            (-1, 5, "is not a valid duration"),
        ] {
            let error = super::wait_from_proto("w", &wire(seconds, nanos)).unwrap_err();
            assert_eq!(
                (error.field.as_str(), error.message.as_str()),
                ("w", message)
            );
        }
    }

    use super::*;

    fn wire_spec() -> v1::ProposalSpec {
        v1::ProposalSpec {
            action: "host_restart_service".into(),
            class: v1::OperationClass::Write as i32,
            target: "node-01".into(),
            reason: "OOM".into(),
            blast_radius: v1::BlastRadius::Cluster as i32,
            parameters: Some(json_to_struct(
                serde_json::json!({"service": "nginx", "n": 2.5, "l": [true, null]})
                    .as_object()
                    .unwrap(),
            )),
            ..Default::default()
        }
    }

    #[test]
    fn a_spec_survives_the_round_trip_through_the_wire() {
        let domain = spec_from_proto(wire_spec()).unwrap();
        assert_eq!(domain.blast_radius, BlastRadius::Cluster);
        assert_eq!(spec_from_proto(spec_to_proto(&domain)).unwrap(), domain);
    }

    #[test]
    fn unset_or_unknown_enums_name_their_field() {
        let mut s = wire_spec();
        s.class = 0;
        assert_eq!(spec_from_proto(s).unwrap_err().field, "spec.class");
        let mut s = wire_spec();
        s.blast_radius = 99;
        assert_eq!(spec_from_proto(s).unwrap_err().field, "spec.blast_radius");
    }

    #[test]
    fn non_finite_numbers_are_refused() {
        let mut s = wire_spec();
        s.parameters = Some(Struct {
            fields: [(
                "x".to_owned(),
                Value {
                    kind: Some(Kind::NumberValue(f64::INFINITY)),
                },
            )]
            .into(),
        });
        assert_eq!(spec_from_proto(s).unwrap_err().field, "spec.parameters");
    }

    #[test]
    fn timestamps_out_of_range_are_refused_naming_the_field() {
        let at = |seconds, nanos| Timestamp { seconds, nanos };
        for bad in [
            at(1 << 62, 0),
            at(i64::MAX, 0),
            at(i64::MIN, 0),
            at(253_402_300_800, 0),
            at(-62_135_596_801, 0),
            at(0, -1),
            at(1_764_000_000, 1_000_000_000),
            at(1_764_000_000, i32::MIN),
        ] {
            let error = millis_from_proto("decided_from", &bad).unwrap_err();
            assert_eq!(error.field, "decided_from", "{bad:?}");
        }
        for (good, ms) in [
            (at(0, 0), 0),
            (at(1_764_000_000, 123_999_999), 1_764_000_000_123),
            (at(-62_135_596_800, 0), -62_135_596_800_000),
            (at(253_402_300_799, 999_999_999), 253_402_300_799_999),
        ] {
            assert_eq!(millis_from_proto("decided_from", &good), Ok(ms));
        }
    }

    #[test]
    fn page_sizes_default_and_are_capped() {
        assert_eq!(page_size(0), Ok(DEFAULT_PAGE_SIZE));
        assert_eq!(page_size(1), Ok(1));
        assert_eq!(page_size(MAX_PAGE_SIZE), Ok(MAX_PAGE_SIZE));
        assert_eq!(page_size(MAX_PAGE_SIZE + 1).unwrap_err().field, "page_size");
    }

    #[test]
    fn reference_page_tokens_round_trip_and_belong_to_their_list() {
        use reference::{List, page_after, page_token};
        for id in ["n1", "SOP-007", "node 01 / rack ü"] {
            for list in [List::Sops, List::Targets] {
                assert_eq!(page_after(list, &page_token(list, id)), Ok(Some(id.into())));
            }
        }
        assert_eq!(page_after(List::Sops, ""), Ok(None));
        let other = page_token(List::Targets, "n1");
        assert_eq!(
            page_after(List::Sops, &other).unwrap_err().field,
            "page_token"
        );
        for bad in ["zz", "00", &hex::encode("s1:"), &hex::encode([0xff, 0xfe])] {
            assert_eq!(
                page_after(List::Sops, bad).unwrap_err().field,
                "page_token",
                "{bad:?}"
            );
        }
    }

    #[test]
    fn timestamps_keep_millisecond_precision() {
        for ms in [0, 1, 999, 1_764_000_000_123, -1] {
            assert_eq!(millis(&timestamp(ms)), ms);
        }
    }
}

pub mod reference {
    //! SOPs and targets on the wire.

    use countersign_domain::{
        BlastRadius, FieldError, Sop, Target, TargetStatus, reference::SopInput,
    };

    use super::{blast_radius_to_proto, timestamp};
    use crate::v1;

    /// Which list a page token continues: a token of one is refused by the other.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum List {
        Sops,
        Targets,
    }

    impl List {
        fn prefix(self) -> &'static str {
            match self {
                List::Sops => "s1:",
                List::Targets => "t1:",
            }
        }
    }

    /// Page tokens are opaque to callers: the list's tag and the last id
    /// listed, in hex.
    pub fn page_token(list: List, last_id: &str) -> String {
        hex::encode(format!("{}{last_id}", list.prefix()))
    }

    /// The id a page starts after (`None`: the first page), or an error
    /// naming `page_token`.
    pub fn page_after(list: List, token: &str) -> Result<Option<String>, FieldError> {
        super::decode_page_token(token, |text| {
            let id = text.strip_prefix(list.prefix())?;
            (!id.is_empty()).then(|| id.to_owned())
        })
    }

    pub fn blast_radius_from_proto(field: &str, value: i32) -> Result<BlastRadius, FieldError> {
        match v1::BlastRadius::try_from(value) {
            Ok(v1::BlastRadius::SingleDevice) => Ok(BlastRadius::SingleDevice),
            Ok(v1::BlastRadius::Cluster) => Ok(BlastRadius::Cluster),
            Ok(v1::BlastRadius::TenantWide) => Ok(BlastRadius::TenantWide),
            Ok(v1::BlastRadius::Unspecified) => Err(FieldError::new(field, "must be set")),
            Err(_) => Err(FieldError::new(field, "unknown value")),
        }
    }

    pub fn status_from_proto(value: i32) -> Result<TargetStatus, FieldError> {
        match v1::TargetStatus::try_from(value) {
            Ok(v1::TargetStatus::Online) => Ok(TargetStatus::Online),
            Ok(v1::TargetStatus::Offline) => Ok(TargetStatus::Offline),
            Ok(v1::TargetStatus::RestartLoop) => Ok(TargetStatus::RestartLoop),
            Ok(v1::TargetStatus::Maintenance) => Ok(TargetStatus::Maintenance),
            Ok(v1::TargetStatus::Unspecified) => {
                Err(FieldError::new("target.status", "must be set"))
            }
            Err(_) => Err(FieldError::new("target.status", "unknown value")),
        }
    }

    pub fn status_to_proto(status: TargetStatus) -> v1::TargetStatus {
        match status {
            TargetStatus::Online => v1::TargetStatus::Online,
            TargetStatus::Offline => v1::TargetStatus::Offline,
            TargetStatus::RestartLoop => v1::TargetStatus::RestartLoop,
            TargetStatus::Maintenance => v1::TargetStatus::Maintenance,
        }
    }

    pub fn sop_input_from_proto(sop: v1::Sop) -> Result<SopInput, FieldError> {
        Ok(SopInput {
            max_blast_radius: blast_radius_from_proto(
                "sop.max_blast_radius",
                sop.max_blast_radius,
            )?,
            id: sop.id,
            action: sop.action,
            title: sop.title,
            covers: sop.covers,
            rollback_path: sop.rollback_path,
            selector: sop.selector.into_iter().collect(),
        })
    }

    pub fn sop_to_proto(sop: &Sop) -> v1::Sop {
        v1::Sop {
            id: sop.id.clone(),
            action: sop.action.clone(),
            title: sop.title.clone(),
            covers: sop.covers.clone(),
            rollback_path: sop.rollback_path.clone(),
            max_blast_radius: blast_radius_to_proto(sop.max_blast_radius) as i32,
            selector: sop
                .selector
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            version: sop.version,
            retired: sop.retired,
            updated_at: Some(timestamp(sop.updated_at)),
        }
    }

    pub fn target_to_proto(target: &Target) -> v1::Target {
        v1::Target {
            id: target.id.clone(),
            status: status_to_proto(target.status) as i32,
            labels: target
                .labels
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            updated_at: Some(timestamp(target.updated_at)),
        }
    }
}
