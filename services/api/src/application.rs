//! [`Application`]: binds the listener (port 0 in tests), mounts the services
//! behind the layer stack, and serves until told to stop.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use countersign_domain::audit::SigningKey;
use countersign_peers::Peers;
use countersign_proto::{
    FILE_DESCRIPTOR_SET,
    v1::{
        audit_service_server::AuditServiceServer,
        escalation_service_server::EscalationServiceServer,
        notification_service_server::NotificationServiceServer,
        policy_service_server::PolicyServiceServer, proposal_service_server::ProposalServiceServer,
        sop_service_server::SopServiceServer, target_service_server::TargetServiceServer,
    },
};
use countersign_store::{DynStore, SubmitReview};
use tokio::net::TcpListener;
use tokio_stream::StreamExt;
use tokio_util::sync::CancellationToken;
use tonic::{
    server::NamedService,
    service::RoutesBuilder,
    transport::{Server, server::TcpIncoming},
};
use tonic_health::ServingStatus;
use tower::ServiceBuilder;

use crate::{
    RateLimit, Timeouts,
    console::{Console, ConsoleConfig, Services},
    directory::{self, Directory},
    fanout::{Fanout, Observer, WatchConfig, live_position, spawn_pump},
    layers::{
        AuthLayer, MessageLimitLayer, MetricsLayer, RateLimitLayer, SmallFramesLayer, TimeoutLayer,
        TraceLayer, auth::default_refusal_limit, small_frames::CopiedWrites,
    },
    probes::{probes, set_all},
    queue_depths::QueueDepths,
    services::{
        AuditApi, EscalationApi, NotificationApi, PolicyApi, ProposalApi, Receipts, SopApi,
        TargetApi, Views, audit::checkpoint_periodically,
    },
    suppression::{Suppression, SuppressionConfig, spawn_listener, spawn_maintenance},
};

/// The largest request message the server decodes (`message_limit` refuses
/// larger ones RESOURCE_EXHAUSTED; tonic's own limit is the backstop).
pub const MAX_MESSAGE_BYTES: usize = 1024 * 1024;

#[derive(Debug, Clone)]
pub struct ApiConfig {
    pub listen: SocketAddr,
    pub rate_limit: RateLimit,
    pub timeouts: Timeouts,
    /// How long a looked-up credential or tenant is reused (0 = never).
    pub credential_cache_ttl: Duration,
    /// Refused credentials one client address may present before further
    /// ones are answered RESOURCE_EXHAUSTED.
    pub refused_credentials: RateLimit,
    pub watch: WatchConfig,
    pub suppression: SuppressionConfig,
    /// Signs the decision log's checkpoints (none: `GetCheckpoint` and
    /// checkpoint verification answer FAILED_PRECONDITION).
    pub signing_key: Option<SigningKey>,
    /// How often every grown log gets a signed checkpoint.
    pub checkpoint_every: Duration,
    /// The names of the model endpoints the server configures: the only
    /// endpoints a tenant's model profile may name.
    pub model_endpoints: Vec<String>,
    /// The browser console on its own listener (none: not served).
    pub console: Option<ConsoleConfig>,
}

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 50051)),
            rate_limit: RateLimit::default(),
            timeouts: Timeouts::default(),
            credential_cache_ttl: directory::DEFAULT_TTL,
            refused_credentials: default_refusal_limit(),
            watch: WatchConfig::default(),
            suppression: SuppressionConfig::default(),
            signing_key: None,
            checkpoint_every: Duration::from_secs(600),
            model_endpoints: Vec::new(),
            console: None,
        }
    }
}

pub struct Application {
    listener: TcpListener,
    addr: SocketAddr,
    store: DynStore,
    config: ApiConfig,
    peers: Option<Arc<dyn Peers>>,
    console: Option<Console>,
    queue_depths: QueueDepths,
    /// The review a waiting `Submit` gets in its own transaction (none:
    /// every submission is queued for the reviewers).
    at_submission: Option<Arc<dyn SubmitReview>>,
}

/// The services a server mounts, and their names as health reports them
/// (`""`: the server as a whole).
struct Mounted {
    routes: RoutesBuilder,
    names: Vec<&'static str>,
}

impl Mounted {
    fn new() -> Self {
        Mounted {
            routes: RoutesBuilder::default(),
            names: vec![""],
        }
    }

