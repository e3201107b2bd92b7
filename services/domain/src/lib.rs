//! The Countersign domain: what a proposal is, what makes one valid, who may do
//! what, how a proposal moves between states, and how keys are formatted and
//! hashed. Nothing here does I/O; every other crate builds on it.

pub mod api_key;
pub mod audit;
pub mod breaker;
pub mod commit;
pub mod decision;
#[macro_use]
pub mod names;
pub mod error;
pub mod escalation;
pub mod event;
pub mod gates;
pub mod model;
pub mod principal;
pub mod proposal;
pub mod receipt;
pub mod reference;
pub mod review;
pub mod role;
pub mod state;
pub mod suppression;
pub mod validation;

pub use api_key::{ApiKeyError, ParsedKey};
pub use decision::{Decision, DecisionOutcome, GateResult};
pub use error::{ErrorKind, ServiceError};
pub use event::{Event, EventHorizon, EventKind};
pub use principal::Principal;
pub use proposal::{BlastRadius, OperationClass, Proposal, ProposalSpec, ReviewKey};
pub use reference::{RECEIPT_TTL_RANGE_MS, Sop, Target, TargetStatus, TenantPolicy};
pub use role::{Permission, Role};
pub use state::ProposalState;
pub use validation::{FieldError, validate_sop, validate_spec, validate_target};

/// Milliseconds since the Unix epoch: the one clock unit stored and compared.
pub type Millis = i64;

/// The wall clock in [`Millis`] (the one place the domain reads it; every rule
/// here takes "now" as an argument).
pub fn now_ms() -> Millis {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as Millis)
        .unwrap_or_default()
}
