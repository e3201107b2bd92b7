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
        .submit(SubmitRequest { spec: Some(spec) })
        .await
        .expect_err("an oversized message must be refused");
    assert_ne!(status.code(), Code::Ok);
    assert!(
        matches!(
            status.code(),
            Code::OutOfRange | Code::ResourceExhausted | Code::InvalidArgument
        ),
        "{status:?}"
    );
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
        assert!(services.iter().any(|s| s == service), "{service}: {services:?}");
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
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(health.run_until_stopped(async move {
        let _ = stopped.await;
    }));
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
    let _ = stop.send(());
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
