//! The composition root: the running application built from a [`Config`] —
//! the model endpoints, the backends (store, queue, peers), the first
//! start's bootstrap, the checkpoint signing key, the API (or, for the worker
//! role, health alone) and the background (reviewers, janitor, sequencer; on
//! PostgreSQL the outbox). `serve` runs it; the end-to-end tests' `TestApp` builds it the
//! same way, on port 0.
//!
//! What only a process does stays in `serve`: the signal handlers, the
//! metrics endpoint and its recorder, the lines that announce the addresses,
//! and the grace period's hard cap.

use std::{net::SocketAddr, sync::Arc};

use countersign_api::{
    ApiConfig, Application, HealthOnly, QueueDepths, RateLimit, Timeouts, fanout::WatchConfig,
    suppression::SuppressionConfig,
};
use countersign_model::Models;
use countersign_queue::DynQueue;
use countersign_reviewer::{AtSubmission, ReviewerConfig};
use countersign_store::DynStore;
use tokio_util::sync::CancellationToken;

use crate::{
    backends::Backends,
    background::Background,
    config::{Config, Role},
    output::redact_url,
    settings::write_admin_key,
};

/// What [`App::build`] builds from: the config, and the API's and the
/// reviewers' settings derived from it. The derived settings are the seam for
/// what no config key reaches (a reviewer's evaluator, its retry delays, the
/// suppression's flush): a caller changes them here, and the application is
/// still built the one way. The API's signing key and model endpoint names
/// are always the ones [`App::build`] loads.
pub struct Settings {
    pub config: Config,
    pub api: ApiConfig,
    pub reviewers: ReviewerConfig,
}

impl Settings {
    pub fn new(config: Config) -> Settings {
        Settings {
            api: api_config(&config),
            reviewers: reviewer_config(&config),
            config,
        }
    }
}

fn reviewer_config(config: &Config) -> ReviewerConfig {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "countersign".into());
    ReviewerConfig {
        name: format!("{host}-{}", std::process::id()),
        lease: config.review.lease,
        max_attempts: config.review.attempts,
        review_deadline: config.review.deadline,
        express_workers: config
            .review
            .express_workers
            .unwrap_or(usize::from(config.redis.url.is_some())),
        ..ReviewerConfig::with_workers(config.review.workers.unwrap_or(cores))
    }
}

fn api_config(config: &Config) -> ApiConfig {
    ApiConfig {
        listen: config.listen,
        rate_limit: RateLimit {
            per_second: config.api.rate_limit_per_second,
            burst: config.api.rate_limit_burst,
        },
        timeouts: Timeouts {
            default: config.api.request_timeout,
            ..Timeouts::default()
        },
        credential_cache_ttl: config.api.credential_cache_ttl,
        refused_credentials: ApiConfig::default().refused_credentials,
        watch: WatchConfig {
            heartbeat: config.watch.heartbeat,
            buffer: config.watch.buffer,
            retention: config.watch.retention,
            max_streams_per_key: config.watch.max_streams_per_key.get(),
            max_streams_per_tenant: config.watch.max_streams_per_tenant.get(),
            ..WatchConfig::default()
        },
        suppression: SuppressionConfig {
            capacity: config.suppression.capacity,
            max_bytes: config.suppression.max_bytes,
            ttl: config.suppression.ttl,
            ..SuppressionConfig::default()
        },
        signing_key: None,
        checkpoint_every: config.audit.checkpoint_every,
        model_endpoints: Vec::new(),
        console: config.console.console(),
    }
}

/// What listens: the API, or for the worker role health alone. One is built
/// per process; the API is boxed so that the enum is no larger than a pointer
/// to it.
enum Listener {
    Api(Box<Application>),
    HealthOnly(HealthOnly),
}

/// The application, bound and with its background running: serves once
/// [`App::run_until_stopped`] is called.
pub struct App {
    store: DynStore,
    queue: Option<DynQueue>,
    listener: Listener,
    background: Background,
}

