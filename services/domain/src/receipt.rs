//! Signed decision receipts: an approval, bound to the exact spec that was
//! approved, for the code that runs the operation to check before it does.
//! Signed with the service's Ed25519 checkpoint key over the bytes of
//! [`receipt_message`]; the checkpoint key's public half verifies it. A
//! receipt is computed from the decision whenever it is shown (Ed25519 is
//! deterministic, and the expiry counts from the decision), so nothing is
//! stored for it.

use crate::{
    DecisionOutcome, Millis, Proposal,
    audit::{CheckpointError, SigningKey, verify_message},
};

/// How long a receipt is good for when nothing else is configured.
pub const DEFAULT_RECEIPT_TTL_MS: Millis = 15 * 60 * 1000;

/// An approval's receipt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt {
    pub tenant: String,
    pub proposal_id: String,
    /// Hex SHA-256 of the canonical spec, idempotency key aside
    /// (`ProposalSpec::digest`).
    pub spec_digest: String,
    /// `approve`: only approvals carry receipts.
    pub outcome: String,
    pub decided_at: Millis,
    pub expires_at: Millis,
    /// Ed25519 over [`receipt_message`], hex.
    pub signature: String,
}

/// The exact bytes that are signed.
pub fn receipt_message(
    tenant: &str,
    proposal_id: &str,
    spec_digest: &str,
    outcome: &str,
    decided_at: Millis,
    expires_at: Millis,
) -> Vec<u8> {
    format!(
        "countersign-receipt/v1\n{tenant}\n{proposal_id}\n{spec_digest}\n{outcome}\n{decided_at}\n{expires_at}\n"
    )
    .into_bytes()
}

/// Why a receipt does not let the operation run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReceiptError {
    #[error("the receipt's signature does not verify: {0}")]
    Signature(CheckpointError),
    #[error("the receipt is for outcome `{0}`, not an approval")]
    NotApproval(String),
    #[error("the receipt is for tenant `{got}`, not `{want}`")]
    Tenant { got: String, want: String },
    #[error("the receipt is for another spec (digest {got}, this spec's is {want})")]
    Spec { got: String, want: String },
    #[error("the receipt is for proposal `{got}`, not `{want}`")]
    Proposal { got: String, want: String },
    #[error("the receipt expired at {expires_at} (now {now})")]
    Expired { expires_at: Millis, now: Millis },
}

/// What the code about to run the operation expects the receipt to say.
#[derive(Debug, Clone, Copy)]
pub struct Expected<'a> {
    pub tenant: &'a str,
    pub spec_digest: &'a str,
    /// The proposal it submitted, where it knows it.
    pub proposal_id: Option<&'a str>,
}

impl Receipt {
    /// The receipt of `proposal`'s approval, good for `ttl_ms` after the
    /// decision; `None` for anything but an approval.
    pub fn issue(key: &SigningKey, proposal: &Proposal, ttl_ms: Millis) -> Option<Receipt> {
        let decision = proposal.decision.as_ref()?;
        if decision.outcome != DecisionOutcome::Approve {
            return None;
        }
        let spec_digest = proposal.spec.digest();
        let outcome = DecisionOutcome::Approve.as_str();
        let expires_at = decision.decided_at.saturating_add(ttl_ms);
        let message = receipt_message(
            &proposal.tenant,
            &proposal.id,
            &spec_digest,
            outcome,
            decision.decided_at,
            expires_at,
        );
        Some(Receipt {
            tenant: proposal.tenant.clone(),
            proposal_id: proposal.id.clone(),
            spec_digest,
            outcome: outcome.to_owned(),
            decided_at: decision.decided_at,
            expires_at,
            signature: key.sign_message(&message),
        })
    }

    /// Whether the operation may run on this receipt at `now`: the signature
    /// under `public_key_hex`, an approval, the expected tenant, spec and
    /// proposal, and not expired. The first failed check is the error.
    pub fn verify(
        &self,
        public_key_hex: &str,
        expected: &Expected<'_>,
        now: Millis,
    ) -> Result<(), ReceiptError> {
        let message = receipt_message(
            &self.tenant,
            &self.proposal_id,
            &self.spec_digest,
            &self.outcome,
            self.decided_at,
            self.expires_at,
        );
        verify_message(public_key_hex, &message, &self.signature)
            .map_err(ReceiptError::Signature)?;
        if self.outcome != DecisionOutcome::Approve.as_str() {
            return Err(ReceiptError::NotApproval(self.outcome.clone()));
        }
        if self.tenant != expected.tenant {
            return Err(ReceiptError::Tenant {
                got: self.tenant.clone(),
                want: expected.tenant.to_owned(),
            });
        }
        if self.spec_digest != expected.spec_digest {
            return Err(ReceiptError::Spec {
                got: self.spec_digest.clone(),
                want: expected.spec_digest.to_owned(),
            });
        }
        if let Some(id) = expected.proposal_id
            && id != self.proposal_id
        {
            return Err(ReceiptError::Proposal {
                got: self.proposal_id.clone(),
                want: id.to_owned(),
            });
        }
        if now >= self.expires_at {
            return Err(ReceiptError::Expired {
                expires_at: self.expires_at,
                now,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
