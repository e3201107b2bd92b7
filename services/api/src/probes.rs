//! What every role serves for probes and tools on its gRPC port:
//! `grpc.health.v1` with a status per service, and reflection over the
//! given descriptor sets (health's own always included), as both
//! `grpc.reflection.v1` and `grpc.reflection.v1alpha` (which Python's
//! `grpcio-reflection`, older grpcurl, grpcui and Postman speak).

use tonic_health::{
    ServingStatus,
    pb::health_server::{Health, HealthServer},
    server::HealthReporter,
};
use tonic_reflection::{
    pb::{v1, v1alpha},
    server::Builder,
};

/// The reflection services, one per protocol version.
pub(crate) struct Reflection<V1, V1Alpha> {
    pub v1: v1::server_reflection_server::ServerReflectionServer<V1>,
    pub v1alpha: v1alpha::server_reflection_server::ServerReflectionServer<V1Alpha>,
}

/// The health reporter and service, and the reflection services.
pub(crate) fn probes(
    descriptor_sets: &[&[u8]],
) -> (
    HealthReporter,
    HealthServer<impl Health>,
    Reflection<
        impl v1::server_reflection_server::ServerReflection,
        impl v1alpha::server_reflection_server::ServerReflection,
    >,
) {
    let (reporter, health) = tonic_health::server::health_reporter();
    // Each version lists both reflection services (its own is added by the
    // builder) beside health and ours.
    let builder = |other_reflection: &'static [u8]| {
        let mut builder = Builder::configure()
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(other_reflection);
        for set in descriptor_sets {
            builder = builder.register_encoded_file_descriptor_set(set);
        }
        builder
    };
    let reflection = Reflection {
        v1: builder(v1alpha::FILE_DESCRIPTOR_SET)
            .build_v1()
            .expect("the embedded descriptor sets are valid"),
        v1alpha: builder(v1::FILE_DESCRIPTOR_SET)
            .build_v1alpha()
            .expect("the embedded descriptor sets are valid"),
    };
    (reporter, health, reflection)
}

/// Sets every one of `services` (`""`: the server as a whole) to `status`.
pub(crate) async fn set_all(health: &HealthReporter, services: &[&str], status: ServingStatus) {
    for service in services {
        health.set_service_status(*service, status).await;
    }
}

#[cfg(test)]
mod tests {
    use countersign_proto::rpc::RPCS;
    use prost::Message;
    use tonic_reflection::pb::{v1, v1alpha};

    #[test]
    fn the_public_rpcs_of_the_table_are_exactly_the_probes_methods() {
        let mut served = Vec::new();
        for set in [
            tonic_health::pb::FILE_DESCRIPTOR_SET,
            v1::FILE_DESCRIPTOR_SET,
            v1alpha::FILE_DESCRIPTOR_SET,
        ] {
            let set = prost_types::FileDescriptorSet::decode(set).expect("descriptor set");
            for file in &set.file {
                for service in &file.service {
                    for method in &service.method {
                        served.push(format!(
                            "/{}.{}/{}",
                            file.package(),
                            service.name(),
                            method.name()
                        ));
                    }
                }
            }
        }
        let public: Vec<_> = RPCS
            .iter()
            .filter(|rpc| rpc.is_public())
            .map(|rpc| rpc.path.to_owned())
            .collect();
        assert_eq!(public, served);
    }
}
