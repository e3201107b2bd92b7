//! What the console's API answers: the gRPC services' own messages in
//! protobuf's JSON mapping (field names as in the .proto files, enums by
//! name, 64-bit numbers as JSON numbers), so the browser sees exactly what a
//! gRPC client of the same key would; and their refusals as HTTP statuses
//! with the same public message.

use std::sync::LazyLock;

use axum::{
    Json,
    response::{IntoResponse, Response},
};
use countersign_proto::FILE_DESCRIPTOR_SET;
use http::StatusCode;
use prost_reflect::{DescriptorPool, DynamicMessage, SerializeOptions};
use serde_json::{Value, json};
use tonic::{Code, Status};

static POOL: LazyLock<DescriptorPool> = LazyLock::new(|| {
    DescriptorPool::decode(FILE_DESCRIPTOR_SET).expect("the build's own descriptor set decodes")
});

const OPTIONS: SerializeOptions = SerializeOptions::new()
    .stringify_64_bit_integers(false)
    .use_proto_field_name(true)
    .skip_default_fields(false);

/// `message`, of the protobuf type `full_name` (`countersign.v1.Proposal`),
/// as JSON.
pub fn to_json<M: prost::Message>(message: &M, full_name: &str) -> Value {
    let descriptor = POOL
        .get_message_by_name(full_name)
        .unwrap_or_else(|| panic!("{full_name} is a message of the descriptor set"));
    let dynamic = DynamicMessage::decode(descriptor, message.encode_to_vec().as_slice())
        .expect("a message decodes as its own type");
    dynamic
        .serialize_with_options(serde_json::value::Serializer, &OPTIONS)
        .expect("a message serializes to JSON")
}

/// A refusal as the console answers it: the gRPC code's HTTP status, and a
/// body naming the code and the service's public message.
#[derive(Debug)]
pub struct Refused {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

impl Refused {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Refused {
            status,
            code,
            message: message.into(),
        }
    }

    pub fn signed_out() -> Self {
        Refused::new(
            StatusCode::UNAUTHORIZED,
            "UNAUTHENTICATED",
            "not signed in, or the session has ended: sign in again",
        )
    }

    pub fn csrf() -> Self {
        Refused::new(
            StatusCode::FORBIDDEN,
            "CSRF",
            "this request does not carry the session's CSRF token",
        )
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Refused::new(StatusCode::BAD_REQUEST, "INVALID_ARGUMENT", message)
    }
}

impl From<Status> for Refused {
    fn from(status: Status) -> Self {
        let (http, code) = match status.code() {
            Code::InvalidArgument => (StatusCode::BAD_REQUEST, "INVALID_ARGUMENT"),
            Code::OutOfRange => (StatusCode::BAD_REQUEST, "OUT_OF_RANGE"),
            Code::Unauthenticated => (StatusCode::UNAUTHORIZED, "UNAUTHENTICATED"),
            Code::PermissionDenied => (StatusCode::FORBIDDEN, "PERMISSION_DENIED"),
            Code::NotFound => (StatusCode::NOT_FOUND, "NOT_FOUND"),
            Code::AlreadyExists => (StatusCode::CONFLICT, "ALREADY_EXISTS"),
            Code::FailedPrecondition => (StatusCode::CONFLICT, "FAILED_PRECONDITION"),
            Code::Aborted => (StatusCode::CONFLICT, "ABORTED"),
            Code::ResourceExhausted => (StatusCode::TOO_MANY_REQUESTS, "RESOURCE_EXHAUSTED"),
            Code::Unavailable => (StatusCode::SERVICE_UNAVAILABLE, "UNAVAILABLE"),
            Code::DeadlineExceeded => (StatusCode::GATEWAY_TIMEOUT, "DEADLINE_EXCEEDED"),
            _ => (StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL"),
        };
        // The services' messages are public (internal errors already say no
        // more than "internal error").
        Refused::new(http, code, status.message())
    }
}

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        (
            self.status,
            Json(json!({ "code": self.code, "message": self.message })),
        )
            .into_response()
    }
}

#[cfg(test)]
mod tests {
    use countersign_proto::v1;

    use super::*;

    #[test]
    fn messages_keep_their_proto_names_enum_names_and_untrusted_text_verbatim() {
        let proposal = v1::Proposal {
            id: "p1".into(),
            state: v1::ProposalState::Escalated as i32,
            spec: Some(v1::ProposalSpec {
                reason: "<script>alert(1)</script>".into(),
                ..Default::default()
            }),
            suppressed_retries: 3,
            ..Default::default()
        };
        let json = to_json(&proposal, "countersign.v1.Proposal");
        assert_eq!(json["id"], "p1");
        assert_eq!(json["state"], "PROPOSAL_STATE_ESCALATED");
        assert_eq!(json["suppressed_retries"], 3);
        assert_eq!(json["spec"]["reason"], "<script>alert(1)</script>");
        assert_eq!(json["submitted_by"], "", "defaults are present");
    }

    #[test]
    fn refusals_keep_the_code_and_the_public_message() {
        let refused = Refused::from(Status::permission_denied(
            "ann@example.com submitted this proposal (or owns the agent that did) and may not resolve it",
        ));
        assert_eq!(refused.status, StatusCode::FORBIDDEN);
        assert_eq!(refused.code, "PERMISSION_DENIED");
        assert!(refused.message.contains("submitted this proposal"));
        assert_eq!(
            Refused::from(Status::failed_precondition("x")).status,
            StatusCode::CONFLICT
        );
        assert_eq!(
            Refused::from(Status::internal("internal error")).status,
            StatusCode::INTERNAL_SERVER_ERROR
        );
    }
}
