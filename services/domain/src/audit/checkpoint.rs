//! Signed checkpoints: `(tenant, size, head digest, time)` under Ed25519.

use ed25519_dalek::{Signer, Verifier as _};
use serde::{Deserialize, Serialize};

use crate::Millis;

/// A tenant's log pinned at `size` entries with `head_digest`, signed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    pub tenant: String,
    pub size: u64,
    /// Hex; the empty log's head is 64 zeros.
    pub head_digest: String,
    pub signed_at: Millis,
    /// Hex of the Ed25519 public key that signed it (informational: verify
    /// against a key you trust, not this one).
    pub public_key: String,
    /// Hex of the Ed25519 signature over [`checkpoint_message`].
    pub signature: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckpointError {
    #[error("the public key is not 32 bytes of hex")]
    BadPublicKey,
    #[error("the signing key is not a 32-byte hex seed")]
    BadSigningKey,
    #[error("the signature is not 64 bytes of hex")]
    BadSignature,
    #[error("the signature does not verify under this public key")]
    Invalid,
}

/// The exact bytes that are signed.
pub fn checkpoint_message(
    tenant: &str,
    size: u64,
    head_digest: &str,
    signed_at: Millis,
) -> Vec<u8> {
    format!("countersign-checkpoint/v1\n{tenant}\n{size}\n{head_digest}\n{signed_at}\n")
        .into_bytes()
}

/// The service's checkpoint key.
#[derive(Clone)]
pub struct SigningKey(ed25519_dalek::SigningKey);

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The seed is a secret: never printed.
        write!(f, "SigningKey(public {})", self.public_hex())
    }
}

impl SigningKey {
    pub fn from_seed(seed: [u8; 32]) -> SigningKey {
        SigningKey(ed25519_dalek::SigningKey::from_bytes(&seed))
    }

    /// From 64 hex characters (surrounding whitespace ignored).
    pub fn from_seed_hex(text: &str) -> Result<SigningKey, CheckpointError> {
        let seed: [u8; 32] = hex::decode(text.trim())
            .ok()
            .and_then(|bytes| bytes.try_into().ok())
            .ok_or(CheckpointError::BadSigningKey)?;
        Ok(SigningKey::from_seed(seed))
    }

    pub fn public_hex(&self) -> String {
        hex::encode(self.0.verifying_key().as_bytes())
    }

    pub fn sign(
        &self,
        tenant: &str,
        size: u64,
        head_digest: &str,
        signed_at: Millis,
    ) -> Checkpoint {
        let message = checkpoint_message(tenant, size, head_digest, signed_at);
        Checkpoint {
            tenant: tenant.to_owned(),
            size,
            head_digest: head_digest.to_owned(),
            signed_at,
            public_key: self.public_hex(),
            signature: self.sign_message(&message),
        }
    }

    /// The Ed25519 signature of `message`, hex.
    pub fn sign_message(&self, message: &[u8]) -> String {
        hex::encode(self.0.sign(message).to_bytes())
    }
}

/// Checks `signature_hex` over `message` under a public key the caller
/// trusts (hex).
pub fn verify_message(
    public_key_hex: &str,
    message: &[u8],
    signature_hex: &str,
) -> Result<(), CheckpointError> {
    let key: [u8; 32] = hex::decode(public_key_hex.trim())
        .ok()
        .and_then(|bytes| bytes.try_into().ok())
        .ok_or(CheckpointError::BadPublicKey)?;
    let key =
        ed25519_dalek::VerifyingKey::from_bytes(&key).map_err(|_| CheckpointError::BadPublicKey)?;
    let signature: [u8; 64] = hex::decode(signature_hex)
        .ok()
        .and_then(|bytes| bytes.try_into().ok())
        .ok_or(CheckpointError::BadSignature)?;
    key.verify(message, &ed25519_dalek::Signature::from_bytes(&signature))
        .map_err(|_| CheckpointError::Invalid)
}

impl Checkpoint {
    /// Checks the signature under a public key the caller trusts (hex).
    pub fn verify(&self, public_key_hex: &str) -> Result<(), CheckpointError> {
        let message =
            checkpoint_message(&self.tenant, self.size, &self.head_digest, self.signed_at);
        verify_message(public_key_hex, &message, &self.signature)
    }
}
