//! The pieces of the `countersign` binary, as a library so tests can drive them.

pub mod admin;
pub mod app;
pub mod audit;
pub mod backends;
pub mod background;
pub mod cli;
pub mod client;
pub mod config;
pub mod inbox;
pub mod metrics_endpoint;
pub mod migrate;
pub mod model_profile;
pub mod output;
pub mod policy;
pub mod queue_gauges;
pub mod receipt;
pub mod reference;
pub mod route;
pub mod serve;
pub mod settings;
pub mod signing;
pub mod spec_input;
pub mod statistics;
pub mod telemetry;
pub mod watch;
