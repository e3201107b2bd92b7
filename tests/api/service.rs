//! Health, reflection and transport limits.

use countersign_domain::Role;
use countersign_proto::{convert::json_to_struct, v1::SubmitRequest};
use tokio_stream::StreamExt;
use tonic::Code;
use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};

use crate::helpers::{TestApp, valid_spec};

#[tokio::test]
async fn health_is_serving_without_a_key() {
    let app = TestApp::spawn().await;
    let mut health = HealthClient::new(app.channel().await);
    for service in ["", "countersign.v1.ProposalService"] {
        let response = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            response.status,
            ServingStatus::Serving as i32,
            "{service:?}"
        );
    }
}

#[tokio::test]
async fn reflection_lists_the_proposal_service_without_a_key() {
    use tonic_reflection_client::*;
    let app = TestApp::spawn().await;
    let services = list_services(app.channel().await).await;
    assert!(
        services
            .iter()
            .any(|s| s == "countersign.v1.ProposalService"),
        "{services:?}"
    );
    assert!(
        services.iter().any(|s| s == "grpc.health.v1.Health"),
        "{services:?}"
    );
}

/// A minimal reflection client over the generated v1 types.
mod tonic_reflection_client {
    use tonic_reflection::pb::v1::{
        ServerReflectionRequest, server_reflection_client::ServerReflectionClient,
        server_reflection_request::MessageRequest, server_reflection_response::MessageResponse,
    };

    use super::StreamExt;

