//! The review continues the trace of the Submit call that queued it: the
//! call's W3C `traceparent`, kept with the proposal, becomes the parent of the
//! `reviewer.review` span.

use std::collections::HashMap;

use opentelemetry::{Context, propagation::TextMapPropagator, trace::TraceContextExt};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing::{Span, field::Empty};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The span context a stored `traceparent` names, if it is valid.
pub fn parent(traceparent: &str) -> Option<Context> {
    let carrier = HashMap::from([("traceparent".to_owned(), traceparent.to_owned())]);
    let cx = TraceContextPropagator::new().extract(&carrier);
    cx.span().span_context().is_valid().then_some(cx)
}

/// The span of one proposal's review, a child of its Submit call's span when
/// the proposal kept one; `outcome` is recorded once the decision is.
pub fn review_span(tenant: &str, proposal_id: &str, trace_parent: Option<&str>) -> Span {
    let span = tracing::info_span!(
        "reviewer.review",
        tenant = %tenant,
        proposal_id = %proposal_id,
        outcome = Empty,
    );
    if let Some(cx) = trace_parent.and_then(parent) {
        // Fails only without an OpenTelemetry layer: nothing to link then.
        let _ = span.set_parent(cx);
    }
    span
}
