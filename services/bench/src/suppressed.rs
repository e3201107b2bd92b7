//! `suppressed`: identical resubmissions of a rejected proposal, answered from
//! the suppression cache; throughput and latency at N clients, beside the
//! transport floor (gRPC health checks from the same clients, same run, in
//! blocks that alternate with the retries').

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use countersign_proto::v1::{self, AwaitDecisionRequest, SubmitRequest};
use serde_json::json;

use crate::{
    BenchArgs, SuppressedArgs, baseline,
    closed_loop::{Loop, closed_loop, errors_of, health_checks_on, health_connections, outcome},
    encoded::{EncodedCall, SUBMIT, SubmitAnswer},
    report::{Machine, Percentiles, Report, add_counts},
    scenario::{MAX_TARGETS, now_rfc3339, proposals, seed, spec},
    server::Server,
};

/// How many blocks of retries, each followed by a block of health checks.
pub const BLOCKS: u64 = 4;

pub async fn suppressed(args: &BenchArgs, load: &SuppressedArgs) -> anyhow::Result<Report> {
    let started_at = now_rfc3339();
    let sqlite = baseline::sqlite_insert_rate(args.baseline_time).await?;
    let server = Server::start(args)?;
    let key = seed(&server, "default", MAX_TARGETS).await?;
    let doomed = spec(0, true, MAX_TARGETS); // an unknown target: rejected

    // One real rejection, then wait until the cache answers for it.
    let mut client = proposals(&server.endpoint, &key).await?;
    let first = client
        .submit(SubmitRequest {
            spec: Some(doomed.clone()),
            ..Default::default()
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
                ..Default::default()
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
    // Each retry sends the same request, encoded once, and reads only
    // whether it was suppressed (`encoded.rs`).
    let retry = SubmitRequest {
        spec: Some(doomed),
        ..Default::default()
    };
    let mut shared = Vec::new();
    for _ in 0..connections {
        shared.push(
            EncodedCall::<SubmitAnswer>::connect(&server.endpoint, &key, SUBMIT, &retry).await?,
        );
    }
    let health = health_connections(&server, load.clients, connections).await?;
    // The retries and the floor (the cheapest call this server answers, from
    // the same clients over as many connections) in alternating blocks, each
    // side's summed: whatever the machine does meanwhile falls on both.
    let mut sides: Option<(Loop, Loop)> = None;
    for turn in 0..BLOCKS {
        let block = load.submits * (turn + 1) / BLOCKS - load.submits * turn / BLOCKS;
        if block == 0 {
            continue;
        }
        let retried = closed_loop(&server, shared.clone(), load.clients, block, |client| {
            Box::pin(async move {
                let r = client.call().await;
                outcome(r, |r| {
                    if r.suppressed {
                        "suppressed"
                    } else {
                        "reviewed"
                    }
                })
            })
        })
        .await?;
        let checked = health_checks_on(&server, health.clone(), load.clients, block).await?;
        match &mut sides {
            Some((retries, floor)) => {
                retries.absorb(retried)?;
                floor.absorb(checked)?;
            }
            None => sides = Some((retried, checked)),
        }
    }
    let Some((retries, floor)) = sides else {
        anyhow::bail!("no block was measured");
    };

    let suppressed = retries
        .outcomes
        .get("suppressed")
        .copied()
        .unwrap_or_default();
    let throughput = suppressed as f64 / retries.wall.as_secs_f64();
    let floor_rate = floor.rate_of("served");
    let mut errors = errors_of(&retries.outcomes);
    add_counts(&mut errors, "health check: ", &errors_of(&floor.outcomes));
    let p99_ratio =
        Percentiles::of(&retries.latency).p99_ms / Percentiles::of(&floor.latency).p99_ms.max(1e-9);
    let cpu_ratio = retries.server_us_per_call() / floor.server_us_per_call().max(1e-9);
    let generator_ratio = retries.generator_us_per_call() / floor.generator_us_per_call().max(1e-9);
    Ok(Report {
        scenario: "suppressed".into(),
        started_at,
        machine: Machine::here(),
        params: json!({
            "submits": load.submits, "clients": load.clients, "reviewers": args.reviewers,
            "connections": connections, "blocks": BLOCKS,
            "backend": "embedded (SQLite + embedded queue)",
            "server_cpu_us_per_suppressed_submit": retries.server_us_per_call(),
            "server_cpu_us_per_health_check": floor.server_us_per_call(),
            "generator_cpu_us_per_suppressed_submit": retries.generator_us_per_call(),
            "generator_cpu_us_per_health_check": floor.generator_us_per_call(),
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
            ("suppressed p99 / health check p99".to_owned(), p99_ratio),
            (
                "server cpu per suppressed submit / per health check".to_owned(),
                cpu_ratio,
            ),
            (
                "generator cpu per suppressed submit / per health check".to_owned(),
                generator_ratio,
            ),
        ]),
        writes_per_decision: BTreeMap::new(),
    })
}