    fn add<S>(&mut self, service: S) -> &mut Self
    where
        S: tower::Service<
                http::Request<tonic::body::Body>,
                Response = http::Response<tonic::body::Body>,
                Error = std::convert::Infallible,
            > + NamedService
            + Clone
            + Send
            + Sync
            + 'static,
        S::Future: Send + 'static,
    {
        self.names.push(S::NAME);
        self.routes.add_service(service);
        self
    }
}

impl Application {
    /// Binds the listener, and the console's if it is configured. The store
    /// must already be migrated.
    pub async fn build(config: ApiConfig, store: DynStore) -> std::io::Result<Self> {
        let listener = TcpListener::bind(config.listen).await?;
        let addr = listener.local_addr()?;
        let console = match config.console {
            Some(console) => Some(Console::bind(console).await.map_err(|error| {
                std::io::Error::new(
                    error.kind(),
                    format!("console.listen: binding {}: {error}", console.listen),
                )
            })?),
            None => None,
        };
        Ok(Application {
            listener,
            addr,
            store,
            config,
            peers: None,
            console,
            queue_depths: QueueDepths::default(),
            at_submission: None,
        })
    }

    /// Shares with the deployment's other processes (production: Redis): their
    /// committed events wake this fan-out at once, and rejections and
    /// invalidations go both ways.
    pub fn with_peers(mut self, peers: Arc<dyn Peers>) -> Self {
        self.peers = Some(peers);
        self
    }

    /// Where the console reads each tenant's queue depth: the composition
    /// root's queue sampler records into the same handle.
    pub fn with_queue_depths(mut self, depths: QueueDepths) -> Self {
        self.queue_depths = depths;
        self
    }

