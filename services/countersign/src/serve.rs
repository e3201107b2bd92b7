//! `countersign serve`: builds the application (the composition root,
//! [`crate::app`]) and runs it, and the metrics endpoint, until SIGINT or
//! SIGTERM; then drains within the shutdown grace period.

use tokio_util::sync::CancellationToken;

use crate::{
    app::{App, Settings},
    config::Config,
    metrics_endpoint::{self, MetricsEndpoint},
};

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
    let metrics = MetricsEndpoint::bind(config.metrics.listen, recorder).await?;
    let metrics_addr = metrics.local_addr();
    let grace = config.shutdown.grace;
    let app = App::build(Settings::new(config), &shutdown).await?;
    // Scripts and tests read the bound addresses from these lines; a
    // reader that has gone (closed pipe) must not stop the server.
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "countersign listening on {}", app.local_addr());
        let _ = writeln!(out, "countersign metrics on {metrics_addr}");
        if let Some(console) = app.console_addr() {
            let _ = writeln!(out, "countersign console on http://{console}");
        }
        let _ = out.flush();
        tracing::info!(addr = %metrics_addr, "metrics endpoint serving /metrics");
    }
    let metrics = metrics.spawn();
    let hard_cap = async {
        draining.cancelled().await;
        tokio::time::sleep(grace).await;
    };
    let result = tokio::select! {
        result = app.run_until_stopped(draining.clone()) => result,
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
