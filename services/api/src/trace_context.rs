//! W3C trace context (`traceparent`/`tracestate`) in and out of the API: the
//! caller's context from the gRPC metadata, and the current span's context as
//! the `traceparent` kept with a proposal so its review continues the trace.

use std::collections::HashMap;

use opentelemetry::{
    Context,
    propagation::{Extractor, TextMapPropagator},
    trace::TraceContextExt,
};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt;

struct Headers<'a>(&'a http::HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

/// The caller's span context, when the request carries a valid `traceparent`.
pub fn from_headers(headers: &http::HeaderMap) -> Option<Context> {
    headers.get("traceparent")?;
    let cx = TraceContextPropagator::new().extract(&Headers(headers));
    cx.span().span_context().is_valid().then_some(cx)
}

/// The current span's context as a `traceparent`, when spans are exported.
pub fn current_traceparent() -> Option<String> {
    let cx = tracing::Span::current().context();
    if !cx.span().span_context().is_valid() {
        return None;
    }
    let mut carrier = HashMap::new();
    TraceContextPropagator::new().inject_context(&cx, &mut carrier);
    carrier.remove("traceparent")
}
