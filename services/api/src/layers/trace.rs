//! The outermost layer: one span per RPC, named `api.<service>.<method>`
//! (e.g. `api.proposal.submit`), a child of the caller's span when the request
//! carries W3C trace context. `tenant_bind` records `tenant` and `principal`
//! on it, the services `proposal_id`. Health and reflection get no span.

use std::task::{Context, Poll};

use tower::{Layer, Service};
use tracing::{Instrument, Span, field::Empty};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::{BoxFuture, is_public, take_ready};
use crate::trace_context;

#[derive(Debug, Clone, Copy, Default)]
pub struct TraceLayer;

impl<S> Layer<S> for TraceLayer {
    type Service = Trace<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Trace { inner }
    }
}

#[derive(Debug, Clone)]
pub struct Trace<S> {
    inner: S,
}

/// The span of one RPC. Span names are static: one arm per method.
fn span_for(path: &str) -> Span {
    macro_rules! rpc {
        ($name:literal) => {
            tracing::info_span!(
                $name,
                tenant = Empty,
                principal = Empty,
                proposal_id = Empty
            )
        };
    }
    let method = path.strip_prefix("/countersign.v1.").unwrap_or(path);
    match method {
        "ProposalService/Submit" => rpc!("api.proposal.submit"),
        "ProposalService/GetProposal" => rpc!("api.proposal.get_proposal"),
        "ProposalService/CancelProposal" => rpc!("api.proposal.cancel_proposal"),
        "ProposalService/AwaitDecision" => rpc!("api.proposal.await_decision"),
        "NotificationService/Watch" => rpc!("api.notification.watch"),
        "SopService/PutSop" => rpc!("api.sop.put_sop"),
        "SopService/GetSop" => rpc!("api.sop.get_sop"),
        "SopService/ListSops" => rpc!("api.sop.list_sops"),
        "SopService/RetireSop" => rpc!("api.sop.retire_sop"),
        "TargetService/PutTarget" => rpc!("api.target.put_target"),
        "TargetService/GetTarget" => rpc!("api.target.get_target"),
        "TargetService/ListTargets" => rpc!("api.target.list_targets"),
        "AuditService/ListDecisions" => rpc!("api.audit.list_decisions"),
        "AuditService/GetDecision" => rpc!("api.audit.get_decision"),
        "AuditService/VerifyLog" => rpc!("api.audit.verify_log"),
        "AuditService/GetCheckpoint" => rpc!("api.audit.get_checkpoint"),
        _ => tracing::info_span!(
            "api.unknown",
            rpc = path,
            tenant = Empty,
            principal = Empty,
            proposal_id = Empty
        ),
    }
}

impl<S, ReqBody, ResBody> Service<http::Request<ReqBody>> for Trace<S>
where
    S: Service<http::Request<ReqBody>, Response = http::Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    ReqBody: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<ReqBody>) -> Self::Future {
        let mut inner = take_ready(&mut self.inner);
        if is_public(req.uri().path()) {
            return Box::pin(inner.call(req));
        }
        let span = span_for(req.uri().path());
        if let Some(parent) = trace_context::from_headers(req.headers()) {
            // Fails only without an OpenTelemetry layer: nothing to link then.
            let _ = span.set_parent(parent);
        }
        let call = span.in_scope(|| inner.call(req));
        Box::pin(call.instrument(span))
    }
}
