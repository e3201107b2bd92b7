//! `GET /metrics` in the Prometheus text format, on `metrics.listen`: the
//! `metrics` facade's recorder (metrics-exporter-prometheus) served over the
//! hyper that tonic already brings. Histograms are real Prometheus
//! histograms (buckets below), not summaries.

use std::{convert::Infallible, net::SocketAddr, time::Duration};

use anyhow::Context;
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header::CONTENT_TYPE};
use http_body_util::Full;
use hyper::{body::Incoming, server::conn::http1, service::service_fn};
use hyper_util::rt::TokioIo;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio::{net::TcpListener, task::JoinHandle};

/// Upper bounds (seconds) of every histogram's buckets: RPCs and reviews
/// take from under a millisecond to the review deadline.
const BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

/// Upper bounds (seconds) of the time people take over an escalation: from
/// a second to a day (a route keeps one open for at most 30 days).
const RESOLUTION_BUCKETS: &[f64] = &[
    1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0, 7200.0, 14400.0,
    28800.0, 86400.0,
];

/// How often histograms and idle series are tidied.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// Installs the process-wide recorder: from now on every `metrics::…!` is kept.
pub fn install_recorder() -> anyhow::Result<PrometheusHandle> {
    PrometheusBuilder::new()
        .set_buckets(BUCKETS)
        .context("histogram buckets")?
        .set_buckets_for_metric(
            Matcher::Full("countersign_escalation_resolution_seconds".into()),
            RESOLUTION_BUCKETS,
        )
        .context("histogram buckets")?
        .install_recorder()
        .context("installing the metrics recorder")
}

pub struct MetricsEndpoint {
    listener: TcpListener,
    addr: SocketAddr,
    handle: PrometheusHandle,
}

impl MetricsEndpoint {
    /// Binds `listen` (port 0 picks a free one).
    pub async fn bind(listen: SocketAddr, handle: PrometheusHandle) -> anyhow::Result<Self> {
        let listener = TcpListener::bind(listen)
            .await
            .with_context(|| format!("metrics.listen: binding {listen}"))?;
        let addr = listener.local_addr()?;
        Ok(MetricsEndpoint {
            listener,
            addr,
            handle,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves scrapes (and runs the recorder's upkeep) until the task is aborted.
    pub fn spawn(self) -> JoinHandle<()> {
        let MetricsEndpoint {
            listener, handle, ..
        } = self;
        tokio::spawn(async move {
            let upkeep = handle.clone();
            let mut tick = tokio::time::interval(UPKEEP_EVERY);
            loop {
                tokio::select! {
                    _ = tick.tick() => upkeep.run_upkeep(),
                    accepted = listener.accept() => match accepted {
                        Ok((stream, _)) => {
                            tokio::spawn(serve_connection(stream, handle.clone()));
                        }
                        Err(error) => {
                            tracing::warn!(%error, "metrics endpoint: accept failed");
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    },
                }
            }
        })
    }
}

async fn serve_connection(stream: tokio::net::TcpStream, handle: PrometheusHandle) {
    let service = service_fn(move |request: Request<Incoming>| {
        let response = respond(&handle, &request);
        async move { Ok::<_, Infallible>(response) }
    });
    if let Err(error) = http1::Builder::new()
        .serve_connection(TokioIo::new(stream), service)
        .await
    {
        tracing::debug!(%error, "metrics endpoint: connection ended");
    }
}

fn respond<B>(handle: &PrometheusHandle, request: &Request<B>) -> Response<Full<Bytes>> {
    let (status, content_type, body) = match (request.method(), request.uri().path()) {
        (&Method::GET, "/metrics") => (
            StatusCode::OK,
            "text/plain; version=0.0.4; charset=utf-8",
            handle.render(),
        ),
        (_, "/metrics") => (
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "GET only\n".into(),
        ),
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found: metrics are at /metrics\n".into(),
        ),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, http::HeaderValue::from_static(content_type));
    response
}
