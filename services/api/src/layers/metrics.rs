//! `metrics`: requests and latency by RPC and gRPC code (recorded through the
//! `metrics` facade; the binary installs the exporter).
//!
//! Labels come from fixed tables (the RPC as `trace` resolved it, and the
//! codes), so they cost no allocation per call and a client calling made-up
//! paths cannot mint new series: every path not in the RPC table counts as
//! `unknown`.

use std::time::Instant;

use countersign_proto::rpc::Rpc;

use super::{Answer, Middleware, Next, Request, Resolved, middleware_layer};

/// The `rpc` label: the RPC's path, or `unknown` for a path not in the table.
pub fn rpc_label(rpc: Option<&'static Rpc>) -> &'static str {
    rpc.map_or("unknown", |rpc| rpc.path)
}

/// The `code` label: the gRPC status of a response (OK when it carries none,
/// as a unary success's headers do not).
fn code_label<B>(response: &http::Response<B>) -> &'static str {
    let code = response
        .headers()
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<i32>().ok())
        .unwrap_or(0);
    match tonic::Code::from_i32(code) {
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

#[derive(Debug, Clone, Copy, Default)]
pub struct MetricsLayer;

middleware_layer!(MetricsLayer, Metrics);

impl Middleware for MetricsLayer {
    fn call<S: Next>(&self, mut inner: S, req: Request) -> Answer<S::Error> {
        let rpc = rpc_label(Resolved::of(&req));
        Box::pin(async move {
            let started = Instant::now();
            let result = inner.call(req).await;
            if let Ok(response) = &result {
                let code = code_label(response);
                metrics::counter!("countersign_grpc_requests_total", "rpc" => rpc, "code" => code)
                    .increment(1);
                metrics::histogram!("countersign_grpc_request_duration_seconds", "rpc" => rpc)
                    .record(started.elapsed().as_secs_f64());
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
