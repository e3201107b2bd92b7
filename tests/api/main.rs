//! End-to-end tests: the real server on port 0 with a fresh SQLite database per
//! test, driven through the generated client (and, in `binary`, the real binary).

mod at_submission;
mod audit;
mod auth;
mod binary;
mod cancel;
mod composition;
mod configuration;
mod console;
mod escalation;
mod escalation_support;
mod exactly_once;
mod fail_closed;
mod helpers;
mod idempotency;
mod isolation;
mod metrics;
mod model;
mod model_profile;
mod policy;
mod production;
mod production_support;
mod rate_limit;
mod receipt;
mod reference;
mod replicas;
mod review;
mod roles;
mod service;
mod shutdown;
mod submit_wait;
mod suppression;
mod validation;
mod watch;
