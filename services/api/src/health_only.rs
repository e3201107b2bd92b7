//! [`HealthOnly`]: what a process without the API serves on its gRPC port
//! (`serve --role worker`): `grpc.health.v1` (SERVING while it runs) and
//! reflection, so Kubernetes gRPC probes work on every role. Every other
//! service answers UNIMPLEMENTED.

use std::net::SocketAddr;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::transport::{Server, server::TcpIncoming};
use tonic_health::ServingStatus;

use crate::probes::{probes, set_all};

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

    /// Serves until `shutdown` is cancelled; then health turns NOT_SERVING and
    /// the listener closes.
    pub async fn run_until_stopped(
        self,
        shutdown: CancellationToken,
    ) -> Result<(), tonic::transport::Error> {
        let (health, health_service, reflection) = probes(&[]);
        set_all(&health, &[""], ServingStatus::Serving).await;
        tracing::info!(addr = %self.addr, "health serving (worker role)");
        let signal = async move {
            shutdown.cancelled().await;
            set_all(&health, &[""], ServingStatus::NotServing).await;
        };
        Server::builder()
            .add_service(health_service)
            .add_service(reflection.v1)
            .add_service(reflection.v1alpha)
            .serve_with_incoming_shutdown(TcpIncoming::from(self.listener), signal)
            .await
    }
}
