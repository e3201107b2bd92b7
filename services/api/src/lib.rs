//! The Countersign gRPC API: the tower stack and the services, assembled by
//! [`Application`].

mod application;
pub mod context;
pub mod directory;
pub mod fanout;
mod health_only;
pub mod layers;
mod probes;
pub mod services;
pub mod suppression;
pub mod trace_context;

pub use application::{ApiConfig, Application};
pub use health_only::HealthOnly;
pub use layers::{rate_limit::RateLimit, timeout::Timeouts};
