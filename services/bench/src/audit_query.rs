//! `audit-query`: pages of `ListDecisions` with filters over a large log, and
//! `VerifyLog` over all of it. The log is grown by writing decided proposals
//! straight into the database and letting the server's own sequencer chain them.

use std::{
    collections::BTreeMap,
    sync::Arc,
    time::{Duration, Instant},
};

use countersign_proto::{
    client::BearerAuth,
    v1::{self, ListDecisionsRequest, VerifyLogRequest, audit_service_client::AuditServiceClient},
};
use hdrhistogram::Histogram;
use serde_json::json;
use tokio::sync::Mutex;
use tonic::{service::interceptor::InterceptedService, transport::Channel};

use crate::{
    AuditQueryArgs, BenchArgs, baseline,
    report::{Machine, Percentiles, Report, add_counts},
    scenario::{channel, now_rfc3339, usage_between},
    server::Server,
};

type Audit = AuditServiceClient<InterceptedService<Channel, BearerAuth>>;

/// Targets the seeded decisions spread over (about `n / POOL` per target):
/// few enough that each holds four pages of 100 in the small log (10,000 /
/// 25 = 400), so that a target's page, at any depth the queries read, is the
/// same full page over either log and the ratio compares like with like.
const POOL: u64 = 25;

/// The newest sequence in the log, 0 when empty.
pub(crate) async fn log_size(client: &mut Audit) -> anyhow::Result<u64> {
    let page = client
        .list_decisions(ListDecisionsRequest {
            page_size: 1,
            ..Default::default()
        })
        .await?
        .into_inner();
    Ok(page.entries.first().map_or(0, |e| e.sequence))
}

