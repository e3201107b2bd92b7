//! `countersign serve`: migrate, bootstrap on first start, run the API and/or
//! the reviewers, and the metrics endpoint, until SIGINT or SIGTERM; then drain
//! within the shutdown grace period.

use countersign_api::{
    ApiConfig, Application, HealthOnly, RateLimit, Timeouts, fanout::WatchConfig,
    suppression::SuppressionConfig,
};
use countersign_domain::audit::SigningKey;
use countersign_reviewer::ReviewerConfig;
use tokio_util::sync::CancellationToken;

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
        express_workers: config
            .review
            .express_workers
            .unwrap_or(usize::from(config.redis.url.is_some())),
        ..ReviewerConfig::with_workers(config.review.workers.unwrap_or(cores))
    }
}

fn api_config(config: &Config, signing_key: SigningKey) -> ApiConfig {
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
        signing_key: Some(signing_key),
        checkpoint_every: config.audit.checkpoint_every,
    }
}

pub async fn run(config: Config) -> anyhow::Result<()> {
    let signal = shutdown_signal()?;
    // The process's one shutdown token: every background task holds it or a
    // child of it (the fan-out's pump aside: it runs as long as the streams it
    // feeds, which the API ends once health reports NOT_SERVING). SIGINT or
    // SIGTERM cancels `draining`, a child: the API and the reviewers stop
    // taking work and drain (README "Shutdown"), each part stopping its own
    // children in turn; the root goes last, taking whatever is left (after
    // the grace period, what was cut short).
    let shutdown = CancellationToken::new();
    let draining = shutdown.child_token();
    tokio::spawn({
        let draining = draining.clone();
        async move {
            signal.await;
            draining.cancel();
        }
    });
    // Installed first, so that start-up is counted too.
    let recorder = metrics_endpoint::install_recorder()?;
    let backends = Backends::open(&config).await?;
    let store = backends.store();
    let peers = backends.peers();
    tracing::info!(
        database = %redact_url(&config.database_url()),
        role = ?config.role,
        "database ready"
    );
    // The key files belong with the database: beside an SQLite file, else in
    // the data directory given.
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
    // The API signs checkpoints: with the key that signed the database's
    // newest one, or (none yet) a key of its own.
    let signing_key = match config.role {
        Role::Worker => None,
        Role::All | Role::Api => {
            let newest = store.newest_checkpoint().await?;
            Some(
                config
                    .signing_args()
                    .load_for_serve(&key_dir, newest.as_ref())?,
            )
        }
    };
    let metrics = MetricsEndpoint::bind(config.metrics.listen, recorder).await?;
    let metrics_addr = metrics.local_addr();
    let background = Background::start(backends, config.role, reviewer_config(&config), &shutdown);
    // Scripts and tests read the bound addresses from these two lines; a
    // reader that has gone (closed pipe) must not stop the server.
    let announce = |grpc: std::net::SocketAddr| {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "countersign listening on {grpc}");
        let _ = writeln!(out, "countersign metrics on {metrics_addr}");
        let _ = out.flush();
        tracing::info!(addr = %metrics_addr, "metrics endpoint serving /metrics");
    };
    let metrics = metrics.spawn();
    let api = async {
        if config.role == Role::Worker {
            let health = HealthOnly::bind(config.listen).await?;
            announce(health.local_addr());
            health.run_until_stopped(draining.clone()).await?;
            return anyhow::Ok(());
        }
        let signing_key = signing_key.expect("the API's roles load the signing key");
        let mut app = Application::build(api_config(&config, signing_key), store).await?;
        if let Some(peers) = peers {
            app = app.with_peers(peers);
        }
        announce(app.local_addr());
        app.run_until_stopped(draining.clone()).await?;
        anyhow::Ok(())
    };
    // Reviewers stop fetching at once; each finishes (records and acks) the
    // batch it holds.
    let reviews = async {
        draining.cancelled().await;
        background.shutdown().await;
        anyhow::Ok(())
    };
    let drained = async { tokio::try_join!(api, reviews).map(|_| ()) };
    let grace = config.shutdown.grace;
    let hard_cap = async {
        draining.cancelled().await;
        tokio::time::sleep(grace).await;
    };
    let result = tokio::select! {
        result = drained => result,
        // Dropping the rest aborts it: a review cut short never commits half
        // (its transaction rolls back) and keeps its lease, which expires and
        // is reclaimed.
        () = hard_cap => {
            tracing::warn!(
                grace = %humantime::format_duration(grace),
                "shutdown grace period over: exiting with calls or reviews unfinished"
            );
            Ok(())
        }
    };
    shutdown.cancel();
    metrics.abort();
    result?;
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
