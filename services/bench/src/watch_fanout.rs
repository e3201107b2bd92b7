//! `watch-fanout`: K watchers on one tenant while proposals are decided at a
//! set rate; the delivery lag of each decision (commit → receipt) at every
//! watcher, and what the server spends doing it.

use std::{
    collections::BTreeMap,
    sync::Arc,
    time::{Duration, Instant},
};

use countersign_proto::{
    client::BearerAuth,
    convert::millis,
    v1::{
        EventKind, SubmitRequest, WatchRequest,
        notification_service_client::NotificationServiceClient,
        proposal_service_client::ProposalServiceClient,
    },
};
use hdrhistogram::Histogram;
use serde_json::json;
use tokio::sync::Mutex;

use crate::{
    BenchArgs, FanoutArgs, baseline,
    report::{Machine, Percentiles, Report, add_counts},
    scenario::{MAX_TARGETS, channel, is_reject, now_rfc3339, seed, spec, usage_between},
    server::Server,
};

#[derive(Default)]
struct Seen {
    lag: Option<Histogram<u64>>,
    decisions: u64,
    errors: BTreeMap<String, u64>,
}

fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}

pub async fn watch_fanout(args: &BenchArgs, fan: &FanoutArgs) -> anyhow::Result<Report> {
    let started_at = now_rfc3339();
    let sqlite = baseline::sqlite_insert_rate(args.baseline_time).await?;
    let server = Server::start(args)?;
    let key = seed(&server, "default", MAX_TARGETS).await?;
    let oncall = server.admin(&[
        "admin", "key", "create", "--tenant", "default", "--role", "oncall", "--name", "watcher",
    ])?;
    let seen = Arc::new(Mutex::new(Seen {
        lag: Some(Histogram::new(3)?),
        ..Seen::default()
    }));
    let expected = (fan.rate as f64 * fan.duration.as_secs_f64()).round() as u64;

    // Every watcher on its own connection, live from now.
    let mut watchers = tokio::task::JoinSet::new();
    for _ in 0..fan.watchers {
        let mut client = NotificationServiceClient::with_interceptor(
            channel(&server.endpoint).await?,
            BearerAuth::new(&oncall)?,
        );
        let stream = client
            .watch(WatchRequest {
                terminal_only: !fan.all_events,
                ..Default::default()
            })
            .await?;
        let seen = seen.clone();
        watchers.spawn(async move {
            let mut stream = stream.into_inner();
            let mut lag = Histogram::<u64>::new(3).expect("histogram");
            let mut decisions = 0;
            let mut error = None;
            while decisions < expected {
                match tokio::time::timeout(Duration::from_secs(30), stream.message()).await {
                    Ok(Ok(Some(n))) if n.heartbeat => {}
                    Ok(Ok(Some(n))) => {
                        let ended = matches!(
                            EventKind::try_from(n.event),
                            Ok(EventKind::Approved | EventKind::Rejected | EventKind::TimedOut)
                        );
                        if ended {
                            decisions += 1;
                            let at = n.emitted_at.as_ref().map(millis).unwrap_or_default();
                            let _ = lag.record(((wall_ms() - at).max(0) as u64 * 1000).max(1));
                        }
                    }
                    Ok(Ok(None)) => break,
                    Ok(Err(status)) => {
                        error = Some(format!("{:?}", status.code()));
                        break;
                    }
                    Err(_) => {
                        error = Some("no event for 30 s".to_owned());
                        break;
                    }
                }
            }
            let mut s = seen.lock().await;
            let _ = s.lag.as_mut().expect("histogram").add(&lag);
            s.decisions += decisions;
            if let Some(e) = error {
                *s.errors.entry(format!("watcher {e}")).or_default() += 1;
            }
        });
    }

    // Open loop submissions; the reviewers decide them.
    let before = server.usage();
    let started = Instant::now();
    let submitter = ProposalServiceClient::with_interceptor(
        channel(&server.endpoint).await?,
        BearerAuth::new(&key)?,
    );
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / fan.rate.max(1) as f64));
    let mut submits = tokio::task::JoinSet::new();
    for n in 0..expected {
        tick.tick().await;
        let mut client = submitter.clone();
        submits.spawn(async move {
            client
                .submit(SubmitRequest {
                    spec: Some(spec(n, is_reject(n, 0.2), MAX_TARGETS)),
                    ..Default::default()
                })
                .await
                .map(|_| ())
                .map_err(|s| format!("submit {:?}", s.code()))
        });
    }
    let mut errors = BTreeMap::new();
    while let Some(done) = submits.join_next().await {
        if let Ok(Err(e)) = done {
            *errors.entry(e).or_default() += 1;
        }
    }
    while watchers.join_next().await.is_some() {}
    let wall = started.elapsed();
    let after = server.usage();

    let s = seen.lock().await;
    add_counts(&mut errors, "", &s.errors);
    let lag = Percentiles::of(s.lag.as_ref().expect("histogram"));
    let delivered_per_s = s.decisions as f64 / wall.as_secs_f64();
    Ok(Report {
        scenario: "watch-fanout".into(),
        started_at,
        machine: Machine::here(),
        params: json!({
            "watchers": fan.watchers, "rate": fan.rate, "duration_s": fan.duration.as_secs_f64(),
            "terminal_only": !fan.all_events, "reviewers": args.reviewers,
            "backend": "embedded (SQLite + embedded queue)",
        }),
        duration_s: wall.as_secs_f64(),
        throughput_per_s: delivered_per_s,
        latencies: BTreeMap::from([("decision commit → watcher receipt".to_owned(), lag)]),
        outcomes: BTreeMap::from([
            ("decisions submitted".to_owned(), expected),
            ("decisions delivered (all watchers)".to_owned(), s.decisions),
        ]),
        errors,
        server: usage_between(before, after, wall),
        baselines: BTreeMap::from([("sqlite_single_row_inserts_per_s".to_owned(), sqlite)]),
        ratios: BTreeMap::from([(
            "delivered / (decisions × watchers)".to_owned(),
            s.decisions as f64 / (expected * fan.watchers).max(1) as f64,
        )]),
        writes_per_decision: BTreeMap::new(),
    })
}
