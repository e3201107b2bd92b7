//! Closed loops of gRPC calls (each client waits for its answer before the
//! next), and the cheapest of them: the transport's floor on this machine,
//! gRPC health checks (no credential, no storage, none of our code), which
//! `suppressed` and `submit-decide` measure beside their own calls.

use std::{
    collections::BTreeMap,
    future::Future,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use hdrhistogram::Histogram;
use tokio::sync::Mutex;
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

use crate::{
    report::{ServerUsage, add_counts},
    scenario::{channel, usage_between},
    server::Server,
};

/// One call's outcome, named for the tally (`suppressed`, `error Unavailable`, …).
pub(crate) type Call<'a> = Pin<Box<dyn Future<Output = String> + Send + 'a>>;

/// What a closed loop measured.
pub(crate) struct Loop {
    pub wall: Duration,
    pub latency: Histogram<u64>,
    pub outcomes: BTreeMap<String, u64>,
    /// The server's usage over the loop, and the load generator's own CPU
    /// (this process): it shares the machine with the server, so what it
    /// spends a call is CPU the server does not get.
    pub server: ServerUsage,
}

/// `clients` tasks, sharing `connections` (round robin), make `total` calls
/// between them, each waiting for its answer before the next.
pub(crate) async fn closed_loop<C, F>(
    server: &Server,
    connections: Vec<C>,
    clients: u64,
    total: u64,
    call: F,
) -> anyhow::Result<Loop>
where
    C: Clone + Send + 'static,
    F: for<'a> Fn(&'a mut C) -> Call<'a> + Clone + Send + 'static,
{
    let next = Arc::new(AtomicU64::new(0));
    let latency = Arc::new(Mutex::new(Histogram::<u64>::new(3)?));
    let outcomes = Arc::new(Mutex::new(BTreeMap::<String, u64>::new()));
    let before = server.usage();
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..clients.max(1) {
        let mut client = connections[c as usize % connections.len()].clone();
        let (next, latency, outcomes, call) = (
            next.clone(),
            latency.clone(),
            outcomes.clone(),
            call.clone(),
        );
        tasks.spawn(async move {
            let mut mine = Histogram::<u64>::new(3).expect("histogram");
            let mut counts = BTreeMap::<String, u64>::new();
            while next.fetch_add(1, Ordering::Relaxed) < total {
                let t = Instant::now();
                let outcome = call(&mut client).await;
                let _ = mine.record((t.elapsed().as_micros() as u64).max(1));
                *counts.entry(outcome).or_default() += 1;
            }
            let _ = latency.lock().await.add(&mine);
            add_counts(&mut *outcomes.lock().await, "", &counts);
        });
    }
    while tasks.join_next().await.is_some() {}
    let wall = started.elapsed();
    let after = server.usage();
    let latency = latency.lock().await.clone();
    let outcomes = outcomes.lock().await.clone();
    Ok(Loop {
        wall,
        latency,
        outcomes,
        server: usage_between(before, after, wall),
    })
}

/// The tally's name for a finished call.
pub(crate) fn outcome<T>(
    result: Result<T, tonic::Status>,
    ok: impl FnOnce(&T) -> &'static str,
) -> String {
    match result {
        Ok(answer) => ok(&answer).to_owned(),
        Err(status) => format!("error {:?}", status.code()),
    }
}

pub(crate) fn errors_of(outcomes: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    outcomes
        .iter()
        .filter(|(k, _)| k.starts_with("error"))
        .map(|(k, v)| (k.clone(), *v))
        .collect()
}

impl Loop {
    /// Calls answered `outcome` per second.
    pub(crate) fn rate_of(&self, outcome: &str) -> f64 {
        self.outcomes.get(outcome).copied().unwrap_or_default() as f64
            / self.wall.as_secs_f64().max(1e-9)
    }

    /// Adds `other`'s calls, time and server CPU to these: one loop's
    /// blocks, measured in turns with another's, summed.
    pub(crate) fn absorb(&mut self, other: Loop) -> anyhow::Result<()> {
        self.latency.add(&other.latency)?;
        add_counts(&mut self.outcomes, "", &other.outcomes);
        self.wall += other.wall;
        self.server.absorb(other.server, self.wall);
        Ok(())
    }

    /// Server CPU microseconds per call.
    pub(crate) fn server_us_per_call(&self) -> f64 {
        self.server.cpu_seconds * 1e6 / self.calls()
    }

    /// The load generator's CPU microseconds per call.
    pub(crate) fn generator_us_per_call(&self) -> f64 {
        self.server.generator_cpu_seconds.unwrap_or_default() * 1e6 / self.calls()
    }

    fn calls(&self) -> f64 {
        self.outcomes.values().sum::<u64>().max(1) as f64
    }
}

/// `calls` gRPC health checks from `clients` clients over `connections`
/// connections of their own; answered ones count as `served`.
pub(crate) async fn health_checks(
    server: &Server,
    clients: u64,
    connections: u64,
    calls: u64,
) -> anyhow::Result<Loop> {
    let health = health_connections(server, clients, connections).await?;
    health_checks_on(server, health, clients, calls).await
}

/// `connections` health clients (at most one a client), for
/// [`health_checks_on`].
pub(crate) async fn health_connections(
    server: &Server,
    clients: u64,
    connections: u64,
) -> anyhow::Result<Vec<HealthClient<tonic::transport::Channel>>> {
    let mut health = Vec::new();
    for _ in 0..connections.clamp(1, clients.max(1)) {
        health.push(HealthClient::new(channel(&server.endpoint).await?));
    }
    Ok(health)
}

/// [`health_checks`] over connections already made.
pub(crate) async fn health_checks_on(
    server: &Server,
    health: Vec<HealthClient<tonic::transport::Channel>>,
    clients: u64,
    calls: u64,
) -> anyhow::Result<Loop> {
    closed_loop(server, health, clients, calls, |client| {
        Box::pin(async move {
            let r = client.check(HealthCheckRequest::default()).await;
            outcome(r, |_| "served")
        })
    })
    .await
}
