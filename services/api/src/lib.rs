//! The Countersign gRPC API: the tower stack and the services, assembled by
//! [`Application`], and the browser console that serves them as pages.

mod application;
pub mod console;
pub mod context;
pub mod directory;
pub mod fanout;
mod health_only;
pub mod layers;
mod probes;
mod queue_depths;
pub mod services;
pub mod suppression;
pub mod trace_context;

pub use application::{ApiConfig, Application};
pub use health_only::HealthOnly;
pub use layers::{rate_limit::RateLimit, timeout::Timeouts};
pub use queue_depths::{QueueDepth, QueueDepths};
