//! Logs and traces. Logs go to stderr as text or JSON lines (`RUST_LOG`
//! overrides the level; `serve` takes the format from `log.format`), in
//! colour only when stderr is a terminal: a file or a pipe gets plain text. Spans of
//! `serve` are exported over OTLP/gRPC only when the standard
//! `OTEL_EXPORTER_OTLP_ENDPOINT` is set (service name from `OTEL_SERVICE_NAME`,
//! default `countersign`), and flushed on shutdown.

use std::io::IsTerminal;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::{Resource, trace::SdkTracerProvider};
use tracing::Subscriber;
use tracing_subscriber::{
    EnvFilter, Layer, layer::SubscriberExt, registry::LookupSpan, util::SubscriberInitExt,
};

pub use crate::config::LogFormat;

/// What spans reach the exporter: the service's own at `info`, and the store's
/// hot-path spans (`debug`, so that plain logging never pays for them).
const EXPORTED: &str = "info,countersign_store=debug,h2=warn,tower=warn,hyper=warn,tonic=warn";

/// How long the last spans may take to reach the collector at exit.
const FLUSH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// The exporter behind the OpenTelemetry layer, if one was configured.
#[must_use = "flush the exported spans with `Telemetry::shutdown` before exiting"]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Flushes the spans not yet exported and stops the exporter.
    pub async fn shutdown(self) {
        let Some(provider) = self.provider else {
            return;
        };
        // The SDK blocks while it flushes: off the async workers.
        let flushed =
            tokio::task::spawn_blocking(move || provider.shutdown_with_timeout(FLUSH_TIMEOUT))
                .await;
        match flushed {
            Ok(Ok(())) => {}
            Ok(Err(error)) => eprintln!("warning: flushing spans failed: {error}"),
            Err(error) => eprintln!("warning: flushing spans failed: {error}"),
        }
    }
}

/// Client and admin commands only warn, so that their stdout stays
/// clean for scripts; `migrate` logs at `info`. No spans are exported.
pub fn init(server: bool) {
    let default = if server { "info" } else { "warn" };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter(default))
        .with_writer(std::io::stderr)
        .with_ansi(colour())
        .try_init();
}

/// `serve`: logs at `info` in `format`, and spans over OTLP when configured.
pub fn init_server(format: LogFormat) -> anyhow::Result<Telemetry> {
    let logs = match format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(colour())
            .with_filter(filter("info"))
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .with_filter(filter("info"))
            .boxed(),
    };
    let endpoint = std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT")
        .ok()
        .filter(|e| !e.trim().is_empty());
    let exporting = match endpoint {
        Some(endpoint) => Some((otlp_provider(&endpoint)?, endpoint)),
        None => None,
    };
    let spans = exporting.as_ref().map(|(provider, _)| otel_layer(provider));
    let _ = tracing_subscriber::registry()
        .with(logs)
        .with(spans)
        .try_init();
    let provider = exporting.map(|(provider, endpoint)| {
        tracing::info!(%endpoint, service = %service_name(), "exporting spans over OTLP");
        provider
    });
    Ok(Telemetry { provider })
}

/// Colour codes are for a person at a terminal; in a file or a pipe they are
/// bytes that a log reader has to strip.
fn colour() -> bool {
    std::io::stderr().is_terminal()
}

fn filter(default: &str) -> EnvFilter {
    EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default))
}

fn service_name() -> String {
    std::env::var("OTEL_SERVICE_NAME")
        .ok()
        .filter(|n| !n.trim().is_empty())
        .unwrap_or_else(|| "countersign".to_owned())
}

fn otlp_provider(endpoint: &str) -> anyhow::Result<SdkTracerProvider> {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint)
        .build()
        .map_err(|e| anyhow::anyhow!("OTEL_EXPORTER_OTLP_ENDPOINT: {e}"))?;
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(
            Resource::builder()
                .with_service_name(service_name())
                .build(),
        )
        .build())
}

/// The layer that turns spans into OpenTelemetry spans of `provider`, with the
/// filter the exporter uses (tests install it with an in-memory exporter).
pub fn otel_layer<S>(provider: &SdkTracerProvider) -> impl Layer<S> + Send + Sync + 'static
where
    S: Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
{
    tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("countersign"))
        .with_filter(EnvFilter::new(EXPORTED))
}
