//! The tower stack every RPC passes through, outermost first:
//! `trace → metrics → auth → tenant_bind → rate_limit → timeout →
//! message_limit → service`. `metrics` sees every answer, the layers' own
//! refusals included.
//! Health and reflection are public: the layers let them through untouched.

pub mod auth;
pub mod message_limit;
pub mod metrics;
pub mod rate_limit;
pub mod tenant_bind;
pub mod timeout;
pub mod trace;

use std::{future::Future, pin::Pin};

use tonic::Status;

pub use auth::AuthLayer;
pub use message_limit::MessageLimitLayer;
pub use metrics::MetricsLayer;
pub use rate_limit::RateLimitLayer;
pub use tenant_bind::TenantBindLayer;
pub use timeout::TimeoutLayer;
pub use trace::TraceLayer;

pub(crate) type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// Paths that need no credential: gRPC health and reflection.
pub fn is_public(path: &str) -> bool {
    path.starts_with("/grpc.health.v1.Health/") || path.starts_with("/grpc.reflection.")
}

/// A gRPC error as a complete HTTP response, for a layer that answers itself.
pub(crate) fn reply<B: Default>(status: Status) -> http::Response<B> {
    status.into_http()
}

/// Takes the ready service out of `slot`, leaving a clone in its place
/// (the tower idiom for a service called from a `'static` future).
pub(crate) fn take_ready<S: Clone>(slot: &mut S) -> S {
    let clone = slot.clone();
    std::mem::replace(slot, clone)
}
