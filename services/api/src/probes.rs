//! What every role serves for probes and tools on its gRPC port:
//! `grpc.health.v1` with a status per service, and reflection over the
//! given descriptor sets (health's own always included).

use tonic_health::{
    ServingStatus,
    pb::health_server::{Health, HealthServer},
    server::HealthReporter,
};
use tonic_reflection::pb::v1::server_reflection_server::{
    ServerReflection, ServerReflectionServer,
};

/// The health reporter and service, and the reflection service.
pub(crate) fn probes(
    descriptor_sets: &[&[u8]],
) -> (
    HealthReporter,
    HealthServer<impl Health>,
    ServerReflectionServer<impl ServerReflection>,
) {
    let (reporter, health) = tonic_health::server::health_reporter();
    let mut reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET);
    for set in descriptor_sets {
        reflection = reflection.register_encoded_file_descriptor_set(set);
    }
    let reflection = reflection
        .build_v1()
        .expect("the embedded descriptor sets are valid");
    (reporter, health, reflection)
}

/// Sets every one of `services` (`""`: the server as a whole) to `status`.
pub(crate) async fn set_all(health: &HealthReporter, services: &[&str], status: ServingStatus) {
    for service in services {
        health.set_service_status(*service, status).await;
    }
}
