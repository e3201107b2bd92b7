//! Per-request facts the layers put in the extensions, read by the services.

use countersign_domain::{Permission, Principal};
use countersign_store::Tenant;
use tonic::{Request, Status};

/// Who is calling and for which tenant. Built only from what `auth`
/// attached; a request without it is refused (fail closed).
#[derive(Debug, Clone)]
pub struct Caller {
    pub principal: Principal,
    pub tenant: Tenant,
}

impl Caller {
    /// The caller of `request`, if it holds `permission`.
    pub fn authorize<T>(request: &Request<T>, permission: Permission) -> Result<Caller, Status> {
        let principal = request
            .extensions()
            .get::<Principal>()
            .cloned()
            .ok_or_else(|| Status::unauthenticated(crate::layers::auth::UNAUTHENTICATED))?;
        let tenant = request
            .extensions()
            .get::<Tenant>()
            .cloned()
            .ok_or_else(|| Status::unauthenticated(crate::layers::auth::UNAUTHENTICATED))?;
        if principal.tenant != tenant.name {
            return Err(Status::unauthenticated(
                crate::layers::auth::UNAUTHENTICATED,
            ));
        }
        if !principal.may(permission) {
            return Err(Status::permission_denied(format!(
                "role `{}` may not {}",
                principal.role,
                describe(permission)
            )));
        }
        Ok(Caller { principal, tenant })
    }
}

fn describe(permission: Permission) -> &'static str {
    match permission {
        Permission::SubmitProposal => "submit proposals",
        Permission::CancelProposal => "cancel proposals",
        Permission::CancelAnyProposal => "cancel another key's proposals",
        Permission::ReadProposal => "read proposals",
        Permission::ReadReference => "read SOPs or targets",
        Permission::WriteReference => "change SOPs or targets",
        Permission::Watch => "watch the review stream",
        Permission::Audit => "read the decision log (auditor or admin)",
        Permission::ManagePolicy => "manage the tenant's routes and model profiles (admin)",
    }
}

/// A required id field: non-empty and of sane length, else `INVALID_ARGUMENT`.
pub fn require_id(field: &str, value: &str) -> Result<(), Status> {
    if value.trim().is_empty() {
        return Err(Status::invalid_argument(format!(
            "{field}: must not be empty"
        )));
    }
    if value.len() > 128 {
        return Err(Status::invalid_argument(format!(
            "{field}: must be at most 128 bytes"
        )));
    }
    Ok(())
}
