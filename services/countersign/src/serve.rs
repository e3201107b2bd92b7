//! `countersign serve`: migrate, bootstrap on first start, run the API and/or
//! the reviewers, and the metrics endpoint, until SIGINT or SIGTERM.

use countersign_api::{
    ApiConfig, Application, HealthOnly, RateLimit, Timeouts, fanout::WatchConfig,
    suppression::SuppressionConfig,
};
use countersign_reviewer::ReviewerConfig;

use crate::{
    backends::Backends,
    background::Background,
    config::{Config, Role},
    metrics_endpoint::{self, MetricsEndpoint},
    output::redact_url,
    settings::write_admin_key,
};

fn reviewer_config(config: &Config) -> ReviewerConfig {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "countersign".into());
    ReviewerConfig {
        name: format!("{host}-{}", std::process::id()),
        lease: config.review.lease,
        max_attempts: config.review.attempts,
        review_deadline: config.review.deadline,
        ..ReviewerConfig::with_workers(config.review.workers.unwrap_or(cores))
    }
}

fn api_config(config: &Config) -> anyhow::Result<ApiConfig> {
    Ok(ApiConfig {
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
        watch: WatchConfig {
            heartbeat: config.watch.heartbeat,
            buffer: config.watch.buffer,
            retention: config.watch.retention,
            ..WatchConfig::default()
        },
        suppression: SuppressionConfig {
            capacity: config.suppression.capacity,
            ttl: config.suppression.ttl,
            ..SuppressionConfig::default()
        },
        signing_key: Some(config.signing_args().load(&config.data_dir)?),
        checkpoint_every: config.audit.checkpoint_every,
    })
}

pub async fn run(config: Config) -> anyhow::Result<()> {
    let shutdown = shutdown_signal()?;
    // Installed first, so that start-up is counted too.
    let recorder = metrics_endpoint::install_recorder()?;
    let backends = Backends::open(&config).await?;
    let store = backends.store();
    tracing::info!(
        database = %redact_url(&config.database_url()),
        role = ?config.role,
        "database ready"
    );
    if let Some(bootstrap) = store.bootstrap().await? {
        let path = write_admin_key(&config.data_dir, &bootstrap.key)?;
        tracing::info!(
            tenant = %bootstrap.tenant,
            key_id = %bootstrap.key_id,
            path = %path.display(),
            "first start: created tenant and wrote its admin key"
        );
    }
    let metrics = MetricsEndpoint::bind(config.metrics.listen, recorder).await?;
    let background = Background::start(backends, config.role, reviewer_config(&config));
    // Scripts and tests read the bound addresses from these two lines; a
    // reader that has gone (closed pipe) must not stop the server.
    let announce = |grpc: std::net::SocketAddr| {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "countersign listening on {grpc}");
        let _ = writeln!(out, "countersign metrics on {}", metrics.local_addr());
        let _ = out.flush();
        tracing::info!(addr = %metrics.local_addr(), "metrics endpoint serving /metrics");
    };
    let served = if config.role == Role::Worker {
        let health = HealthOnly::bind(config.listen).await?;
        announce(health.local_addr());
        let metrics = metrics.spawn();
        let served = health.run_until_stopped(shutdown).await;
        (served, metrics)
    } else {
        let app = Application::build(api_config(&config)?, store).await?;
        announce(app.local_addr());
        let metrics = metrics.spawn();
        let served = app.run_until_stopped(shutdown).await;
        (served, metrics)
    };
    let (served, metrics) = served;
    background.shutdown().await;
    metrics.abort();
    served?;
    tracing::info!("stopped");
    Ok(())
}

/// Installs the SIGINT and SIGTERM handlers now (so a signal that arrives
/// during start-up is not lost to the default action) and returns a future that
/// resolves on the first of them.
pub fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()> + Send + 'static> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    Ok(async move {
        tokio::select! {
            _ = interrupt.recv() => tracing::info!("SIGINT received"),
            _ = terminate.recv() => tracing::info!("SIGTERM received"),
        }
    })
}
