//! `suppressed`: identical resubmissions of a rejected proposal, answered from
//! the suppression cache; throughput and latency at N clients, beside the
//! transport floor (gRPC health checks from the same clients, same run).

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

use countersign_proto::v1::{self, AwaitDecisionRequest, SubmitRequest};
use hdrhistogram::Histogram;
use serde_json::json;
use tokio::sync::Mutex;
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

use crate::{
    BenchArgs, SuppressedArgs, baseline,
    report::{Machine, Percentiles, Report, ServerUsage},
    scenario::{MAX_TARGETS, channel, now_rfc3339, proposals, seed, spec, usage_between},
    server::Server,
};

/// One call's outcome, named for the tally (`suppressed`, `error Unavailable`, …).
type Call<'a> = Pin<Box<dyn Future<Output = String> + Send + 'a>>;

/// What a closed loop measured.
struct Loop {
    wall: Duration,
    latency: Histogram<u64>,
    outcomes: BTreeMap<String, u64>,
    server: ServerUsage,
}

/// `clients` tasks, sharing `connections` (round robin), make `total` calls
/// between them, each waiting for its answer before the next.
async fn closed_loop<C, F>(
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
            let mut all = outcomes.lock().await;
            for (k, v) in counts {
                *all.entry(k).or_default() += v;
            }
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
fn outcome<T>(result: Result<T, tonic::Status>, ok: impl FnOnce(&T) -> &'static str) -> String {
    match result {
        Ok(answer) => ok(&answer).to_owned(),
        Err(status) => format!("error {:?}", status.code()),
    }
}

fn errors_of(outcomes: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    outcomes
        .iter()
        .filter(|(k, _)| k.starts_with("error"))
        .map(|(k, v)| (k.clone(), *v))
        .collect()
}

pub async fn suppressed(args: &BenchArgs, load: &SuppressedArgs) -> anyhow::Result<Report> {
    let started_at = now_rfc3339();
    let sqlite = baseline::sqlite_insert_rate(args.baseline_time).await?;
    let server = Server::start(args.reviewers)?;
    let key = seed(&server, "default", MAX_TARGETS).await?;
    let doomed = spec(0, true, MAX_TARGETS); // an unknown target: rejected

    // One real rejection, then wait until the cache answers for it.
    let mut client = proposals(&server.endpoint, &key).await?;
    let first = client
        .submit(SubmitRequest {
            spec: Some(doomed.clone()),
        })
        .await?
        .into_inner()
        .proposal
        .unwrap_or_default();
    let mut request = tonic::Request::new(AwaitDecisionRequest { id: first.id });
    request.set_timeout(Duration::from_secs(30));
    let decided = client.await_decision(request).await?.into_inner();
    anyhow::ensure!(
        decided.state == v1::ProposalState::Rejected as i32,
        "the seed proposal was not rejected"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = client
            .submit(SubmitRequest {
                spec: Some(doomed.clone()),
            })
            .await?
            .into_inner();
        if r.suppressed {
            break;
        }
        anyhow::ensure!(Instant::now() < deadline, "the rejection never got cached");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let connections = load
        .connections
        .unwrap_or(load.clients)
        .clamp(1, load.clients.max(1));
    let mut shared = Vec::new();
    for _ in 0..connections {
        shared.push(proposals(&server.endpoint, &key).await?);
    }
    let retries = closed_loop(&server, shared, load.clients, load.submits, move |client| {
        let spec = Some(doomed.clone());
        Box::pin(async move {
            let r = client.submit(SubmitRequest { spec }).await;
            outcome(r, |r| {
                if r.get_ref().suppressed {
                    "suppressed"
                } else {
                    "reviewed"
                }
            })
        })
    })
    .await?;

    // The floor: the cheapest call this server answers (gRPC health: no
    // credential, no storage), from the same clients over as many connections.
    let mut health = Vec::new();
    for _ in 0..connections {
        health.push(HealthClient::new(channel(&server.endpoint).await?));
    }
    let floor = closed_loop(&server, health, load.clients, load.submits, |client| {
        Box::pin(async move {
            let r = client.check(HealthCheckRequest::default()).await;
            outcome(r, |_| "served")
        })
    })
    .await?;

    let suppressed = retries
        .outcomes
        .get("suppressed")
        .copied()
        .unwrap_or_default();
    let throughput = suppressed as f64 / retries.wall.as_secs_f64();
    let served = floor.outcomes.get("served").copied().unwrap_or_default();
    let floor_rate = served as f64 / floor.wall.as_secs_f64();
    let mut errors = errors_of(&retries.outcomes);
    for (k, v) in errors_of(&floor.outcomes) {
        *errors.entry(format!("health check: {k}")).or_default() += v;
    }
    let per_call_us =
        |l: &Loop| l.server.cpu_seconds * 1e6 / l.outcomes.values().sum::<u64>().max(1) as f64;
    Ok(Report {
        scenario: "suppressed".into(),
        started_at,
        machine: Machine::here(),
        params: json!({
            "submits": load.submits, "clients": load.clients, "reviewers": args.reviewers,
            "connections": connections,
            "backend": "embedded (SQLite + embedded queue)",
            "server_cpu_us_per_suppressed_submit": per_call_us(&retries),
            "server_cpu_us_per_health_check": per_call_us(&floor),
        }),
        duration_s: retries.wall.as_secs_f64(),
        throughput_per_s: throughput,
        latencies: BTreeMap::from([
            (
                "suppressed submit".to_owned(),
                Percentiles::of(&retries.latency),
            ),
            (
                "health check (floor)".to_owned(),
                Percentiles::of(&floor.latency),
            ),
        ]),
        outcomes: retries.outcomes,
        errors,
        server: retries.server,
        baselines: BTreeMap::from([
            ("sqlite_single_row_inserts_per_s".to_owned(), sqlite),
            ("grpc_health_checks_per_s".to_owned(), floor_rate),
        ]),
        ratios: BTreeMap::from([
            (
                "suppressed_per_s / sqlite_inserts_per_s".to_owned(),
                throughput / sqlite,
            ),
            (
                "suppressed_per_s / grpc_health_checks_per_s".to_owned(),
                throughput / floor_rate,
            ),
        ]),
    })
}
