//! [`HealthOnly`]: what a process without the API serves on its gRPC port
//! (`serve --role worker`): `grpc.health.v1` (SERVING while it runs) and
//! reflection, so Kubernetes gRPC probes work on every role. Every other
//! service answers UNIMPLEMENTED.

use std::{future::Future, net::SocketAddr};

use tokio::net::TcpListener;
use tonic::transport::{Server, server::TcpIncoming};
use tonic_health::ServingStatus;

pub struct HealthOnly {
    listener: TcpListener,
    addr: SocketAddr,
}

impl HealthOnly {
    /// Binds the listener (port 0 picks a free one).
    pub async fn bind(listen: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind(listen).await?;
        let addr = listener.local_addr()?;
        Ok(HealthOnly { listener, addr })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves until `shutdown` resolves; then health turns NOT_SERVING and
    /// the listener closes.
    pub async fn run_until_stopped(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), tonic::transport::Error> {
        let (health, health_service) = tonic_health::server::health_reporter();
        let reflection = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .build_v1()
            .expect("the embedded descriptor set is valid");
        health.set_service_status("", ServingStatus::Serving).await;
        tracing::info!(addr = %self.addr, "health serving (worker role)");
        let signal = async move {
            shutdown.await;
            health
                .set_service_status("", ServingStatus::NotServing)
                .await;
        };
        Server::builder()
            .add_service(health_service)
            .add_service(reflection)
            .serve_with_incoming_shutdown(TcpIncoming::from(self.listener), signal)
            .await
    }
}
