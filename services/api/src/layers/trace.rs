//! The outermost layer: finds the request's RPC in the table once
//! ([`Resolved`], in the extensions, for every layer inside), and opens one
//! span per RPC, named by the table (`api.<service>.<method>`, e.g.
//! `api.proposal.submit`), a child of the caller's span when the request
//! carries W3C trace context. `auth` records `tenant` and `principal` on it,
//! the services `proposal_id`. Health and reflection get no span.

use countersign_proto::rpc::{self, Rpc};
use tracing::{Instrument, Span, field::Empty};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::{Answer, Middleware, Next, Request, Resolved, middleware_layer};
use crate::trace_context;

#[derive(Debug, Clone, Copy, Default)]
pub struct TraceLayer;

middleware_layer!(TraceLayer, Trace);

/// The span of one RPC (`None`: a path not in the table). Span names are
/// static: the table gives each its own call site.
fn span_for(rpc: Option<&'static Rpc>, path: &str) -> Span {
    macro_rules! span {
        ($name:literal) => {
            tracing::info_span!(
                $name,
                tenant = Empty,
                principal = Empty,
                proposal_id = Empty
            )
        };
    }
    let unknown = || {
        tracing::info_span!(
            "api.unknown",
            rpc = path,
            tenant = Empty,
            principal = Empty,
            proposal_id = Empty
        )
    };
    match rpc {
        Some(rpc) => countersign_proto::rpc_span!(rpc, span, unknown()),
        None => unknown(),
    }
}

impl Middleware for TraceLayer {
    fn call<S: Next>(&self, mut inner: S, mut req: Request) -> Answer<S::Error> {
        let found = rpc::find(req.uri().path());
        req.extensions_mut().insert(Resolved(found));
        if found.is_some_and(Rpc::is_public) {
            return Box::pin(inner.call(req));
        }
        let span = span_for(found, req.uri().path());
        if let Some(parent) = trace_context::from_headers(req.headers()) {
            // Fails only without an OpenTelemetry layer: nothing to link then.
            let _ = span.set_parent(parent);
        }
        let call = span.in_scope(|| inner.call(req));
        Box::pin(call.instrument(span))
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use tower::{Layer, ServiceExt, service_fn};

    use super::*;

    /// What the layers inside `trace` find in a request for `path`.
    async fn resolved(path: &str) -> Option<&'static Rpc> {
        let inner = service_fn(|req: Request| async move {
            let resolved = *req.extensions().get::<Resolved>().expect("resolved");
            let mut response = http::Response::new(tonic::body::Body::empty());
            response.extensions_mut().insert(resolved);
            Ok::<_, Infallible>(response)
        });
        let request = http::Request::builder()
            .uri(path)
            .body(tonic::body::Body::empty())
            .unwrap();
        let response = TraceLayer.layer(inner).oneshot(request).await.unwrap();
        response.extensions().get::<Resolved>().unwrap().0
    }

    #[tokio::test]
    async fn every_request_carries_its_rpc_or_none_to_the_layers_inside() {
        let submit = resolved("/countersign.v1.ProposalService/Submit").await;
        assert_eq!(
            submit.map(|rpc| rpc.span),
            Some(Some("api.proposal.submit"))
        );
        let health = resolved("/grpc.health.v1.Health/Check").await.unwrap();
        assert!(health.is_public());
        assert_eq!(resolved("/countersign.v1.ProposalService/Nope").await, None);
        assert_eq!(resolved("/grpc.health.v1.Health/Nope").await, None);
    }
}
