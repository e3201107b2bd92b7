//! `metrics`: requests and latency by RPC and gRPC code (recorded through the
//! `metrics` facade; the binary installs the exporter).
//!
//! Labels come from fixed tables, so they cost no allocation per call and a
//! client calling made-up paths cannot mint new series: every path that is
//! not one of ours counts as `unknown`.

use std::{
    task::{Context, Poll},
    time::Instant,
};

use tower::{Layer, Service};

use super::{BoxFuture, take_ready};

/// Every RPC this server answers, as its `rpc` label.
const RPCS: &[&str] = &[
    "/countersign.v1.ProposalService/Submit",
    "/countersign.v1.ProposalService/GetProposal",
    "/countersign.v1.ProposalService/CancelProposal",
    "/countersign.v1.ProposalService/AwaitDecision",
    "/countersign.v1.NotificationService/Watch",
    "/countersign.v1.SopService/PutSop",
    "/countersign.v1.SopService/GetSop",
    "/countersign.v1.SopService/ListSops",
    "/countersign.v1.SopService/RetireSop",
    "/countersign.v1.TargetService/PutTarget",
    "/countersign.v1.TargetService/GetTarget",
    "/countersign.v1.TargetService/ListTargets",
    "/countersign.v1.AuditService/ListDecisions",
    "/countersign.v1.AuditService/GetDecision",
    "/countersign.v1.AuditService/VerifyLog",
    "/countersign.v1.AuditService/GetCheckpoint",
    "/countersign.v1.PolicyService/PutRoute",
    "/countersign.v1.PolicyService/ListRoutes",
    "/countersign.v1.PolicyService/DeleteRoute",
    "/countersign.v1.EscalationService/ListEscalations",
    "/countersign.v1.EscalationService/Resolve",
    "/grpc.health.v1.Health/Check",
    "/grpc.health.v1.Health/Watch",
    "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
];

/// The `rpc` label for a request path.
pub fn rpc_label(path: &str) -> &'static str {
    RPCS.iter()
        .copied()
        .find(|rpc| *rpc == path)
        .unwrap_or("unknown")
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
        let rpc = rpc_label(req.uri().path());
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
    fn every_rpc_of_our_protos_has_its_own_label() {
        use prost::Message;
        let set = prost_types::FileDescriptorSet::decode(countersign_proto::FILE_DESCRIPTOR_SET)
            .expect("descriptor set");
        let mut methods = 0;
        for file in &set.file {
            for service in &file.service {
                for method in &service.method {
                    let path = format!("/{}.{}/{}", file.package(), service.name(), method.name());
                    assert_eq!(rpc_label(&path), path, "{path} has no label of its own");
                    methods += 1;
                }
            }
        }
        assert_eq!(methods, 21, "the protos' methods");
    }

    #[test]
    fn a_path_that_is_not_one_of_ours_counts_as_unknown() {
        assert_eq!(
            rpc_label("/countersign.v1.ProposalService/Submit"),
            "/countersign.v1.ProposalService/Submit"
        );
        assert_eq!(rpc_label("/countersign.v1.ProposalService/Nope"), "unknown");
        assert_eq!(rpc_label("/x/1f3a"), "unknown");
    }

    #[test]
    fn a_response_without_grpc_status_is_ok_and_others_are_named() {
        let ok = http::Response::new(());
        assert_eq!(code_label(&ok), "Ok");
        let refused = tonic::Status::permission_denied("no").into_http::<()>();
        assert_eq!(code_label(&refused), "PermissionDenied");
    }
}