    /// A `Submit` that waits for its decision is reviewed inside the
    /// transaction that stores it, by `review` (see
    /// `Proposals::submit_reviewed`).
    pub fn with_review_at_submission(mut self, review: Arc<dyn SubmitReview>) -> Self {
        self.at_submission = Some(review);
        self
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address the console is bound to, if it is served.
    pub fn console_addr(&self) -> Option<SocketAddr> {
        self.console.as_ref().map(Console::local_addr)
    }

    /// Serves until `shutdown` is cancelled; then health turns NOT_SERVING,
    /// every stream ends, the listener closes and in-flight calls finish. The
    /// API's background work (the suppression's upkeep, checkpoints) stops
    /// with `shutdown`; the fan-out's pump with the streams.
    pub async fn run_until_stopped(
        self,
        shutdown: CancellationToken,
    ) -> Result<(), tonic::transport::Error> {
        // Where the fan-out starts, before the first call is answered (see
        // `live_position`); a stop asked for meanwhile ends the start.
        let position = tokio::select! {
            position = live_position(&*self.store) => position,
            () = shutdown.cancelled() => return Ok(()),
        };
        let (health, health_service, reflection) = probes(&[FILE_DESCRIPTOR_SET]);

        let directory = Arc::new(Directory::new(
            self.store.clone(),
            self.config.credential_cache_ttl,
        ));
        let layers = ServiceBuilder::new()
            .layer(TraceLayer)
            .layer(MetricsLayer::default())
            .layer(AuthLayer::new(
                directory.clone(),
                self.config.refused_credentials,
            ))
            .layer(RateLimitLayer::new(self.config.rate_limit))
            .layer(TimeoutLayer::new(self.config.timeouts))
            .layer(MessageLimitLayer::new(MAX_MESSAGE_BYTES))
            .layer(SmallFramesLayer)
            .into_inner();

        let mut suppression = Suppression::new(self.config.suppression);
        if let Some(peers) = &self.peers {
            suppression = suppression.with_peers(peers.clone());
        }
        let suppression = Arc::new(suppression);
        let listener = self
            .peers
            .clone()
            .map(|peers| spawn_listener(suppression.clone(), peers));
        let observers: Vec<Arc<dyn Observer>> = vec![suppression.clone()];
        let fanout = Fanout::new(self.config.watch.ring, observers);
        let pump = spawn_pump(
            fanout.clone(),
            self.store.clone(),
            self.store.clone(),
            self.config.watch,
            self.peers.clone(),
            position,
        );
        let maintenance =
            spawn_maintenance(suppression.clone(), self.store.clone(), shutdown.clone());
        let views = Views::new(
            self.store.clone(),
            Receipts::new(self.config.signing_key.clone()),
        );
        // Each service once, shared by the gRPC server and the console.
        let services = Services {
            proposals: Arc::new(ProposalApi::new(
                self.store.clone(),
                views.clone(),
                fanout.clone(),
                suppression.clone(),
                self.at_submission.clone(),
            )),
            notifications: Arc::new(NotificationApi::new(
                self.store.clone(),
                self.store.clone(),
                fanout.clone(),
                self.config.watch,
                views.receipts().clone(),
            )),
            sops: Arc::new(SopApi::new(self.store.clone(), suppression.clone())),
            targets: Arc::new(TargetApi::new(self.store.clone(), suppression.clone())),
            policy: Arc::new(PolicyApi::new(
                self.store.clone(),
                self.store.clone(),
                suppression.clone(),
                self.config.model_endpoints.clone(),
            )),
            suppression,
            queue_depths: self.queue_depths.clone(),
            escalations: Arc::new(EscalationApi::new(self.store.clone(), views)),
            audit: Arc::new(AuditApi::new(
                self.store.clone(),
                self.config.signing_key.clone(),
            )),
        };
        let proposals = ProposalServiceServer::from_arc(services.proposals.clone())
            .max_decoding_message_size(MAX_MESSAGE_BYTES);
        let notifications = NotificationServiceServer::from_arc(services.notifications.clone())
            .max_decoding_message_size(MAX_MESSAGE_BYTES);
        let sops = SopServiceServer::from_arc(services.sops.clone())
            .max_decoding_message_size(MAX_MESSAGE_BYTES);
        let targets = TargetServiceServer::from_arc(services.targets.clone())
            .max_decoding_message_size(MAX_MESSAGE_BYTES);
        let policy = PolicyServiceServer::from_arc(services.policy.clone())
            .max_decoding_message_size(MAX_MESSAGE_BYTES);
        let escalations = EscalationServiceServer::from_arc(services.escalations.clone())
            .max_decoding_message_size(MAX_MESSAGE_BYTES);
        let audit = AuditServiceServer::from_arc(services.audit.clone())
            .max_decoding_message_size(MAX_MESSAGE_BYTES);
        let console = self.console.map(|console| {
            tokio::spawn(console.serve(
                services,
                directory.clone(),
                self.store.clone(),
                self.config.refused_credentials,
                shutdown.clone(),
            ))
        });
        let checkpoints = self.config.signing_key.clone().map(|key| {
            tokio::spawn(checkpoint_periodically(
                self.store.clone(),
                key,
                self.config.checkpoint_every,
                shutdown.clone().cancelled_owned(),
            ))
        });

        let mut ours = Mounted::new();
        ours.add(proposals)
            .add(notifications)
            .add(sops)
            .add(targets)
            .add(audit)
            .add(policy)
            .add(escalations);
        let Mounted { routes, names } = ours;
        set_all(&health, &names, ServingStatus::Serving).await;
        tracing::info!(addr = %self.addr, backend = self.store.backend(), "countersign API serving");

        let reporter = health.clone();
        let signal = async move {
            shutdown.cancelled().await;
            set_all(&reporter, &names, ServingStatus::NotServing).await;
            // Streams never finish by themselves: end them, with their cursor.
            fanout.close();
            tracing::info!("shutting down: no new calls accepted");
        };
        Server::builder()
            .layer(layers)
            .add_routes(routes.routes())
            .add_service(health_service)
            .add_service(reflection.v1)
            .add_service(reflection.v1alpha)
            // Small gRPC messages must not wait for Nagle and delayed ACKs;
            // h2 copies an answer's frames into one write (`small_frames`).
            .serve_with_incoming_shutdown(
                TcpIncoming::from(self.listener)
                    .with_nodelay(Some(true))
                    .map(|connection| connection.map(CopiedWrites::new)),
                signal,
            )
            .await?;
        if let Some(console) = console {
            match console.await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => tracing::error!(%error, "console server failed"),
                Err(error) => tracing::error!(%error, "console server panicked"),
            }
        }
        let _ = pump.await;
        let _ = maintenance.await;
        if let Some(listener) = listener {
            listener.abort();
        }
        if let Some(checkpoints) = checkpoints {
            let _ = checkpoints.await;
        }
        Ok(())
    }
}
