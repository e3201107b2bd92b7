//! `countersign serve`: migrate, bootstrap on first start, run the API and/or
//! the reviewers until SIGINT or SIGTERM, then drain within the grace period:
//! health NOT_SERVING, no new connections, streams and waits ended with
//! UNAVAILABLE, in-flight calls and reviews finished (or abandoned at the cap).

use countersign_api::{
    ApiConfig, Application, RateLimit, Timeouts, fanout::WatchConfig,
    suppression::SuppressionConfig,
};
use countersign_reviewer::ReviewerConfig;

use crate::{
    background::Background,
    cli::{Role, ServeArgs},
    output::redact_url,
    settings::write_admin_key,
};

fn reviewer_config(args: &ServeArgs) -> ReviewerConfig {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "countersign".into());
    ReviewerConfig {
        name: format!("{host}-{}", std::process::id()),
        lease: args.review_lease,
        max_attempts: args.review_attempts,
        review_deadline: args.review_deadline,
        ..ReviewerConfig::with_workers(args.reviewers.unwrap_or(cores))
    }
}

pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let signal = shutdown_signal()?;
    let (signalled, stop) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        signal.await;
        let _ = signalled.send(true);
    });
    // Resolves once a signal has arrived (any number of times).
    let stopping = move || {
        let mut stop = stop.clone();
        async move {
            let _ = stop.wait_for(|stopped| *stopped).await;
        }
    };
    let backends = args.backends.open(&args.store).await?;
    let store = backends.store();
    let peers = backends.peers();
    tracing::info!(database = %redact_url(&args.store.database_url()), "database ready");
    if let Some(bootstrap) = store.bootstrap().await? {
        let path = write_admin_key(&args.store.data_dir, &bootstrap.key)?;
        tracing::info!(
            tenant = %bootstrap.tenant,
            key_id = %bootstrap.key_id,
            path = %path.display(),
            "first start: created tenant and wrote its admin key"
        );
    }
    let background = Background::start(backends, args.role, reviewer_config(&args));
    let api = async {
        if args.role == Role::Worker {
            return Ok(());
        }
        let mut app = Application::build(api_config(&args)?, store).await?;
        if let Some(peers) = peers {
            app = app.with_peers(peers);
        }
        // Scripts and tests read the bound address from this line.
        println!("countersign listening on {}", app.local_addr());
        app.run_until_stopped(stopping()).await?;
        anyhow::Ok(())
    };
    // Reviewers stop fetching at once; each finishes (records and acks) the
    // batch it holds.
    let reviews = async {
        stopping().await;
        background.shutdown().await;
        anyhow::Ok(())
    };
    let drained = async { tokio::try_join!(api, reviews).map(|_| ()) };
    let hard_cap = async {
        stopping().await;
        tokio::time::sleep(args.shutdown_grace).await;
    };
    tokio::select! {
        result = drained => result?,
        // Dropping the rest aborts it: a review cut short never commits half
        // (its transaction rolls back) and keeps its lease, which expires and
        // is reclaimed.
        () = hard_cap => tracing::warn!(
            grace = %humantime::format_duration(args.shutdown_grace),
            "shutdown grace period over: exiting with calls or reviews unfinished"
        ),
    }
    tracing::info!("stopped");
    Ok(())
}

fn api_config(args: &ServeArgs) -> anyhow::Result<ApiConfig> {
    Ok(ApiConfig {
        listen: args.listen,
        rate_limit: RateLimit {
            per_second: args.rate_limit_per_second,
            burst: args.rate_limit_burst,
        },
        timeouts: Timeouts {
            default: args.request_timeout,
            ..Timeouts::default()
        },
        credential_cache_ttl: args.credential_cache_ttl,
        watch: WatchConfig {
            heartbeat: args.watch_heartbeat,
            buffer: args.watch_buffer,
            retention: args.event_retention,
            ..WatchConfig::default()
        },
        suppression: SuppressionConfig {
            capacity: args.suppression_capacity,
            ttl: args.suppression_ttl,
            ..SuppressionConfig::default()
        },
        signing_key: Some(args.signing.load(&args.store.data_dir)?),
        checkpoint_every: args.checkpoint_every,
    })
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