impl App {
    /// Builds the model endpoints (every one checked and its key read, in
    /// every role: a configuration one process refuses, all refuse), opens
    /// the backends (migrating an SQLite database; on PostgreSQL, checking its
    /// schema), bootstraps a first start (the default tenant and its admin
    /// key, written to the key directory), loads the signing key, starts the
    /// background on children of `shutdown` and binds the listener.
    pub async fn build(settings: Settings, shutdown: &CancellationToken) -> anyhow::Result<App> {
        let Settings {
            config,
            mut api,
            mut reviewers,
        } = settings;
        // Built once: the API checks tenants' profiles against its names,
        // and the reviewers ask them where a tenant's profile says so.
        let models = Models::new(config.model.endpoints()?)?;
        api.model_endpoints = models.names().into_iter().map(str::to_owned).collect();
        reviewers.models = models;
        let backends = Backends::open(&config).await?;
        let store = backends.store();
        let peers = backends.peers();
        let queue = backends.queue();
        tracing::info!(
            database = %redact_url(&config.database_url()),
            role = ?config.role,
            "database ready"
        );
        // The key files belong with the database: beside an SQLite file, else
        // in the data directory given.
        let key_dir = config.store_args().key_dir()?;
        if let Some(bootstrap) = store.bootstrap().await? {
            let path = write_admin_key(&key_dir, &bootstrap.key)?;
            tracing::info!(
                tenant = %bootstrap.tenant,
                key_id = %bootstrap.key_id,
                path = %path.display(),
                "first start: created tenant and wrote its admin key"
            );
        }
        // The queue sampler records each tenant's depth; the console reads it.
        let depths = QueueDepths::default();
        let listener = match config.role {
            Role::Worker => Listener::HealthOnly(HealthOnly::bind(config.listen).await?),
            Role::All | Role::Api => {
                // The API signs checkpoints: with the key that signed the
                // database's newest one, or (none yet) a key of its own.
                let newest = store.newest_checkpoint().await?;
                api.signing_key = Some(
                    config
                        .signing_args()
                        .load_for_serve(&key_dir, newest.as_ref())?,
                );
                let mut app = Application::build(api, store.clone())
                    .await?
                    .with_queue_depths(depths.clone());
                if config.review.at_submission {
                    app = app.with_review_at_submission(Arc::new(AtSubmission::new(&reviewers)));
                }
                if let Some(peers) = peers {
                    app = app.with_peers(peers);
                }
                Listener::Api(Box::new(app))
            }
        };
        let background = Background::start(backends, config.role, reviewers, depths, shutdown);
        Ok(App {
            store,
            queue,
            listener,
            background,
        })
    }

    /// The address the gRPC listener is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        match &self.listener {
            Listener::Api(app) => app.local_addr(),
            Listener::HealthOnly(health) => health.local_addr(),
        }
    }

    pub fn port(&self) -> u16 {
        self.local_addr().port()
    }

    /// The address the console is bound to, if this process serves it.
    pub fn console_addr(&self) -> Option<SocketAddr> {
        match &self.listener {
            Listener::Api(app) => app.console_addr(),
            Listener::HealthOnly(_) => None,
        }
    }

    /// The console's port, if this process serves it.
    pub fn console_port(&self) -> Option<u16> {
        self.console_addr().map(|addr| addr.port())
    }

    pub fn store(&self) -> DynStore {
        self.store.clone()
    }

    /// The embedded queue (SQLite); `None` on PostgreSQL, whose Redis queue
    /// the background connects once Redis answers.
    pub fn queue(&self) -> Option<DynQueue> {
        self.queue.clone()
    }

    /// Serves until `draining` is cancelled, then drains: the API stops
    /// taking calls and finishes those in flight; the reviewers stop fetching
    /// and each finishes (records and acks) the batch it holds.
    pub async fn run_until_stopped(self, draining: CancellationToken) -> anyhow::Result<()> {
        let api = async {
            match self.listener {
                Listener::Api(app) => app.run_until_stopped(draining.clone()).await?,
                Listener::HealthOnly(health) => health.run_until_stopped(draining.clone()).await?,
            }
            anyhow::Ok(())
        };
        let background = async {
            draining.cancelled().await;
            self.background.shutdown().await;
            anyhow::Ok(())
        };
        tokio::try_join!(api, background).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_express_reviewer_runs_by_default_on_redis_and_not_on_the_embedded_queue() {
        let mut config = Config::default();
        assert_eq!(reviewer_config(&config).express_workers, 0);
        config.redis.url = Some("redis://127.0.0.1:6379".into());
        assert_eq!(reviewer_config(&config).express_workers, 1);
        config.review.express_workers = Some(3);
        assert_eq!(reviewer_config(&config).express_workers, 3);
        config.redis.url = None;
        assert_eq!(reviewer_config(&config).express_workers, 3);
    }
}