/// Waits until the server's sequencer has appended `size` entries; returns how
/// long that took.
pub(crate) async fn await_log(client: &mut Audit, size: u64) -> anyhow::Result<Duration> {
    let started = Instant::now();
    while log_size(client).await? < size {
        if started.elapsed() > Duration::from_secs(1800) {
            anyhow::bail!("the audit log did not reach {size} entries in 30 min");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(started.elapsed())
}

/// The query of round `n`: a filter of each kind in turn, each a first page
/// or one a few pages deep.
fn query(n: u64, oldest_ms: i64, span_ms: i64) -> (&'static str, ListDecisionsRequest, u32) {
    let page = |request: ListDecisionsRequest| ListDecisionsRequest {
        page_size: 100,
        ..request
    };
    let depth = (n / 7 % 4) as u32;
    let from = oldest_ms + (n.wrapping_mul(7919) as i64).rem_euclid(span_ms.max(1));
    match n % 7 {
        0 => (
            "target",
            page(ListDecisionsRequest {
                target: format!("bench-{}", n % POOL),
                ..Default::default()
            }),
            depth,
        ),
        1 => (
            "outcome=reject",
            page(ListDecisionsRequest {
                outcome: v1::DecisionOutcome::Reject as i32,
                ..Default::default()
            }),
            depth,
        ),
        2 => (
            "operator",
            page(ListDecisionsRequest {
                operator: "bench".into(),
                ..Default::default()
            }),
            depth,
        ),
        3 => (
            "sop",
            page(ListDecisionsRequest {
                sop_id: "SOP-BENCH".into(),
                ..Default::default()
            }),
            depth,
        ),
        4 => (
            "time range 1 min",
            page(ListDecisionsRequest {
                decided_from: Some(countersign_proto::convert::timestamp(from)),
                decided_until: Some(countersign_proto::convert::timestamp(from + 60_000)),
                ..Default::default()
            }),
            0,
        ),
        5 => (
            "target + outcome",
            page(ListDecisionsRequest {
                target: format!("bench-{}", n % POOL),
                outcome: v1::DecisionOutcome::Approve as i32,
                ..Default::default()
            }),
            0,
        ),
        _ => ("no filter", page(ListDecisionsRequest::default()), depth),
    }
}

/// An auditor's client of the server at `endpoint`.
pub(crate) async fn client(endpoint: &str, key: &str) -> anyhow::Result<Audit> {
    Ok(AuditServiceClient::with_interceptor(
        channel(endpoint).await?,
        BearerAuth::new(key)?,
    ))
}

/// One round of queries against the log as it is: latencies per filter.
struct Round {
    pages: BTreeMap<&'static str, Histogram<u64>>,
    errors: BTreeMap<String, u64>,
    wall: Duration,
    usage: crate::report::ServerUsage,
}

impl Round {
    fn all(&self) -> Histogram<u64> {
        let mut all = Histogram::<u64>::new(3).expect("histogram");
        for h in self.pages.values() {
            all.add(h).expect("same precision");
        }
        all
    }
}

async fn round(
    server: &Server,
    key: &str,
    q: &AuditQueryArgs,
    span_ms: i64,
) -> anyhow::Result<Round> {
    let pages: Arc<Mutex<BTreeMap<&'static str, Histogram<u64>>>> = Arc::default();
    let errors: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
    let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let oldest_ms = crate::growth::seeded_at(0);
    let before = server.usage();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..q.clients {
        let mut client = client(&server.endpoint, key).await?;
        let (pages, errors, next, queries) =
            (pages.clone(), errors.clone(), next.clone(), q.queries);
        tasks.push(tokio::spawn(async move {
            loop {
                let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if n >= queries {
                    return;
                }
                let (name, mut request, depth) = query(n, oldest_ms, span_ms);
                for _ in 0..=depth {
                    let t = Instant::now();
                    match client.list_decisions(request.clone()).await {
                        Ok(page) => {
                            let us = t.elapsed().as_micros() as u64;
                            pages
                                .lock()
                                .await
                                .entry(name)
                                .or_insert_with(|| Histogram::new(3).expect("histogram"))
                                .record(us.max(1))
                                .ok();
                            let token = page.into_inner().next_page_token;
                            if token.is_empty() {
                                break;
                            }
                            request.page_token = token;
                        }
                        Err(status) => {
                            *errors
                                .lock()
                                .await
                                .entry(format!("{:?}", status.code()))
                                .or_default() += 1;
                            break;
                        }
                    }
                }
            }
        }));
    }
    for task in tasks {
        task.await?;
    }
    let wall = started.elapsed();
    let after = server.usage();
    let pages = std::mem::take(&mut *pages.lock().await);
    let errors = std::mem::take(&mut *errors.lock().await);
    Ok(Round {
        pages,
        errors,
        wall,
        usage: usage_between(before, after, wall),
    })
}

/// Seeds decided proposals `from..to` (server stopped), restarts the server
/// and waits for its sequencer to chain them; returns (seed, chain) times.
async fn grow(
    server: &mut Server,
    key: &str,
    from: u64,
    to: u64,
) -> anyhow::Result<(Duration, Duration)> {
    server.stop();
    let seeded = crate::growth::seed_decided(
        &server.data_dir.path().join("countersign.db"),
        from,
        to,
        POOL,
    )
    .await?;
    server.resume()?;
    let chained = await_log(&mut client(&server.endpoint, key).await?, to).await?;
    Ok((seeded, chained))
}

pub async fn audit_query(args: &BenchArgs, q: &AuditQueryArgs) -> anyhow::Result<Report> {
    let started_at = now_rfc3339();
    let sqlite = baseline::sqlite_insert_rate(args.baseline_time).await?;
    let mut server = Server::start(args)?;
    let key = server.admin(&[
        "admin",
        "key",
        "create",
        "--tenant",
        "default",
        "--role",
        "auditor",
        "--name",
        "bench-auditor",
    ])?;
    // The small log first, then grown to its full size: the same queries on both.
    let small = q.small.min(q.decisions);
    grow(&mut server, &key, 0, small).await?;
    let empty = round(&server, &key, q, small as i64).await?;
    let (seeded, chained) = grow(&mut server, &key, small, q.decisions).await?;
    let full = round(&server, &key, q, q.decisions as i64).await?;

    let mut audit = client(&server.endpoint, &key).await?;
    let t = Instant::now();
    let verified = audit
        .verify_log(VerifyLogRequest::default())
        .await?
        .into_inner();
    let verify_time = t.elapsed();
    anyhow::ensure!(verified.ok, "the seeded log did not verify: {verified:?}");
    let verify_rate = verified.entries_checked as f64 / verify_time.as_secs_f64();

    let grown = q.decisions - small;
    let mut latencies = BTreeMap::new();
    // Each filter over the full log against the same filter over the small
    // one: how the query's cost grows with the log.
    let mut growth_by_filter = BTreeMap::new();
    for (name, h) in &full.pages {
        let at_full = Percentiles::of(h);
        if let Some(at_small) = empty.pages.get(name).map(Percentiles::of) {
            growth_by_filter.insert(
                format!("page p99 full / small log: {name}"),
                at_full.p99_ms / at_small.p99_ms.max(1e-9),
            );
            latencies.insert(format!("page ({small} entries): {name}"), at_small);
        }
        latencies.insert(format!("page: {name}"), at_full);
    }
    let slowest_growth = growth_by_filter.values().copied().fold(0.0, f64::max);
    let (all_full, all_small) = (Percentiles::of(&full.all()), Percentiles::of(&empty.all()));
    latencies.insert(
        format!("page, any filter ({small} entries)"),
        all_small.clone(),
    );
    latencies.insert(
        format!("page, any filter ({} entries)", q.decisions),
        all_full.clone(),
    );
    let pages = full.all().len();
    let mut errors = full.errors.clone();
    add_counts(&mut errors, "small log ", &empty.errors);
    Ok(Report {
        scenario: "audit-query".into(),
        started_at,
        machine: Machine::here(),
        params: json!({
            "decisions": q.decisions, "small": small, "queries": q.queries, "clients": q.clients,
            "page_size": 100, "backend": "embedded (SQLite + embedded queue)",
        }),
        duration_s: full.wall.as_secs_f64(),
        throughput_per_s: pages as f64 / full.wall.as_secs_f64(),
        latencies,
        outcomes: BTreeMap::from([
            ("pages".to_owned(), pages),
            ("verified_entries".to_owned(), verified.entries_checked),
        ]),
        errors,
        server: full.usage,
        baselines: BTreeMap::from([
            ("sqlite_single_row_inserts_per_s".to_owned(), sqlite),
            (
                "seed_rows_per_s".to_owned(),
                grown as f64 / seeded.as_secs_f64(),
            ),
            (
                "sequencer_entries_per_s".to_owned(),
                grown as f64 / chained.as_secs_f64(),
            ),
            ("verify_entries_per_s".to_owned(), verify_rate),
        ]),
        ratios: growth_by_filter
            .into_iter()
            .chain([
                ("page p99 / 50 ms target".to_owned(), all_full.p99_ms / 50.0),
                (
                    "page p99 full / small log, the filter that grows most".to_owned(),
                    slowest_growth,
                ),
                (
                    "page p99 full / small log".to_owned(),
                    all_full.p99_ms / all_small.p99_ms.max(1e-9),
                ),
                (
                    "verify entries_per_s / 200,000 target".to_owned(),
                    verify_rate / 200_000.0,
                ),
                (
                    "sequencer entries_per_s / sqlite_inserts_per_s".to_owned(),
                    grown as f64 / chained.as_secs_f64() / sqlite,
                ),
            ])
            .collect(),
        writes_per_decision: BTreeMap::new(),
    })
}
