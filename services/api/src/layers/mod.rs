//! The tower stack every RPC passes through, outermost first:
//! `trace → metrics → auth → rate_limit → timeout → message_limit →
//! small_frames → service`.
//! `trace` looks the request's path up in the RPC table
//! ([`countersign_proto::rpc`]) once and puts what it found ([`Resolved`]) in
//! the request's extensions; the layers inside it read it there. `metrics`
//! sees every answer, the layers' own refusals included. Public RPCs (health
//! and reflection) get no span and need no credential or tenant.

pub mod auth;
pub mod message_limit;
pub mod metrics;
pub mod rate_limit;
pub mod small_frames;
pub mod timeout;
pub mod trace;

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
};

use countersign_proto::rpc::Rpc;
use tonic::Status;
use tower::Service;

pub use auth::AuthLayer;
pub use message_limit::MessageLimitLayer;
pub use metrics::MetricsLayer;
pub use rate_limit::RateLimitLayer;
pub use small_frames::SmallFramesLayer;
pub use timeout::TimeoutLayer;
pub use trace::TraceLayer;

/// The RPC a request is for, as `trace` found it in the table: `None` for a
/// path that is not one of them (it needs a credential like any of ours, and
/// the router answers it UNIMPLEMENTED).
#[derive(Debug, Clone, Copy)]
pub struct Resolved(pub Option<&'static Rpc>);

impl Resolved {
    /// The RPC `req` is for. A request `trace` has not seen counts as an
    /// unknown path, so it is never taken for a public one.
    pub fn of<B>(req: &http::Request<B>) -> Option<&'static Rpc> {
        req.extensions()
            .get::<Resolved>()
            .and_then(|resolved| resolved.0)
    }

    /// Whether `req` is for a public RPC, which needs no credential.
    pub fn is_public<B>(req: &http::Request<B>) -> bool {
        Self::of(req).is_some_and(Rpc::is_public)
    }
}

/// A gRPC error as a complete HTTP response, for a layer that answers itself.
pub(crate) fn reply<B: Default>(status: Status) -> http::Response<B> {
    status.into_http()
}

/// A request as the layers see it.
pub type Request = http::Request<tonic::body::Body>;
/// An answer as the layers see it.
pub type Response = http::Response<tonic::body::Body>;
/// What a layer's call resolves to.
pub type Answer<E> = Pin<Box<dyn Future<Output = Result<Response, E>> + Send + 'static>>;

/// The service inside a layer.
pub trait Next:
    Service<Request, Response = Response, Future: Send + 'static> + Send + 'static
{
}

impl<S> Next for S
where
    S: Service<Request, Response = Response> + Send + 'static,
    S::Future: Send + 'static,
{
}

/// What a layer does with one request: the part of each layer that is its
/// own. [`Wrapped`] is the service around the next one (readiness, and the
/// ready inner service moved into the call's `'static` future);
/// `middleware_layer!` makes the middleware its own `Layer`.
pub trait Middleware: Clone + Send + 'static {
    fn call<S: Next>(&self, inner: S, req: Request) -> Answer<S::Error>;
}

/// A [`Middleware`] around the next service.
#[derive(Debug, Clone)]
pub struct Wrapped<M, S> {
    middleware: M,
    inner: S,
}

impl<M, S> Wrapped<M, S> {
    pub fn new(middleware: M, inner: S) -> Self {
        Wrapped { middleware, inner }
    }
}

impl<M: Middleware, S: Next + Clone> Service<Request> for Wrapped<M, S> {
    type Response = Response;
    type Error = S::Error;
    type Future = Answer<S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        // The service that was made ready goes into the call; a clone stays
        // (the tower idiom for a service called from a `'static` future).
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        self.middleware.call(inner, req)
    }
}

/// `impl Layer` for a [`Middleware`] `$layer`, and `$service<S>`: what it
/// wraps around the next service.
macro_rules! middleware_layer {
    ($layer:ident, $service:ident) => {
        impl<S> tower::Layer<S> for $layer {
            type Service = $service<S>;

            fn layer(&self, inner: S) -> Self::Service {
                super::Wrapped::new(self.clone(), inner)
            }
        }

        #[doc = concat!("What [`", stringify!($layer), "`] wraps around the next service.")]
        pub type $service<S> = super::Wrapped<$layer, S>;
    };
}
use middleware_layer;
