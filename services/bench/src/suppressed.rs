//! `suppressed`: identical resubmissions of a rejected proposal, answered from
//! the suppression cache; throughput and latency at N clients.

use std::{
    collections::BTreeMap,
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

use crate::{
    BenchArgs, SuppressedArgs, baseline,
    report::{Machine, Percentiles, Report},
    scenario::{MAX_TARGETS, now_rfc3339, proposals, seed, spec, usage_between},
    server::Server,
};

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

    let next = Arc::new(AtomicU64::new(0));
    let latency = Arc::new(Mutex::new(Histogram::<u64>::new(3)?));
    let outcomes = Arc::new(Mutex::new(BTreeMap::<String, u64>::new()));
    let before = server.usage();
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    let connections = load
        .connections
        .unwrap_or(load.clients)
        .clamp(1, load.clients.max(1));
    let mut shared = Vec::new();
    for _ in 0..connections {
        shared.push(proposals(&server.endpoint, &key).await?);
    }
    for c in 0..load.clients.max(1) {
        // Clients take turns over the connections (HTTP/2 multiplexes them).
        let mut client = shared[(c % connections) as usize].clone();
        let (next, latency, outcomes, doomed, total) = (
            next.clone(),
            latency.clone(),
            outcomes.clone(),
            doomed.clone(),
            load.submits,
        );
        tasks.spawn(async move {
            let mut mine = Histogram::<u64>::new(3).expect("histogram");
            let mut counts = BTreeMap::<String, u64>::new();
            while next.fetch_add(1, Ordering::Relaxed) < total {
                let t = Instant::now();
                let r = client
                    .submit(SubmitRequest {
                        spec: Some(doomed.clone()),
                    })
                    .await;
                let _ = mine.record((t.elapsed().as_micros() as u64).max(1));
                let outcome = match r {
                    Ok(r) if r.get_ref().suppressed => "suppressed".to_owned(),
                    Ok(_) => "reviewed".to_owned(),
                    Err(status) => format!("error {:?}", status.code()),
                };
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
    let outcomes = outcomes.lock().await.clone();
    let suppressed = outcomes.get("suppressed").copied().unwrap_or_default();
    let throughput = suppressed as f64 / wall.as_secs_f64();
    let errors = outcomes
        .iter()
        .filter(|(k, _)| k.starts_with("error"))
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    Ok(Report {
        scenario: "suppressed".into(),
        started_at,
        machine: Machine::here(),
        params: json!({
            "submits": load.submits, "clients": load.clients, "reviewers": args.reviewers,
            "connections": load.connections.unwrap_or(load.clients),
            "backend": "embedded (SQLite + embedded queue)",
        }),
        duration_s: wall.as_secs_f64(),
        throughput_per_s: throughput,
        latencies: BTreeMap::from([(
            "suppressed submit".to_owned(),
            Percentiles::of(&*latency.lock().await),
        )]),
        outcomes,
        errors,
        server: usage_between(before, after, wall),
        baselines: BTreeMap::from([("sqlite_single_row_inserts_per_s".to_owned(), sqlite)]),
        ratios: BTreeMap::from([(
            "suppressed_per_s / sqlite_inserts_per_s".to_owned(),
            throughput / sqlite,
        )]),
    })
}
