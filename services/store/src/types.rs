use countersign_domain::{Millis, Proposal, ProposalSpec, Role, TenantPolicy};

use crate::StoreError;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenant {
    pub name: String,
    pub created_at: Millis,
    pub policy: TenantPolicy,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKeyRecord {
    pub id: String,
    pub tenant: String,
    pub name: String,
    pub role: Role,
    pub agent: bool,
    pub key_hash: Vec<u8>,
    pub created_at: Millis,
    pub revoked_at: Option<Millis>,
}

#[derive(Debug, Clone)]
pub struct NewApiKey {
    pub tenant: String,
    pub name: String,
    pub role: Role,
    pub agent: bool,
}

/// The admin key created on first start.
#[derive(Debug, Clone)]
pub struct BootstrapKey {
    pub tenant: String,
    pub key_id: String,
    pub key: String,
}

#[derive(Debug, Clone)]
pub struct NewProposal {
    pub tenant: String,
    pub spec: ProposalSpec,
    pub submitted_by: String,
}

#[derive(Debug, Clone)]
pub enum SubmitOutcome {
    Created(Proposal),
    /// The idempotency key named an earlier proposal with the same spec.
    Deduplicated(Proposal),
}

impl SubmitOutcome {
    pub fn proposal(&self) -> &Proposal {
        match self {
            SubmitOutcome::Created(p) | SubmitOutcome::Deduplicated(p) => p,
        }
    }
}

/// Tenant names: 1..=63 of `[a-z0-9-]`, starting with a letter or digit.
pub fn validate_tenant_name(name: &str) -> Result<(), StoreError> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && !name.starts_with('-')
        && name
            .bytes()
            .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(StoreError::InvalidArgument(format!(
            "tenant name `{name}` must be 1 to 63 of a-z, 0-9 and '-'"
        )))
    }
}
