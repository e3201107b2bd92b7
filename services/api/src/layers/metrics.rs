//! `metrics`: requests and latency by RPC and gRPC code (recorded through the
//! `metrics` facade; the binary installs the exporter).
//!
//! Labels come from fixed tables (the RPC as `trace` resolved it, and the
//! codes), so they cost no allocation per call and a client calling made-up
//! paths cannot mint new series: every path not in the RPC table counts as
//! `unknown`. Each series' handle is registered at its first answer and kept
//! by the layer, so an answer costs no registry lookup.

use std::{
    sync::{Arc, OnceLock},
    time::Instant,
};

use countersign_proto::rpc::{RPCS, Rpc};
use metrics::{Counter, Histogram};

use super::{Answer, Middleware, Next, Request, Resolved, middleware_layer};

/// The `rpc` label: the RPC's path, or `unknown` for a path not in the table.
pub fn rpc_label(rpc: Option<&'static Rpc>) -> &'static str {
    rpc.map_or("unknown", |rpc| rpc.path)
}

/// The gRPC status of a response (OK when it carries none, as a unary
/// success's headers do not).
fn code_of<B>(response: &http::Response<B>) -> tonic::Code {
    let code = response
        .headers()
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<i32>().ok())
        .unwrap_or(0);
    tonic::Code::from_i32(code)
}

/// How many gRPC codes there are (numbered 0 to 16).
const CODES: usize = 17;

/// The `code` label of a gRPC status.
fn code_name(code: tonic::Code) -> &'static str {
    match code {
        tonic::Code::Ok => "Ok",
        tonic::Code::Cancelled => "Cancelled",
        tonic::Code::Unknown => "Unknown",
        tonic::Code::InvalidArgument => "InvalidArgument",
        tonic::Code::DeadlineExceeded => "DeadlineExceeded",
        tonic::Code::NotFound => "NotFound",
        tonic::Code::AlreadyExists => "AlreadyExists",
        tonic::Code::PermissionDenied => "PermissionDenied",
        tonic::Code::ResourceExhausted => "ResourceExhausted",
        tonic::Code::FailedPrecondition => "FailedPrecondition",
        tonic::Code::Aborted => "Aborted",
        tonic::Code::OutOfRange => "OutOfRange",
        tonic::Code::Unimplemented => "Unimplemented",
        tonic::Code::Internal => "Internal",
        tonic::Code::Unavailable => "Unavailable",
        tonic::Code::DataLoss => "DataLoss",
        tonic::Code::Unauthenticated => "Unauthenticated",
    }
}

/// The `code` label of a response.
#[cfg(test)]
fn code_label<B>(response: &http::Response<B>) -> &'static str {
    code_name(code_of(response))
}

/// One RPC's series, each registered at its first answer.
#[derive(Default)]
struct Series {
    duration: OnceLock<Histogram>,
    requests: [OnceLock<Counter>; CODES],
}

impl Series {
    fn record(&self, rpc: &'static str, code: tonic::Code, seconds: f64) {
        // `Code` is a fieldless enum numbered 0..=16: its number is its slot.
        let slot = &self.requests[(code as usize).min(CODES - 1)];
        slot.get_or_init(|| {
            metrics::counter!(
                "countersign_grpc_requests_total",
                "rpc" => rpc,
                "code" => code_name(code)
            )
        })
        .increment(1);
        self.duration
            .get_or_init(
                || metrics::histogram!("countersign_grpc_request_duration_seconds", "rpc" => rpc),
            )
            .record(seconds);
    }
}

/// Records every answer under its RPC's series (the table's, and one more
/// for paths not in it).
#[derive(Clone)]
pub struct MetricsLayer {
    series: Arc<[Series]>,
}

impl Default for MetricsLayer {
    fn default() -> Self {
        MetricsLayer {
            series: (0..=RPCS.len()).map(|_| Series::default()).collect(),
        }
    }
}

middleware_layer!(MetricsLayer, Metrics);

impl Middleware for MetricsLayer {
    fn call<S: Next>(&self, mut inner: S, req: Request) -> Answer<S::Error> {
        let rpc = Resolved::of(&req);
        let series = self.series.clone();
        Box::pin(async move {
            let started = Instant::now();
            let result = inner.call(req).await;
            if let Ok(response) = &result {
                let index = rpc.map_or(RPCS.len(), |rpc| rpc.index);
                series[index].record(
                    rpc_label(rpc),
                    code_of(response),
                    started.elapsed().as_secs_f64(),
                );
            }
            result
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_rpc_is_labelled_by_its_path_and_a_path_not_in_the_table_as_unknown() {
        use countersign_proto::rpc::find;
        for path in [
            "/countersign.v1.ProposalService/Submit",
            "/grpc.health.v1.Health/Check",
        ] {
            assert_eq!(rpc_label(find(path)), path);
        }
        assert_eq!(rpc_label(None), "unknown");
    }

    #[test]
    fn a_response_without_grpc_status_is_ok_and_others_are_named() {
        let ok = http::Response::new(());
        assert_eq!(code_label(&ok), "Ok");
        let refused = tonic::Status::permission_denied("no").into_http::<()>();
        assert_eq!(code_label(&refused), "PermissionDenied");
    }
}