    pub async fn list_services(channel: tonic::transport::Channel) -> Vec<String> {
        let mut client = ServerReflectionClient::new(channel);
        let request = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        };
        let mut stream = client
            .server_reflection_info(tokio_stream::once(request))
            .await
            .unwrap()
            .into_inner();
        let response = stream.next().await.unwrap().unwrap();
        match response.message_response {
            Some(MessageResponse::ListServicesResponse(list)) => {
                list.service.into_iter().map(|s| s.name).collect()
            }
            other => panic!("unexpected reflection answer: {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_message_over_one_mebibyte_is_refused_and_nothing_is_stored() {
    let app = TestApp::spawn().await;
    let key = app.key("acme", Role::Coordinator).await;
    let mut spec = valid_spec();
    spec.parameters = Some(json_to_struct(
        serde_json::json!({"blob": "x".repeat(1024 * 1024 + 1)})
            .as_object()
            .unwrap(),
    ));
    spec.idempotency_key = "big".into();
    let mut client = app.client(&key).await;
    let status = client
        .submit(SubmitRequest {
            spec: Some(spec),
            ..Default::default()
        })
        .await
        .expect_err("an oversized message must be refused");
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    // A normal submission with the same idempotency key is new: nothing was stored.
    let mut small = valid_spec();
    small.idempotency_key = "big".into();
    assert!(!app.submit(&key, small).await.unwrap().deduplicated);
}

#[tokio::test]
async fn reflection_v1alpha_lists_the_services_too() {
    let app = TestApp::spawn().await;
    let services = v1alpha_services(app.channel().await).await;
    for service in [
        "countersign.v1.ProposalService",
        "countersign.v1.AuditService",
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
        "grpc.reflection.v1.ServerReflection",
    ] {
        assert!(
            services.iter().any(|s| s == service),
            "{service}: {services:?}"
        );
    }
    let services = tonic_reflection_client::list_services(app.channel().await).await;
    assert!(
        services
            .iter()
            .any(|s| s == "grpc.reflection.v1alpha.ServerReflection"),
        "{services:?}"
    );
}

#[tokio::test]
async fn the_worker_roles_health_port_serves_both_reflection_versions() {
    let health = countersign_api::HealthOnly::bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let endpoint = format!("http://{}", health.local_addr());
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(health.run_until_stopped(stop.clone()));
    let channel = tonic::transport::Endpoint::from_shared(endpoint)
        .unwrap()
        .connect()
        .await
        .unwrap();
    for services in [
        v1alpha_services(channel.clone()).await,
        tonic_reflection_client::list_services(channel).await,
    ] {
        assert!(
            services.iter().any(|s| s == "grpc.health.v1.Health"),
            "{services:?}"
        );
    }
    stop.cancel();
}

/// The services a `grpc.reflection.v1alpha` client (grpcurl before 1.8.8,
/// Python's grpcio-reflection, Postman) is told of.
async fn v1alpha_services(channel: tonic::transport::Channel) -> Vec<String> {
    use tonic_reflection::pb::v1alpha::{
        ServerReflectionRequest, server_reflection_client::ServerReflectionClient,
        server_reflection_request::MessageRequest, server_reflection_response::MessageResponse,
    };
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut stream = ServerReflectionClient::new(channel)
        .server_reflection_info(tokio_stream::once(request))
        .await
        .expect("v1alpha reflection is served")
        .into_inner();
    match stream.next().await.unwrap().unwrap().message_response {
        Some(MessageResponse::ListServicesResponse(list)) => {
            list.service.into_iter().map(|s| s.name).collect()
        }
        other => panic!("unexpected reflection answer: {other:?}"),
    }
}

/// Sends a request message byte for byte, as a client of another language
/// (or a broken one) might; answers the status.
pub async fn raw_call(
    channel: tonic::transport::Channel,
    key: &str,
    path: &'static str,
    message: Vec<u8>,
) -> tonic::Status {
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let mut request = tonic::Request::new(message);
    request
        .metadata_mut()
        .insert("authorization", format!("Bearer {key}").parse().unwrap());
    grpc.unary(
        request,
        http::uri::PathAndQuery::from_static(path),
        raw::Bytes,
    )
    .await
    .expect_err("the server refuses it")
}

/// A codec that passes bytes through unchanged, both ways.
mod raw {
    use bytes::{Buf, BufMut};
    use tonic::{
        Status,
        codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder},
    };

    #[derive(Debug, Clone, Copy, Default)]
    pub struct Bytes;

    impl Codec for Bytes {
        type Encode = Vec<u8>;
        type Decode = Vec<u8>;
        type Encoder = Bytes;
        type Decoder = Bytes;

        fn encoder(&mut self) -> Self::Encoder {
            Bytes
        }

        fn decoder(&mut self) -> Self::Decoder {
            Bytes
        }
    }

    impl Encoder for Bytes {
        type Item = Vec<u8>;
        type Error = Status;

        fn encode(&mut self, item: Vec<u8>, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
            buf.put_slice(&item);
            Ok(())
        }
    }

    impl Decoder for Bytes {
        type Item = Vec<u8>;
        type Error = Status;

        fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, Status> {
            Ok(Some(buf.copy_to_bytes(buf.remaining()).to_vec()))
        }
    }
}

/// Messages that do not decode: bytes that are no protobuf, and a spec whose
/// action is not UTF-8.
pub fn undecodable() -> [(&'static str, Vec<u8>); 3] {
    [
        ("garbage", vec![0xff; 64]),
        // Field 1 (spec), 5 bytes: field 1 (action), 3 bytes, not UTF-8.
        ("invalid UTF-8", vec![0x0a, 5, 0x0a, 3, 0xc3, 0x28, 0xff]),
        // Field 1 (spec), claiming more bytes than follow.
        ("truncated", vec![0x0a, 0x7f, 0x01]),
    ]
}

#[tokio::test]
async fn a_request_that_does_not_decode_is_an_invalid_argument() {
    let app = TestApp::spawn().await;
    let key = app.key("acme", Role::Admin).await;
    for (case, message) in undecodable() {
        for path in [
            "/countersign.v1.ProposalService/Submit",
            "/countersign.v1.TargetService/PutTarget",
            "/countersign.v1.AuditService/ListDecisions",
        ] {
            let status = raw_call(app.channel().await, &key, path, message.clone()).await;
            assert_eq!(
                status.code(),
                Code::InvalidArgument,
                "{case} to {path}: {status:?}"
            );
            assert!(
                status.message().starts_with("the request does not decode"),
                "{case}: {status:?}"
            );
        }
    }
    // Nothing was stored.
    assert!(app.event_log("acme").await.is_empty());
    let targets = app.store.list_targets("acme", None, 10).await.unwrap();
    assert!(targets.is_empty());
}

#[tokio::test]
async fn a_message_over_the_limit_is_resource_exhausted_at_its_header() {
    let app = TestApp::spawn().await;
    let key = app.key("acme", Role::Admin).await;
    // Just over the limit, as raw bytes (the server reads the frame header).
    let status = raw_call(
        app.channel().await,
        &key,
        "/countersign.v1.ProposalService/Submit",
        vec![0; 1024 * 1024 + 1],
    )
    .await;
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    // At the limit, the message is read (and, being zeros, does not decode).
    let status = raw_call(
        app.channel().await,
        &key,
        "/countersign.v1.ProposalService/Submit",
        vec![0; 1024 * 1024],
    )
    .await;
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
}

#[tokio::test]
async fn health_reports_the_services_the_api_mounts_and_no_others() {
    let app = TestApp::spawn().await;
    let mut health = HealthClient::new(app.channel().await);
    let mut services: Vec<_> = countersign_proto::rpc::RPCS
        .iter()
        .filter(|rpc| rpc.service.starts_with("countersign.v1."))
        .map(|rpc| rpc.service)
        .collect();
    services.dedup();
    assert!(
        services.contains(&"countersign.v1.PolicyService")
            && services.contains(&"countersign.v1.EscalationService"),
        "{services:?}"
    );
    for service in services {
        let answer = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await;
        assert_eq!(
            answer.expect(service).into_inner().status,
            ServingStatus::Serving as i32,
            "{service}"
        );
    }
    let unknown = health
        .check(HealthCheckRequest {
            service: "countersign.v1.NoSuchService".into(),
        })
        .await
        .expect_err("a service nobody mounts");
    assert_eq!(unknown.code(), Code::NotFound, "{unknown:?}");
}
