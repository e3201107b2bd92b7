//! The tamper-evident decision log: each tenant's decisions are the leaves of
//! an append-only hash chain. `sequence` runs 1, 2, 3… per tenant and
//!
//! ```text
//! leaf_hash(n) = SHA-256(0x00 ‖ canonical JSON of record n)
//! digest(n)    = SHA-256(0x01 ‖ digest(n-1) ‖ leaf_hash(n)),  digest(0) = 32 zero bytes
//! ```
//!
//! (RFC 6962's domain separation: a leaf can never be passed off as an
//! interior hash.) A signed [`Checkpoint`] pins a size and its head digest;
//! [`verify`] recomputes a chain and names the first entry that does not hold.

mod checkpoint;
mod copies;
pub mod time_index;
mod verify;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::{
    BlastRadius, DecisionOutcome, GateResult, Millis, decision::Decision, escalation::Vote,
    model::ModelReview,
};

pub use checkpoint::{Checkpoint, CheckpointError, SigningKey, checkpoint_message, verify_message};
pub use copies::{CopyCheck, DecisionColumns, LogColumns, ProposalColumns, StoredCopies};
pub use verify::{Failure, FailureKind, Verification, Verifier};

/// A 32-byte SHA-256 value.
pub type Hash = [u8; 32];

/// The digest before the first entry.
pub const EMPTY_HEAD: Hash = [0; 32];

/// One decision as the log records it: who proposed what, and what was
/// decided. Field order is part of the format (`canonical_json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditRecord {
    pub tenant: String,
    pub proposal_id: String,
    pub action: String,
    pub target: String,
    pub operator: String,
    pub submitted_by: String,
    #[serde(with = "crate::proposal::by_name::blast_radius")]
    pub blast_radius: BlastRadius,
    #[serde(with = "crate::proposal::by_name::outcome")]
    pub outcome: DecisionOutcome,
    pub reason: String,
    pub agent_message: String,
    pub sop_id: Option<String>,
    pub sop_version: Option<u32>,
    pub rollback_path: Option<String>,
    pub gates: Vec<GateResult>,
    pub missing_gates: Vec<String>,
    pub reviewer: String,
    pub decided_at: Millis,
    pub summary: String,
    pub review_latency_ms: u64,
    /// The route that sent the proposal to people; absent (not `null`) from
    /// the canonical JSON of a decision that was never escalated, so every
    /// such record hashes as it did before routes existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route_id: Option<String>,
    /// The people's votes, in the order cast; absent when there are none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub votes: Vec<Vote>,
    /// The model's review (profile, endpoint, model, verdict or failure,
    /// latency, tokens); absent (not `null`) from the canonical JSON of a
    /// decision no model reviewed, so every such record hashes as it did
    /// before model reviews existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelReview>,
}

/// The proposal's side of a record: who proposed what.
#[derive(Debug, Clone, PartialEq)]
pub struct Proposed {
    pub tenant: String,
    pub proposal_id: String,
    pub action: String,
    pub target: String,
    pub operator: String,
    pub submitted_by: String,
    pub blast_radius: BlastRadius,
}

/// A record in its place in the log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditEntry {
    pub sequence: u64,
    /// Hex of `digest(sequence)`.
    pub digest: String,
    pub record: AuditRecord,
}

/// What `ListDecisions` narrows by; every field set must match.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AuditFilter {
    /// Decided at or after (inclusive).
    pub decided_from: Option<Millis>,
    /// Decided before (exclusive).
    pub decided_until: Option<Millis>,
    pub action: Option<String>,
    pub target: Option<String>,
    pub operator: Option<String>,
    pub submitted_by: Option<String>,
    pub outcome: Option<DecisionOutcome>,
    pub blast_radius: Option<BlastRadius>,
    pub sop_id: Option<String>,
}

/// An entry as stored, unparsed: verification hashes exactly these bytes
/// (the store writes `AuditRecord::canonical_json`), and checks the copies of
/// its fields the store keeps beside it, where they come with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredEntry {
    pub sequence: u64,
    pub digest: String,
    pub record: String,
    pub copies: Option<StoredCopies>,
}

impl StoredEntry {
    /// The leaf hash of the record exactly as stored: any changed byte,
    /// even one that leaves the JSON's meaning alone, shows.
    pub fn leaf(&self) -> Hash {
        leaf_hash(self.record.as_bytes())
    }

    /// What the entry's copies say beside its record (`None` without copies).
    pub fn check_copies(&self) -> Option<Result<CopyCheck, String>> {
        self.copies
            .as_ref()
            .map(|copies| copies.check(&self.record))
    }
}

impl AuditRecord {
    /// The record of a decision of the proposal `proposed`.
    pub fn new(proposed: Proposed, decision: Decision) -> AuditRecord {
        AuditRecord {
            tenant: proposed.tenant,
            proposal_id: proposed.proposal_id,
            action: proposed.action,
            target: proposed.target,
            operator: proposed.operator,
            submitted_by: proposed.submitted_by,
            blast_radius: proposed.blast_radius,
            outcome: decision.outcome,
            reason: decision.reason,
            agent_message: decision.agent_message,
            sop_id: decision.sop_id,
            sop_version: decision.sop_version,
            rollback_path: decision.rollback_path,
            gates: decision.gates,
            missing_gates: decision.missing_gates,
            reviewer: decision.reviewer,
            decided_at: decision.decided_at,
            summary: decision.summary,
            review_latency_ms: decision.review_latency_ms,
            route_id: decision.route_id,
            votes: decision.votes,
            model: decision.model,
        }
    }

    /// The decision this record holds, placed at `sequence` with `digest`.
    pub fn decision(&self, sequence: u64, digest: String) -> Decision {
        Decision {
            outcome: self.outcome,
            reason: self.reason.clone(),
            agent_message: self.agent_message.clone(),
            sop_id: self.sop_id.clone(),
            sop_version: self.sop_version,
            rollback_path: self.rollback_path.clone(),
            gates: self.gates.clone(),
            missing_gates: self.missing_gates.clone(),
            reviewer: self.reviewer.clone(),
            decided_at: self.decided_at,
            summary: self.summary.clone(),
            sequence,
            digest,
            review_latency_ms: self.review_latency_ms,
            route_id: self.route_id.clone(),
            votes: self.votes.clone(),
            model: self.model.clone(),
        }
    }

    /// Fixed field order, no insignificant whitespace: the bytes that are hashed.
    pub fn canonical_json(&self) -> String {
        serde_json::to_string(self).expect("an audit record always serializes")
    }

    pub fn leaf_hash(&self) -> Hash {
        leaf_hash(self.canonical_json().as_bytes())
    }
}

/// `SHA-256(0x00 ‖ leaf)`.
pub fn leaf_hash(canonical: &[u8]) -> Hash {
    let mut h = Sha256::new();
    h.update([0x00]);
    h.update(canonical);
    h.finalize().into()
}

/// `SHA-256(0x01 ‖ previous ‖ leaf_hash)`.
pub fn chain(previous: &Hash, leaf_hash: &Hash) -> Hash {
    let mut h = Sha256::new();
    h.update([0x01]);
    h.update(previous);
    h.update(leaf_hash);
    h.finalize().into()
}

/// Parses a hex digest.
pub fn parse_hash(hex_text: &str) -> Option<Hash> {
    hex::decode(hex_text).ok()?.try_into().ok()
}

#[cfg(test)]
mod tests;
