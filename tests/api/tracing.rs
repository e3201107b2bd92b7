//! Trace context end to end: a coordinator's W3C `traceparent` reaches the API
//! span and, through the queue, the reviewer's span. A test target of its own:
//! the global subscriber it installs (the real OpenTelemetry layer of
//! `countersign::telemetry`, with the SDK's in-memory exporter) must not leak
//! into the other tests.

use std::{
    sync::OnceLock,
    time::{Duration, Instant},
};

use countersign_domain::Role;
use countersign_proto::v1::SubmitRequest;
use countersign_test_support::{app::TestApp, fixtures::wire_spec};
use opentelemetry::{
    Value,
    trace::{SpanId, TraceId},
};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use tracing_subscriber::{layer::SubscriberExt, util::SubscriberInitExt};

const CLIENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

/// The exporter every span of this test binary reaches.
fn exporter() -> &'static InMemorySpanExporter {
    static EXPORTER: OnceLock<InMemorySpanExporter> = OnceLock::new();
    EXPORTER.get_or_init(|| {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        tracing_subscriber::registry()
            .with(countersign::telemetry::otel_layer(&provider))
            .init();
        // Spans outlive each test's runtime: keep the provider for the process.
        std::mem::forget(provider);
        exporter
    })
}

fn attribute(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| match &kv.value {
            Value::String(s) => s.as_str().to_owned(),
            other => other.to_string(),
        })
}

/// The finished span named `name` about proposal `id` (waiting for it: the
/// review's span ends after its decision is recorded and acked).
async fn finished(name: &str, id: &str) -> SpanData {
    let started = Instant::now();
    loop {
        let spans = exporter().get_finished_spans().expect("in-memory spans");
        if let Some(span) = spans
            .into_iter()
            .find(|s| s.name == name && attribute(s, "proposal_id").as_deref() == Some(id))
        {
            return span;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no finished `{name}` span for proposal {id}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Submits with `traceparent` (when given) and waits for the decision.
async fn submit_and_decide(app: &TestApp, traceparent: Option<String>) -> String {
    let key = app.key("acme", Role::Coordinator).await;
    let mut request = tonic::Request::new(SubmitRequest {
        spec: Some(wire_spec()),
        ..Default::default()
    });
    if let Some(traceparent) = traceparent {
        request
            .metadata_mut()
            .insert("traceparent", traceparent.parse().unwrap());
    }
    let id = app
        .client(&key)
        .await
        .submit(request)
        .await
        .expect("submitted")
        .into_inner()
        .proposal
        .expect("a proposal")
        .id;
    app.await_decision(&key, &id, Duration::from_secs(10))
        .await
        .expect("decided");
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinators_trace_context_reaches_the_api_span_and_through_the_queue_the_reviewers_span()
 {
    exporter();
    let app = TestApp::spawn_reviewing(1).await;
    let id = submit_and_decide(&app, Some(format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"))).await;

    let client_trace = TraceId::from_hex(CLIENT_TRACE).unwrap();
    let client_span = SpanId::from_hex(CLIENT_SPAN).unwrap();
    let submit = finished("api.proposal.submit", &id).await;
    assert_eq!(submit.span_context.trace_id(), client_trace);
    assert_eq!(submit.parent_span_id, client_span);
    assert!(submit.parent_span_is_remote);
    assert_eq!(attribute(&submit, "tenant").as_deref(), Some("acme"));

    let review = finished("reviewer.review", &id).await;
    assert_eq!(review.span_context.trace_id(), client_trace);
    assert_eq!(review.parent_span_id, submit.span_context.span_id());
    assert_eq!(attribute(&review, "tenant").as_deref(), Some("acme"));
    assert!(
        attribute(&review, "outcome").is_some(),
        "the review span records its outcome: {review:?}"
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_callers_context_the_review_still_continues_the_submit_calls_trace() {
    exporter();
    let app = TestApp::spawn_reviewing(1).await;
    let id = submit_and_decide(&app, None).await;

    let submit = finished("api.proposal.submit", &id).await;
    assert_eq!(submit.parent_span_id, SpanId::INVALID, "a root span");
    let review = finished("reviewer.review", &id).await;
    assert_eq!(
        review.span_context.trace_id(),
        submit.span_context.trace_id()
    );
    assert_eq!(review.parent_span_id, submit.span_context.span_id());
    app.stop().await;
}

/// The finished spans named `name` whose `id` attribute is `id`.
fn finished_about(name: &str, id: &str) -> Vec<SpanData> {
    exporter()
        .get_finished_spans()
        .expect("in-memory spans")
        .into_iter()
        .filter(|s| s.name == name && attribute(s, "id").as_deref() == Some(id))
        .collect()
}

/// A Submit that waits learns its decision without reading the proposal back
/// from the store: decided in the transaction that stores it (embedded), or
/// from the fan-out, which it listens to from before the insert commits. An
/// AwaitDecision for the same proposal afterwards does read it (so the spans
/// this looks for are seen).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_submit_learns_its_decision_without_reading_the_proposal_back() {
    exporter();
    let app = TestApp::spawn_reviewing(1).await;
    let key = app.key("acme", Role::Coordinator).await;
    let answer = app
        .client(&key)
        .await
        .submit(SubmitRequest {
            spec: Some(wire_spec()),
            wait_for_decision: Some(prost_types::Duration {
                seconds: 10,
                nanos: 0,
            }),
        })
        .await
        .expect("submitted")
        .into_inner();
    let proposal = answer.proposal.expect("a proposal");
    assert!(proposal.decision.is_some(), "decided: {proposal:?}");
    finished("api.proposal.submit", &proposal.id).await;
    assert_eq!(
        finished_about("store.sqlite.get_proposal", &proposal.id).len(),
        0,
        "a waiting submit read its proposal back"
    );

    app.await_decision(&key, &proposal.id, Duration::from_secs(10))
        .await
        .expect("decided");
    let started = Instant::now();
    while finished_about("store.sqlite.get_proposal", &proposal.id).is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "AwaitDecision's read of the proposal is seen"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    app.stop().await;
}
