use std::collections::BTreeMap;

use async_trait::async_trait;
use countersign_domain::{Sop, Target, TargetStatus};

use crate::{Result, SopInput};

/// The reference data the gates read: SOPs and targets.
#[async_trait]
pub trait Reference: Send + Sync + 'static {
    /// Creates or replaces an SOP; each put bumps its version.
    async fn put_sop(&self, tenant: &str, sop: SopInput) -> Result<Sop>;
    async fn get_sop(&self, tenant: &str, id: &str) -> Result<Option<Sop>>;
    /// A page of the tenant's SOPs in id order (byte order): those after
    /// `after` (none: from the first), at most `limit`, retired ones only
    /// with `include_retired`.
    async fn list_sops(
        &self,
        tenant: &str,
        include_retired: bool,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Sop>>;
    /// Retires an SOP (a new version); it no longer covers anything.
    async fn retire_sop(&self, tenant: &str, id: &str) -> Result<Sop>;

    async fn put_target(
        &self,
        tenant: &str,
        id: &str,
        status: TargetStatus,
        labels: BTreeMap<String, String>,
    ) -> Result<Target>;
    async fn get_target(&self, tenant: &str, id: &str) -> Result<Option<Target>>;
    /// A page of the tenant's targets in id order (byte order): those after
    /// `after` (none: from the first), at most `limit`.
    async fn list_targets(
        &self,
        tenant: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Target>>;
}
