//! The model reviewer's client: the operator's OpenAI-compatible endpoints
//! (`[[model.endpoints]]`), each with its key, timeout and concurrency limit,
//! and one review request per proposal. Every way a request can fail is
//! named ([`Failure`]); none of them is a verdict, and what the answer means
//! for the decision is the domain's (`countersign_domain::model`).

mod client;
mod endpoint;

pub use client::{Models, Review};
pub use countersign_domain::model::{Failure, ModelOutcome, Prompt, TokenUsage};
pub use endpoint::{ApiKey, EndpointConfig, EndpointError};
