//! The on-call console: the review stream, the escalation inbox, a
//! proposal's record, the decision log and the tenant's reference, as pages
//! served on their own listener (`console.listen`) by the same process as the
//! gRPC API. Every read and write is a call to the API's own services, made
//! in-process as the signed-in key (the principal and tenant `auth` would
//! attach): the same authorization, tenancy, four-eyes rules and agent
//! redaction as over gRPC, none of them restated here. The pages are plain
//! HTML, CSS and JavaScript built into the binary (`assets/`); the script
//! sets untrusted text only as text.

mod handlers;
pub mod security;
pub mod session;
mod stream;
pub mod wire;

use std::{net::SocketAddr, sync::Arc, time::Duration};

use axum::{
    Router,
    routing::{get, post},
};
use countersign_store::{ConsoleSessions, DynStore, Suppressions};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::{
    QueueDepths, RateLimit,
    directory::Directory,
    layers::auth::Refusals,
    services::{
        AuditApi, EscalationApi, NotificationApi, PolicyApi, ProposalApi, SopApi, TargetApi,
    },
    suppression::Suppression,
};

/// The console's settings (`[console]` in the config).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsoleConfig {
    /// Its listener (port 0 picks a free one).
    pub listen: SocketAddr,
    /// How long a sign-in lasts.
    pub session_ttl: Duration,
    /// Every session cookie is `Secure` (the console is reached over TLS).
    pub secure_cookie: bool,
    /// A sign-in whose request says `X-Forwarded-Proto: https` gets a
    /// `Secure` cookie: for a TLS-terminating proxy that sets the header
    /// (and strips a client's own).
    pub trust_forwarded_proto: bool,
}

impl Default for ConsoleConfig {
    fn default() -> Self {
        ConsoleConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            session_ttl: Duration::from_secs(8 * 3600),
            secure_cookie: false,
            trust_forwarded_proto: false,
        }
    }
}

/// The console's listener, bound before the server starts.
pub struct Console {
    listener: TcpListener,
    addr: SocketAddr,
    config: ConsoleConfig,
}

/// The API's services, shared with the gRPC server that mounts them.
pub(crate) struct Services {
    pub proposals: Arc<ProposalApi>,
    pub notifications: Arc<NotificationApi>,
    pub escalations: Arc<EscalationApi>,
    pub audit: Arc<AuditApi>,
    pub sops: Arc<SopApi>,
    pub targets: Arc<TargetApi>,
    pub policy: Arc<PolicyApi>,
    /// The operators' breakers, as this process mirrors them.
    pub suppression: Arc<Suppression>,
    /// Each tenant's queue depth, as this process last sampled it.
    pub queue_depths: QueueDepths,
}

/// What every handler holds.
pub(crate) struct State {
    pub services: Services,
    pub directory: Arc<Directory>,
    pub sessions: Arc<dyn ConsoleSessions>,
    /// Where a breaker's reset is recorded (as `admin breaker reset` does).
    pub resets: Arc<dyn Suppressions>,
    pub config: ConsoleConfig,
    /// Refused sign-ins per client address, counted as `auth` counts refused
    /// credentials.
    pub refusals: Refusals,
    /// Cancelled at shutdown: the streams end.
    pub shutdown: CancellationToken,
}

impl Console {
    pub async fn bind(config: ConsoleConfig) -> std::io::Result<Console> {
        let listener = TcpListener::bind(config.listen).await?;
        let addr = listener.local_addr()?;
        Ok(Console {
            listener,
            addr,
            config,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves until `shutdown` is cancelled; open streams end with it.
    pub(crate) async fn serve(
        self,
        services: Services,
        directory: Arc<Directory>,
        store: DynStore,
        refused_credentials: RateLimit,
        shutdown: CancellationToken,
    ) -> std::io::Result<()> {
        let state = Arc::new(State {
            services,
            directory,
            sessions: store.clone(),
            resets: store,
            config: self.config,
            refusals: Refusals::new(refused_credentials),
            shutdown: shutdown.clone(),
        });
        tracing::info!(addr = %self.addr, "console serving");
        axum::serve(
            self.listener,
            router(state).into_make_service_with_connect_info::<SocketAddr>(),
        )
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
    }
}

/// The pages (one document; its script shows the page its path names), the
/// assets, and the JSON and event-stream API the script calls.
pub(crate) fn router(state: Arc<State>) -> Router {
    Router::new()
        .route("/", get(handlers::home))
        .route("/signin", get(handlers::page))
        .route("/stream", get(handlers::page))
        .route("/inbox", get(handlers::page))
        .route("/proposals/{id}", get(handlers::page))
        .route("/decisions", get(handlers::page))
        .route("/tenant", get(handlers::page))
        .route("/assets/console.css", get(handlers::css))
        .route("/assets/console.js", get(handlers::js))
        .route("/api/session", post(handlers::sign_in))
        .route("/api/session/end", post(handlers::sign_out))
        .route("/api/me", get(handlers::me))
        .route("/api/stream", get(stream::stream))
        .route("/api/escalations", get(handlers::escalations))
        .route("/api/proposals/{id}", get(handlers::proposal))
        .route("/api/proposals/{id}/resolve", post(handlers::resolve))
        .route("/api/decisions", get(handlers::decisions))
        .route("/api/decisions/export", get(handlers::export))
        .route("/api/verify", get(handlers::verify))
        .route("/api/tenant", get(handlers::tenant))
        .route("/api/breakers/reset", post(handlers::reset_breaker))
        .fallback(handlers::not_found)
        .layer(axum::middleware::map_response(security::secure_headers))
        .with_state(state)
}
