//! `metrics`: requests and latency by RPC and gRPC code (recorded through the
//! `metrics` facade; the binary installs the exporter).

use std::{
    task::{Context, Poll},
    time::Instant,
};

use tower::{Layer, Service};

use super::{BoxFuture, take_ready};

#[derive(Clone, Default)]
pub struct MetricsLayer;

impl<S> Layer<S> for MetricsLayer {
    type Service = Metrics<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Metrics { inner }
    }
}

#[derive(Clone)]
pub struct Metrics<S> {
    inner: S,
}

/// The code of a finished call: in the headers for errors (trailers-only), else OK
/// as far as the unary response is concerned.
fn code_of<B>(response: &http::Response<B>) -> String {
    response
        .headers()
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<i32>().ok())
        .map(|c| format!("{:?}", tonic::Code::from_i32(c)))
        .unwrap_or_else(|| "Ok".to_owned())
}

impl<S, ReqBody, ResBody> Service<http::Request<ReqBody>> for Metrics<S>
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
        let rpc = req.uri().path().to_owned();
        Box::pin(async move {
            let started = Instant::now();
            let result = inner.call(req).await;
            if let Ok(response) = &result {
                let code = code_of(response);
                metrics::counter!("countersign_grpc_requests_total", "rpc" => rpc.clone(), "code" => code)
                    .increment(1);
                metrics::histogram!("countersign_grpc_request_duration_seconds", "rpc" => rpc)
                    .record(started.elapsed().as_secs_f64());
            }
            result
        })
    }
}
