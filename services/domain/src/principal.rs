//! Who is calling: resolved from the credential, never from the request body.

use crate::role::{Permission, Role};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The tenant the credential belongs to. The only source of tenancy.
    pub tenant: String,
    /// The API key's id.
    pub key_id: String,
    /// The key's label; recorded as `submitted_by`.
    pub name: String,
    pub role: Role,
    /// Agent credentials see terse refusals, never the diagnostic reason.
    pub agent: bool,
    /// The person the key belongs to (for an agent key, the person the agent
    /// acts for); a key without one may never resolve an escalation.
    pub person: Option<String>,
}

impl Principal {
    pub fn may(&self, permission: Permission) -> bool {
        self.role.allows(permission)
    }
}
