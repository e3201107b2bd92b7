//! The model reviewer: an optional second opinion from a language model after
//! the gates, which can only make a decision stricter. Pure parts only; the
//! HTTP call is the reviewer's.
//!
//! - [`profile`]: a tenant's choice of which configured endpoint reviews which
//!   proposals, and what an unsure answer does.
//! - [`prompt`]: the request, cache-shaped (a stable prefix, the one proposal
//!   last), with the coordinator's words quoted as untrusted data.
//! - [`completion`]: an OpenAI-compatible chat completion's body, read
//!   strictly (its text and token counts, or `malformed`).
//! - [`reply`]: the model's text, parsed strictly: any defect is `unsure`.
//! - [`stage`]: what the model's answer (or its failure) does to the decision.
//! - [`budget`]: a tenant's calls per minute, the rule the store applies to
//!   every process's calls.
//! - [`record`]: what a decision records of its model review.

pub mod budget;
pub mod completion;
pub mod profile;
pub mod prompt;
pub mod record;
pub mod reply;
pub mod stage;

pub use completion::{Completion, TokenUsage, parse_completion};
pub use profile::{ModelProfile, ModelProfileInput, OnUnsure, profile_for, validate_profile};
pub use prompt::{Prompt, ProposalFacts, prompt};
pub use record::ModelReview;
pub use reply::{ModelVerdict, Reply, parse_reply};
pub use stage::{Before, Failure, ModelOutcome, ModelStep, Then, after_model};
