//! Roles and what each may do within its own tenant.

crate::named_enum! {
    pub enum Role as "role" {
        /// Submits proposals, awaits them and cancels its own.
        Coordinator => "coordinator",
        /// Watches the tenant's review stream, resolves escalations, cancels
        /// any of the tenant's proposals.
        Oncall => "oncall",
        /// Queries and verifies the decision log.
        Auditor => "auditor",
        /// Everything within its tenant (never a way around review).
        Admin => "admin",
    }
}

/// One thing a caller may ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Permission {
    SubmitProposal,
    /// Cancel a proposal this key submitted.
    CancelProposal,
    /// Cancel any proposal of the tenant, whoever submitted it.
    CancelAnyProposal,
    ReadProposal,
    ReadReference,
    WriteReference,
    /// Follow the tenant's review stream (`Watch`).
    Watch,
    /// Query, export and verify the decision log; read its checkpoints.
    Audit,
    /// Put, list and delete the tenant's escalation routes and model profiles.
    ManagePolicy,
}

impl Role {
    /// Whether this role may do `permission`. Admin may do everything in its
    /// tenant; being admin never skips review, only authorization.
    pub fn allows(self, permission: Permission) -> bool {
        use Permission::*;
        match self {
            Role::Admin => true,
            Role::Coordinator => matches!(
                permission,
                SubmitProposal | CancelProposal | ReadProposal | ReadReference | Watch
            ),
            Role::Oncall => matches!(
                permission,
                CancelProposal | CancelAnyProposal | ReadProposal | ReadReference | Watch
            ),
            Role::Auditor => matches!(permission, ReadProposal | ReadReference | Audit),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_coordinators_and_admins_submit() {
        for &role in Role::ALL {
            let submits = matches!(role, Role::Coordinator | Role::Admin);
            assert_eq!(role.allows(Permission::SubmitProposal), submits, "{role}");
            assert!(role.allows(Permission::ReadProposal), "{role}");
        }
    }

    #[test]
    fn coordinators_cancel_their_own_oncall_and_admins_any_auditors_none() {
        for &role in Role::ALL {
            assert_eq!(
                role.allows(Permission::CancelProposal),
                role != Role::Auditor,
                "{role}"
            );
            assert_eq!(
                role.allows(Permission::CancelAnyProposal),
                matches!(role, Role::Oncall | Role::Admin),
                "{role}"
            );
        }
    }

    #[test]
    fn coordinators_oncall_and_admins_watch_auditors_query_instead() {
        for &role in Role::ALL {
            assert_eq!(
                role.allows(Permission::Watch),
                role != Role::Auditor,
                "{role}"
            );
        }
    }

    #[test]
    fn only_auditors_and_admins_read_the_decision_log() {
        for &role in Role::ALL {
            assert_eq!(
                role.allows(Permission::Audit),
                matches!(role, Role::Auditor | Role::Admin),
                "{role}"
            );
        }
    }

    #[test]
    fn only_admins_write_reference_data() {
        for &role in Role::ALL {
            assert_eq!(
                role.allows(Permission::WriteReference),
                role == Role::Admin,
                "{role}"
            );
        }
    }

    #[test]
    fn only_admins_manage_routes() {
        for &role in Role::ALL {
            assert_eq!(
                role.allows(Permission::ManagePolicy),
                role == Role::Admin,
                "{role}"
            );
        }
    }

    #[test]
    fn roles_round_trip_through_their_names() {
        for &role in Role::ALL {
            assert_eq!(role.as_str().parse::<Role>().unwrap(), role);
        }
        assert!("root".parse::<Role>().is_err());
    }
}
