//! Reference data the reviewer checks against: SOPs, targets, tenant policy.

use std::collections::BTreeMap;

use crate::{Millis, proposal::BlastRadius};

crate::named_enum! {
    pub enum TargetStatus as "target status" {
        Online => "online",
        Offline => "offline",
        RestartLoop => "restart_loop",
        Maintenance => "maintenance",
    }
}

/// What an admin puts; the store assigns the version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SopInput {
    pub id: String,
    pub action: String,
    pub title: String,
    pub covers: String,
    pub rollback_path: String,
    pub max_blast_radius: BlastRadius,
    pub selector: BTreeMap<String, String>,
}

/// A standard operating procedure: which action it covers, on which targets
/// (the selector's labels), how far it may reach and how to roll back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sop {
    pub id: String,
    pub action: String,
    pub title: String,
    pub covers: String,
    pub rollback_path: String,
    pub max_blast_radius: BlastRadius,
    pub selector: BTreeMap<String, String>,
    pub version: u32,
    pub retired: bool,
    pub updated_at: Millis,
}

impl Sop {
    /// Whether the target carries every label of the selector.
    pub fn selects(&self, labels: &BTreeMap<String, String>) -> bool {
        self.selector
            .iter()
            .all(|(k, v)| labels.get(k).is_some_and(|have| have == v))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub id: String,
    pub status: TargetStatus,
    pub labels: BTreeMap<String, String>,
    pub updated_at: Millis,
}

/// The label that groups targets into a cluster.
pub const CLUSTER_LABEL: &str = "cluster";

impl Target {
    /// The target's cluster: its `cluster` label, unless blank (a blank
    /// label names no cluster).
    pub fn cluster(&self) -> Option<&str> {
        self.labels
            .get(CLUSTER_LABEL)
            .map(String::as_str)
            .filter(|c| !c.trim().is_empty())
    }
}

/// Per-tenant review policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TenantPolicy {
    /// How long an approval blocks overlapping operations.
    pub parallel_window_ms: Millis,
    /// Whether `force_approve_no_sop` may stand in for a missing SOP.
    pub allow_force_approve_no_sop: bool,
    /// Rejections of one operator within the breaker window that open their
    /// breaker (0: never).
    pub breaker_threshold: u32,
    pub breaker_window_ms: Millis,
    /// How long an approval's signed receipt lets the operation run after
    /// the decision ([`RECEIPT_TTL_RANGE_MS`]).
    pub receipt_ttl_ms: Millis,
}

/// The receipt lifetimes a tenant may set: a second to a day.
pub const RECEIPT_TTL_RANGE_MS: std::ops::RangeInclusive<Millis> = 1_000..=24 * 60 * 60 * 1000;

impl Default for TenantPolicy {
    fn default() -> Self {
        TenantPolicy {
            parallel_window_ms: 10 * 60 * 1000,
            allow_force_approve_no_sop: false,
            breaker_threshold: 3,
            breaker_window_ms: 5 * 60 * 1000,
            receipt_ttl_ms: crate::receipt::DEFAULT_RECEIPT_TTL_MS,
        }
    }
}

impl BlastRadius {
    /// single_device < cluster < tenant_wide.
    pub fn rank(self) -> u8 {
        match self {
            BlastRadius::SingleDevice => 1,
            BlastRadius::Cluster => 2,
            BlastRadius::TenantWide => 3,
        }
    }
}
