//! The decision log on the wire: entries, filters, checkpoints, verification.

use countersign_domain::{
    DecisionOutcome, FieldError,
    audit::{AuditEntry, AuditFilter, Checkpoint, FailureKind, Verification},
};

use super::{
    blast_radius_to_proto, decision_to_proto, millis_from_proto, page_size,
    reference::blast_radius_from_proto,
};
use crate::v1;

pub use super::{DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE};

/// An entry as `viewer` may see it. Agent credentials get the terse view of
/// its decision (as every other read gives them) and no record JSON: the
/// record holds the full reason, gate details and missing gates.
pub fn entry_to_proto(entry: &AuditEntry, agent_viewer: bool) -> v1::AuditEntry {
    let record = &entry.record;
    let decision = record.decision(entry.sequence, entry.digest.clone());
    let (decision, record_json) = if agent_viewer {
        (decision.for_agent(), String::new())
    } else {
        (decision, record.canonical_json())
    };
    v1::AuditEntry {
        sequence: entry.sequence,
        digest: entry.digest.clone(),
        proposal_id: record.proposal_id.clone(),
        tenant: record.tenant.clone(),
        action: record.action.clone(),
        target: record.target.clone(),
        operator: record.operator.clone(),
        submitted_by: record.submitted_by.clone(),
        blast_radius: blast_radius_to_proto(record.blast_radius) as i32,
        decision: Some(decision_to_proto(&decision)),
        record_json,
    }
}

fn outcome_from_proto(value: i32) -> Result<Option<DecisionOutcome>, FieldError> {
    match v1::DecisionOutcome::try_from(value) {
        Ok(v1::DecisionOutcome::Unspecified) => Ok(None),
        Ok(v1::DecisionOutcome::Approve) => Ok(Some(DecisionOutcome::Approve)),
        Ok(v1::DecisionOutcome::Reject) => Ok(Some(DecisionOutcome::Reject)),
        Ok(v1::DecisionOutcome::TimedOut) => Ok(Some(DecisionOutcome::TimedOut)),
        Err(_) => Err(FieldError::new("outcome", "unknown value")),
    }
}

fn text(value: String) -> Option<String> {
    (!value.is_empty()).then_some(value)
}

/// The filter, page size and page position (`before` a sequence) of a request.
pub fn list_request_from_proto(
    request: v1::ListDecisionsRequest,
) -> Result<(AuditFilter, u32, Option<u64>), FieldError> {
    let page_size = page_size(request.page_size)?;
    let blast_radius = match request.blast_radius {
        0 => None,
        value => Some(blast_radius_from_proto("blast_radius", value)?),
    };
    let instant = |field, ts: &Option<prost_types::Timestamp>| {
        ts.as_ref()
            .map(|ts| millis_from_proto(field, ts))
            .transpose()
    };
    let filter = AuditFilter {
        decided_from: instant("decided_from", &request.decided_from)?,
        decided_until: instant("decided_until", &request.decided_until)?,
        action: text(request.action),
        target: text(request.target),
        operator: text(request.operator),
        submitted_by: text(request.submitted_by),
        outcome: outcome_from_proto(request.outcome)?,
        blast_radius,
        sop_id: text(request.sop_id),
    };
    if let (Some(from), Some(until)) = (filter.decided_from, filter.decided_until)
        && from >= until
    {
        return Err(FieldError::new(
            "decided_until",
            "must be later than decided_from",
        ));
    }
    let before = parse_page_token(&request.page_token)?;
    Ok((filter, page_size, before))
}

/// Page tokens are opaque to callers: `c1` and the last sequence, in hex.
pub fn page_token(last_sequence: u64) -> String {
    hex::encode(format!("c1:{last_sequence}"))
}

fn parse_page_token(token: &str) -> Result<Option<u64>, FieldError> {
    if token.is_empty() {
        return Ok(None);
    }
    hex::decode(token)
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .and_then(|text| text.strip_prefix("c1:")?.parse::<u64>().ok())
        .map(Some)
        .ok_or_else(|| FieldError::new("page_token", "is not a token this service issued"))
}

pub fn checkpoint_to_proto(checkpoint: &Checkpoint) -> v1::Checkpoint {
    v1::Checkpoint {
        tenant: checkpoint.tenant.clone(),
        size: checkpoint.size,
        head_digest: checkpoint.head_digest.clone(),
        signed_at_ms: checkpoint.signed_at,
        public_key: checkpoint.public_key.clone(),
        signature: checkpoint.signature.clone(),
    }
}

pub fn checkpoint_from_proto(checkpoint: v1::Checkpoint) -> Checkpoint {
    Checkpoint {
        tenant: checkpoint.tenant,
        size: checkpoint.size,
        head_digest: checkpoint.head_digest,
        signed_at: checkpoint.signed_at_ms,
        public_key: checkpoint.public_key,
        signature: checkpoint.signature,
    }
}

pub fn failure_to_proto(kind: FailureKind) -> v1::VerifyFailure {
    match kind {
        FailureKind::Altered => v1::VerifyFailure::Altered,
        FailureKind::Missing => v1::VerifyFailure::Missing,
        FailureKind::Reordered => v1::VerifyFailure::Reordered,
        FailureKind::Truncated => v1::VerifyFailure::Truncated,
        FailureKind::CheckpointMismatch => v1::VerifyFailure::CheckpointMismatch,
        FailureKind::Mismatch => v1::VerifyFailure::Mismatch,
    }
}

pub fn verification_to_proto(verification: &Verification) -> v1::VerifyLogResponse {
    let failure = verification.failure.as_ref();
    v1::VerifyLogResponse {
        ok: verification.ok(),
        entries_checked: verification.entries_checked,
        head_digest: verification.head_digest.clone(),
        first_invalid_sequence: failure.map_or(0, |f| f.sequence),
        failure: failure.map_or(v1::VerifyFailure::Unspecified, |f| failure_to_proto(f.kind))
            as i32,
        detail: failure.map(|f| f.detail.clone()).unwrap_or_default(),
        column: failure
            .and_then(|f| f.column)
            .unwrap_or_default()
            .to_owned(),
    }
}
