//! The scenarios. Each starts its own server, seeds what it needs through the
//! API, drives load with the generated client and reports.

use std::{
    collections::BTreeMap,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use countersign_proto::{
    client::BearerAuth,
    convert::json_to_struct,
    v1::{
        self, AwaitDecisionRequest, PutSopRequest, PutTargetRequest, SubmitRequest,
        proposal_service_client::ProposalServiceClient, sop_service_client::SopServiceClient,
        target_service_client::TargetServiceClient,
    },
};
use hdrhistogram::Histogram;
use serde_json::json;
use tokio::sync::Mutex;
use tonic::{
    service::interceptor::InterceptedService,
    transport::{Channel, Endpoint},
};

use crate::{
    BenchArgs, LoadArgs, NoisyArgs, Via, baseline,
    board::Board,
    production::Production,
    report::{Machine, Percentiles, Report, ServerUsage, add_counts},
    server::{Server, Usage},
};

type Proposals = ProposalServiceClient<InterceptedService<Channel, BearerAuth>>;

/// At most this many targets are seeded ONLINE; passing proposals go
/// round-robin over them (with one proposal in flight per client, no two
/// overlap).
pub(crate) const MAX_TARGETS: u64 = 1024;

/// What every load task records.
#[derive(Default)]
pub(crate) struct Tally {
    pub submit: Option<Histogram<u64>>,
    pub decision: Option<Histogram<u64>>,
    pub outcomes: BTreeMap<String, u64>,
    pub errors: BTreeMap<String, u64>,
}

impl Tally {
    pub(crate) fn new() -> Tally {
        Tally {
            submit: Some(Histogram::new(3).expect("histogram")),
            decision: Some(Histogram::new(3).expect("histogram")),
            ..Tally::default()
        }
    }

    fn error(&mut self, status: &tonic::Status) {
        *self
            .errors
            .entry(format!("{:?}", status.code()))
            .or_default() += 1;
    }
}

pub(crate) async fn channel(endpoint: &str) -> anyhow::Result<Channel> {
    Ok(Endpoint::from_shared(endpoint.to_owned())?
        .connect()
        .await?)
}

pub(crate) async fn proposals(endpoint: &str, key: &str) -> anyhow::Result<Proposals> {
    Ok(ProposalServiceClient::with_interceptor(
        channel(endpoint).await?,
        BearerAuth::new(key)?,
    ))
}

/// An SOP that covers `bench_restart` everywhere, and the pool of ONLINE targets.
pub(crate) async fn seed(server: &Server, tenant: &str, pool: u64) -> anyhow::Result<String> {
    if tenant != "default" {
        server.admin(&["admin", "tenant", "create", tenant])?;
    }
    // Approvals should not block the next proposal on the same target.
    // Nor should the bench operator's rejections open its breaker.
    server.admin(&[
        "admin",
        "tenant",
        "set",
        tenant,
        "--parallel-window",
        "0s",
        "--breaker-threshold",
        "0",
    ])?;
    let admin = server.admin(&[
        "admin", "key", "create", "--tenant", tenant, "--role", "admin",
    ])?;
    let key = server.admin(&[
        "admin",
        "key",
        "create",
        "--tenant",
        tenant,
        "--role",
        "coordinator",
        "--name",
        "bench",
    ])?;
    let ch = channel(&server.endpoint).await?;
    let mut sops = SopServiceClient::with_interceptor(ch.clone(), BearerAuth::new(&admin)?);
    sops.put_sop(PutSopRequest {
        sop: Some(v1::Sop {
            id: "SOP-BENCH".into(),
            action: "bench_restart".into(),
            title: "Benchmark restart".into(),
            rollback_path: "start it again".into(),
            max_blast_radius: v1::BlastRadius::TenantWide as i32,
            ..Default::default()
        }),
    })
    .await?;
    let mut targets = TargetServiceClient::with_interceptor(ch, BearerAuth::new(&admin)?);
    for n in 0..pool {
        targets
            .put_target(PutTargetRequest {
                target: Some(v1::Target {
                    id: format!("bench-{n}"),
                    status: v1::TargetStatus::Online as i32,
                    labels: [("cluster".to_owned(), format!("c{}", n % 8))].into(),
                    updated_at: None,
                }),
            })
            .await?;
    }
    Ok(key)
}

pub(crate) fn spec(n: u64, reject: bool, pool: u64) -> v1::ProposalSpec {
    v1::ProposalSpec {
        action: "bench_restart".into(),
        class: v1::OperationClass::Write as i32,
        target: if reject {
            format!("unknown-{n}")
        } else {
            format!("bench-{}", n % pool.max(1))
        },
        parameters: Some(json_to_struct(json!({"n": n}).as_object().expect("object"))),
        reason: "benchmark".into(),
        blast_radius: v1::BlastRadius::SingleDevice as i32,
        operator: "bench".into(),
        ..Default::default()
    }
}

/// Whether the `n`th proposal is built to fail, spreading `ratio` evenly.
pub(crate) fn is_reject(n: u64, ratio: f64) -> bool {
    ((n + 1) as f64 * ratio).floor() > (n as f64 * ratio).floor()
}

/// How a client learns its proposal's decision (`--via`).
#[derive(Clone, Copy)]
enum Learn<'a> {
    /// `AwaitDecision` after the `Submit`.
    Await,
    /// The shared `Watch` stream.
    Board(&'a Board),
    /// The `Submit` itself waits (`wait_for_decision`): one call.
    SubmitWait,
}

impl<'a> Learn<'a> {
    fn new(via: Via, board: Option<&'a Board>) -> Learn<'a> {
        match (via, board) {
            (Via::SubmitWait, _) => Learn::SubmitWait,
            (_, Some(board)) => Learn::Board(board),
            (_, None) => Learn::Await,
        }
    }
}

/// Submits one proposal and waits for its decision, recording both latencies.
async fn submit_and_await(
    client: &mut Proposals,
    (n, reject, pool): (u64, bool, u64),
    timeout: Duration,
    tally: &Mutex<Tally>,
    learn: Learn<'_>,
) {
    let started = Instant::now();
    let mut request = tonic::Request::new(SubmitRequest {
        spec: Some(spec(n, reject, pool)),
        wait_for_decision: None,
    });
    if let Learn::SubmitWait = learn {
        request.get_mut().wait_for_decision = timeout.try_into().ok();
        request.set_timeout(timeout + Duration::from_secs(1));
    }
    let submitted = client.submit(request).await;
    let submit_us = started.elapsed().as_micros() as u64;
    let proposal = match submitted {
        Ok(r) => r.into_inner().proposal.unwrap_or_default(),
        Err(status) => {
            tally.lock().await.error(&status);
            return;
        }
    };
    let decided = match learn {
        Learn::SubmitWait => Ok(tonic::Response::new(proposal)),
        Learn::Board(board) => board
            .decision(&proposal.id, timeout)
            .await
            .map(tonic::Response::new)
            .ok_or_else(|| tonic::Status::deadline_exceeded("no decision on the stream")),
        Learn::Await => {
            let mut request = tonic::Request::new(AwaitDecisionRequest { id: proposal.id });
            request.set_timeout(timeout);
            client.await_decision(request).await
        }
    };
    let decision_us = started.elapsed().as_micros() as u64;
    let mut t = tally.lock().await;
    let _ = t
        .submit
        .as_mut()
        .expect("histogram")
        .record(submit_us.max(1));
    match decided {
        Ok(p) => {
            let state = v1::ProposalState::try_from(p.into_inner().state)
                .map(|s| {
                    s.as_str_name()
                        .trim_start_matches("PROPOSAL_STATE_")
                        .to_ascii_lowercase()
                })
                .unwrap_or_else(|_| "unknown".into());
            *t.outcomes.entry(state).or_default() += 1;
            let _ = t
                .decision
                .as_mut()
                .expect("histogram")
                .record(decision_us.max(1));
        }
        Err(status) => t.error(&status),
    }
}

pub(crate) fn usage_between(before: Usage, after: Usage, wall: Duration) -> ServerUsage {
    usage_over(&[(before, after)], wall)
}

/// The usage of spans of one run, each `(before, after)`, over `wall`, their
/// spans' time together: each figure of CPU the spans' sum, memory as the
/// last span ended.
pub(crate) fn usage_over(spans: &[(Usage, Usage)], wall: Duration) -> ServerUsage {
    let sum = |of: fn(&Usage) -> f64| -> f64 {
        spans.iter().map(|(b, a)| (of(a) - of(b)).max(0.0)).sum()
    };
    let sum_known = |of: fn(&Usage) -> Option<f64>| -> Option<f64> {
        spans
            .iter()
            .map(|(b, a)| Some((of(a)? - of(b)?).max(0.0)))
            .sum()
    };
    let cpu = sum(|u| u.cpu_seconds);
    let last = spans.last().map(|(_, a)| *a).unwrap_or_default();
    ServerUsage {
        cpu_seconds: cpu,
        cpu_cores_used: cpu / wall.as_secs_f64().max(1e-9),
        rss_mib: last.rss_kib as f64 / 1024.0,
        peak_rss_mib: last.peak_rss_kib as f64 / 1024.0,
        postgres_cpu_seconds: sum_known(|u| u.postgres_cpu_seconds),
        redis_cpu_seconds: sum_known(|u| u.redis_cpu_seconds),
        generator_cpu_seconds: Some(sum(|u| u.generator_cpu_seconds)),
    }
}

pub(crate) fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

/// Closed loop (N clients, one proposal in flight each) or open loop (a fixed
/// arrival rate).
pub(crate) async fn drive(
    endpoint: &str,
    key: &str,
    load: &LoadArgs,
    (pool, first): (u64, u64),
    tally: Arc<Mutex<Tally>>,
) -> anyhow::Result<Duration> {
    let next = Arc::new(AtomicU64::new(first));
    let board = match load.via {
        Via::Await | Via::SubmitWait => None,
        Via::Watch => Some(Board::open(endpoint, key).await?),
    };
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    match load.rate {
        None => {
            for _ in 0..load.clients.max(1) {
                let mut client = proposals(endpoint, key).await?;
                let (next, tally, load) = (next.clone(), tally.clone(), load.clone());
                let board = board.clone();
                tasks.spawn(async move {
                    loop {
                        let n = next.fetch_add(1, Ordering::Relaxed);
                        if n >= first + load.proposals {
                            break;
                        }
                        let reject = is_reject(n, load.reject_ratio);
                        let shot = (n, reject, pool);
                        submit_and_await(
                            &mut client,
                            shot,
                            load.decision_timeout,
                            &tally,
                            Learn::new(load.via, board.as_ref()),
                        )
                        .await;
                    }
                });
            }
        }
        Some(rate) => {
            let mut clients = Vec::new();
            for _ in 0..load.clients.max(1) {
                clients.push(proposals(endpoint, key).await?);
            }
            let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate.max(1) as f64));
            for n in first..first + load.proposals {
                tick.tick().await;
                let mut client = clients[(n % clients.len() as u64) as usize].clone();
                let (tally, load, board) = (tally.clone(), load.clone(), board.clone());
                tasks.spawn(async move {
                    let reject = is_reject(n, load.reject_ratio);
                    submit_and_await(
                        &mut client,
                        (n, reject, pool),
                        load.decision_timeout,
                        &tally,
                        Learn::new(load.via, board.as_ref()),
                    )
                    .await;
                });
            }
        }
    }
    while tasks.join_next().await.is_some() {}
    Ok(started.elapsed())
}

/// One `drive` with its own tally and the server's usage over it.
struct Measured {
    tally: Tally,
    wall: Duration,
    usage: ServerUsage,
    /// What the run wrote, per decision (`writes::per_decision`).
    writes: BTreeMap<String, f64>,
}

async fn measure(
    server: &Server,
    key: &str,
    load: &LoadArgs,
    pool: u64,
) -> anyhow::Result<Measured> {
    measure_from(server, key, load, (pool, 0)).await
}

/// [`measure`], its proposals numbered from `first` (distinct from every
/// other run's on the same server, so none is a retry of an earlier one).
async fn measure_from(
    server: &Server,
    key: &str,
    load: &LoadArgs,
    (pool, first): (u64, u64),
) -> anyhow::Result<Measured> {
    Ok(measure_in_turns(server, key, load, (pool, first), 1, false)
        .await?
        .0)
}

/// How many blocks a closed-loop `submit-decide` takes turns in with the
/// transport's floor.
const FLOOR_BLOCKS: u64 = 4;

/// `load.proposals` in `blocks` blocks, their tallies, times and server CPU
/// summed, and what they wrote per decision. With `floor`, each block is
/// followed by a block of health checks (the floor's, as many calls as the
/// block made), summed too: the run and its floor take turns, so that the
/// two sides of a ratio share the machine's same minutes (a floor measured
/// after the run carries the machine's drift between them). Health checks
/// write nothing, so the writes are read around the whole.
async fn measure_in_turns(
    server: &Server,
    key: &str,
    load: &LoadArgs,
    (pool, first): (u64, u64),
    blocks: u64,
    floor: bool,
) -> anyhow::Result<(Measured, Option<crate::closed_loop::Loop>)> {
    let blocks = blocks.clamp(1, load.proposals.max(1));
    let clients = load.clients.max(1);
    let tally = Arc::new(Mutex::new(Tally::new()));
    let written_before = crate::writes::Snapshot::take(server).await?;
    let (mut wall, mut usage) = (Duration::ZERO, None::<ServerUsage>);
    let mut health: Option<crate::closed_loop::Loop> = None;
    let mut next = first;
    for turn in 0..blocks {
        // The blocks share the proposals out to the last one.
        let block = LoadArgs {
            proposals: load.proposals / blocks + u64::from(turn < load.proposals % blocks),
            ..load.clone()
        };
        let before = server.usage();
        let took = drive(&server.endpoint, key, &block, (pool, next), tally.clone()).await?;
        next += block.proposals;
        wall += took;
        let used = usage_between(before, server.usage(), took);
        match &mut usage {
            Some(sum) => sum.absorb(used, wall),
            none => *none = Some(used),
        }
        if floor {
            let checks = (block.proposals as f64 * calls_per_decision(load.via)) as u64;
            let checked =
                crate::closed_loop::health_checks(server, clients, clients, checks).await?;
            match &mut health {
                Some(sum) => sum.absorb(checked)?,
                none => *none = Some(checked),
            }
        }
    }
    let written_after = crate::writes::Snapshot::take(server).await?;
    let tally = std::mem::take(&mut *tally.lock().await);
    let decisions = tally.outcomes.values().sum::<u64>();
    let writes =
        crate::writes::per_decision(server, &written_before, &written_after, decisions).await?;
    let usage = usage.ok_or_else(|| anyhow::anyhow!("no block was measured"))?;
    Ok((
        Measured {
            tally,
            wall,
            usage,
            writes,
        },
        health,
    ))
}

/// Decides `load.warmup` proposals, not counted, so that a measured run does
/// not include the server's and its databases' start (connections, plan and
/// buffer caches, a young table's first statistics). `round` keeps each
/// warm-up's proposals distinct from every other run's.
async fn warm_up(
    server: &Server,
    key: &str,
    load: &LoadArgs,
    pool: u64,
    round: u64,
) -> anyhow::Result<()> {
    if load.warmup == 0 {
        return Ok(());
    }
    let warmup = LoadArgs {
        proposals: load.warmup,
        ..load.clone()
    };
    let tally = Arc::new(Mutex::new(Tally::new()));
    drive(
        &server.endpoint,
        key,
        &warmup,
        (pool, round << 40),
        tally.clone(),
    )
    .await?;
    let tally = tally.lock().await;
    if !tally.errors.is_empty() {
        anyhow::bail!("the warm-up failed: {:?}", tally.errors);
    }
    Ok(())
}

impl Measured {
    /// Adds `other`'s decisions, time and server CPU to these (the writes
    /// stay this run's).
    fn absorb(&mut self, other: Measured) -> anyhow::Result<()> {
        for (mine, theirs) in [
            (&mut self.tally.submit, other.tally.submit),
            (&mut self.tally.decision, other.tally.decision),
        ] {
            if let (Some(mine), Some(theirs)) = (mine.as_mut(), theirs) {
                mine.add(&theirs)?;
            }
        }
        add_counts(&mut self.tally.outcomes, "", &other.tally.outcomes);
        add_counts(&mut self.tally.errors, "", &other.tally.errors);
        self.wall += other.wall;
        self.usage.absorb(other.usage, self.wall);
        Ok(())
    }

    fn throughput(&self) -> f64 {
        self.tally.outcomes.values().sum::<u64>() as f64 / self.wall.as_secs_f64()
    }

    fn decision(&self) -> Percentiles {
        Percentiles::of(self.tally.decision.as_ref().expect("histogram"))
    }

    /// The decisions counted, at least one: what a per-decision figure
    /// divides by.
    fn decided(&self) -> f64 {
        self.tally.outcomes.values().sum::<u64>().max(1) as f64
    }

    /// The machine's CPU microseconds a decision: the server's, the load
    /// generator's and, on production, PostgreSQL's and Redis's.
    fn machine_cpu_us_per_decision(&self) -> f64 {
        let usage = &self.usage;
        let others = [
            usage.generator_cpu_seconds,
            usage.postgres_cpu_seconds,
            usage.redis_cpu_seconds,
        ];
        (usage.cpu_seconds + others.iter().flatten().sum::<f64>()) * 1e6 / self.decided()
    }

    fn server_cpu_ms_per_decision(&self) -> f64 {
        self.usage.cpu_seconds * 1000.0 / self.decided()
    }
}

/// The machine's limits for a run on `production` (or the embedded default):
/// the baselines, and the (ratio name, limit) pairs throughput is divided by.
pub(crate) async fn limits(
    args: &BenchArgs,
    production: Option<&Production>,
) -> anyhow::Result<(BTreeMap<String, f64>, Vec<(String, f64)>)> {
    let Some(p) = production else {
        let sqlite = baseline::sqlite_insert_rate(args.baseline_time).await?;
        return Ok((
            BTreeMap::from([("sqlite_single_row_inserts_per_s".to_owned(), sqlite)]),
            vec![("sqlite_inserts_per_s".to_owned(), sqlite)],
        ));
    };
    let clients = args.production.pgbench_clients;
    let (pg, pg_cpu_ms) = p
        .pgbench_tps(clients, args.baseline_time.as_secs().max(2))
        .await?;
    let redis = p.redis_xadd_rate(
        args.production.redis_benchmark_clients,
        args.production.redis_benchmark_requests,
    )?;
    let mut baselines = BTreeMap::from([
        (
            format!("pgbench_single_row_insert_tps_{clients}_clients"),
            pg,
        ),
        ("redis_benchmark_xadd_per_s".to_owned(), redis),
    ]);
    if let Some(per_tx) = pg_cpu_ms {
        baselines.insert("pgbench_postgres_cpu_ms_per_tx".to_owned(), per_tx);
    }
    Ok((
        baselines,
        vec![
            ("pgbench_tps".to_owned(), pg),
            ("redis_xadd_per_s".to_owned(), redis),
        ],
    ))
}

pub(crate) fn backend_name(production: Option<&Production>) -> &'static str {
    match production {
        Some(_) => "production (PostgreSQL + Redis Streams)",
        None => "embedded (SQLite + embedded queue)",
    }
}

/// The transport's floor beside a closed-loop `submit-decide`: as many gRPC
/// health checks as the run made calls, from as many clients on connections
/// of their own. A decision takes at least `calls_per_decision` unary calls
/// (Submit and AwaitDecision; Submit alone when decisions come on a Watch
/// stream or the Submit waits for its decision), so the floor divided by them bounds the decisions per second
/// whatever the storage costs: the transport's ceiling.
struct TransportFloor {
    /// Health checks a second.
    rate: f64,
    baselines: BTreeMap<String, f64>,
    ratios: Vec<(String, f64)>,
    latency: Percentiles,
    errors: BTreeMap<String, u64>,
    /// The server's and the load generator's CPU microseconds a health check.
    cpu_us_per_call: f64,
}

/// Unary calls a decision takes as `via` learns it.
fn calls_per_decision(via: Via) -> f64 {
    match via {
        Via::Await => 2.0,
        Via::Watch | Via::SubmitWait => 1.0,
    }
}

fn transport_floor(
    floor: &crate::closed_loop::Loop,
    load: &LoadArgs,
    limits: &[(String, f64)],
    decisions_per_s: f64,
) -> TransportFloor {
    let clients = load.clients.max(1);
    let rate = floor.rate_of("served");
    let ceiling = rate / calls_per_decision(load.via);
    let mut ratios = vec![
        (
            "decisions_per_s / grpc_health_checks_per_s".to_owned(),
            decisions_per_s / rate.max(1e-9),
        ),
        (
            "decisions_per_s / transport_ceiling".to_owned(),
            decisions_per_s / ceiling.max(1e-9),
        ),
    ];
    ratios.extend(limits.iter().map(|(name, limit)| {
        (
            format!("transport_ceiling / {name}"),
            ceiling / limit.max(1e-9),
        )
    }));
    TransportFloor {
        rate,
        baselines: BTreeMap::from([
            (format!("grpc_health_checks_per_s_{clients}_clients"), rate),
            ("transport_ceiling_decisions_per_s".to_owned(), ceiling),
            (
                "server_cpu_us_per_health_check".to_owned(),
                floor.server_us_per_call(),
            ),
            (
                "generator_cpu_us_per_health_check".to_owned(),
                floor.generator_us_per_call(),
            ),
        ]),
        ratios,
        latency: Percentiles::of(&floor.latency),
        errors: crate::closed_loop::errors_of(&floor.outcomes),
        cpu_us_per_call: floor.server_us_per_call() + floor.generator_us_per_call(),
    }
}

pub async fn submit_decide(args: &BenchArgs, load: &LoadArgs) -> anyhow::Result<Report> {
    args.production
        .run(args, |production| submit_decide_on(args, load, production))
        .await
}

async fn submit_decide_on(
    args: &BenchArgs,
    load: &LoadArgs,
    production: Option<Production>,
) -> anyhow::Result<Report> {
    let started_at = now_rfc3339();
    let backend = backend_name(production.as_ref());
    let (mut baselines, mut limits) = limits(args, production.as_ref()).await?;
    // A Submit that waits is decided as it is stored (`review.at_submission`,
    // on unless the server's environment turns it off).
    let at_submission =
        std::env::var("COUNTERSIGN_REVIEW_AT_SUBMISSION").map_or(true, |v| v.trim() != "false");
    let path = match load.via {
        Via::SubmitWait if at_submission => crate::rows_floor::Path::DecidedAsStored,
        _ => crate::rows_floor::Path::Queued,
    };
    let rows = crate::rows_floor::measure(
        production.as_ref(),
        &args.server_binary()?,
        path,
        args.production.pgbench_clients,
        load.clients,
        args.baseline_time,
    )
    .await?;
    baselines.extend(rows.baselines());
    limits.push(("decision_rows_alone_per_s".to_owned(), rows.decisions_per_s));
    let mut server = Server::start_on(args, production)?;
    let pool = load.proposals.clamp(load.clients.max(1), MAX_TARGETS);
    let key = seed(&server, "default", pool).await?;
    warm_up(&server, &key, load, pool, 1).await?;
    // A closed loop takes turns with its floor; an open loop has none.
    let (empty, health) = match load.rate {
        None => measure_in_turns(&server, &key, load, (pool, 0), FLOOR_BLOCKS, true).await?,
        Some(_) => (measure(&server, &key, load, pool).await?, None),
    };
    let mut latencies = BTreeMap::from([
        (
            "submit".to_owned(),
            Percentiles::of(empty.tally.submit.as_ref().expect("histogram")),
        ),
        ("submit → decision".to_owned(), empty.decision()),
    ]);
    let mut ratios: BTreeMap<String, f64> = limits
        .iter()
        .map(|(name, limit)| {
            (
                format!("decisions_per_s / {name}"),
                empty.throughput() / limit,
            )
        })
        .collect();
    let mut outcomes = empty.tally.outcomes.clone();
    let mut errors = empty.tally.errors.clone();
    if let Some(health) = &health {
        let floor = transport_floor(health, load, &limits, empty.throughput());
        baselines.insert("floor_blocks".to_owned(), FLOOR_BLOCKS as f64);
        ratios.extend(floor.ratios);
        ratios.insert(
            "decision_rows_alone_per_s / grpc_health_checks_per_s".to_owned(),
            rows.decisions_per_s / floor.rate.max(1e-9),
        );
        baselines.extend(floor.baselines);
        ratios.insert(
            "decision p99 / health check p99".to_owned(),
            empty.decision().p99_ms / floor.latency.p99_ms.max(1e-9),
        );
        // The machine's CPU a decision over a health check's (the server's
        // and the generator's: no database serves one): the rate ratio the
        // cores would allow at the floor's use of them.
        ratios.insert(
            "machine cpu per decision / per health check".to_owned(),
            empty.machine_cpu_us_per_decision() / floor.cpu_us_per_call.max(1e-9),
        );
        latencies.insert("health check (floor)".to_owned(), floor.latency);
        add_counts(&mut errors, "health check: ", &floor.errors);
    }
    // PostgreSQL's CPU per decision over its CPU per pgbench insert, and
    // over what the decision's rows alone cost it (each against the other too).
    let per_tx = baselines.get("pgbench_postgres_cpu_ms_per_tx").copied();
    if let Some(seconds) = empty.usage.postgres_cpu_seconds {
        let per_decision = seconds * 1000.0 / empty.decided();
        if let Some(per_tx) = per_tx {
            ratios.insert(
                "postgres cpu per decision / per pgbench transaction".to_owned(),
                per_decision / per_tx.max(1e-9),
            );
        }
        if let Some(rows_ms) = rows.postgres_cpu_ms {
            ratios.insert(
                "postgres cpu per decision / per decision of its rows alone".to_owned(),
                per_decision / rows_ms.max(1e-9),
            );
        }
    }
    if let (Some(per_tx), Some(rows_ms)) = (per_tx, rows.postgres_cpu_ms) {
        ratios.insert(
            "postgres cpu per decision of its rows alone / per pgbench transaction".to_owned(),
            rows_ms / per_tx.max(1e-9),
        );
    }
    let mut headline = (empty.throughput(), empty.wall, empty.usage.clone());
    if let Some(rows) = load.growth {
        // Every decision so far: the first warm-up's and the measured run's.
        let decided: u64 = empty.tally.outcomes.values().sum::<u64>() + load.warmup;
        let (grown, beside) = if server.production.is_some() {
            // The run's one database grows under the server that measured it
            // empty, and is measured again.
            fill(&mut server, rows, pool, decided, &mut baselines).await?;
            warm_up(&server, &key, load, pool, 2).await?;
            (measure(&server, &key, load, pool).await?, None)
        } else {
            // A second server on a database of its own grows while the first
            // waits; then the two take turns, a block each, so that the
            // machine's same minutes are in both halves of the ratio (halves
            // measured one after the other carry the machine's drift between
            // them as much as the growth).
            let mut grown_server = Server::start_on(args, None)?;
            let grown_key = seed(&grown_server, "default", pool).await?;
            warm_up(&grown_server, &grown_key, load, pool, 1).await?;
            fill(&mut grown_server, rows, pool, load.warmup, &mut baselines).await?;
            warm_up(&grown_server, &grown_key, load, pool, 2).await?;
            let (empty, grown, blocks) =
                take_turns((&server, &key), (&grown_server, &grown_key), load, pool).await?;
            baselines.insert("growth_blocks".to_owned(), GROWTH_BLOCKS as f64);
            // Each turn's pair, so that a run shows whether the grown side
            // trails steadily or in some blocks only.
            for (turn, [empty, grown]) in blocks.iter().enumerate() {
                baselines.insert(format!("growth_block_{}_empty_per_s", turn + 1), *empty);
                baselines.insert(format!("growth_block_{}_grown_per_s", turn + 1), *grown);
            }
            (grown, Some(empty))
        };
        let empty = beside.as_ref().unwrap_or(&empty);
        latencies.insert(
            format!("submit → decision after {rows} decided"),
            grown.decision(),
        );
        ratios.insert(
            "grown / empty decisions_per_s".to_owned(),
            grown.throughput() / empty.throughput(),
        );
        ratios.insert(
            "grown / empty decision p99".to_owned(),
            grown.decision().p99_ms / empty.decision().p99_ms.max(1e-9),
        );
        // The server's own work per decision, apart from how much of the two
        // cores the machine let it have in each half.
        baselines.insert(
            "empty_server_cpu_ms_per_decision".to_owned(),
            empty.server_cpu_ms_per_decision(),
        );
        baselines.insert(
            "grown_server_cpu_ms_per_decision".to_owned(),
            grown.server_cpu_ms_per_decision(),
        );
        ratios.insert(
            "grown / empty server cpu per decision".to_owned(),
            grown.server_cpu_ms_per_decision() / empty.server_cpu_ms_per_decision().max(1e-9),
        );
        for (prefix, half) in [("grown ", Some(&grown)), ("empty beside ", beside.as_ref())] {
            if let Some(half) = half {
                add_counts(&mut outcomes, prefix, &half.tally.outcomes);
                add_counts(&mut errors, prefix, &half.tally.errors);
            }
        }
        headline = (grown.throughput(), grown.wall, grown.usage.clone());
    }
    Ok(Report {
        scenario: "submit-decide".into(),
        started_at,
        machine: Machine::here(),
        params: json!({
            "proposals": load.proposals, "clients": load.clients, "rate": load.rate,
            "reject_ratio": load.reject_ratio, "reviewers": args.reviewers, "via": load.via,
            "growth": load.growth, "warmup": load.warmup, "backend": backend,
        }),
        duration_s: headline.1.as_secs_f64(),
        throughput_per_s: headline.0,
        latencies,
        outcomes,
        errors,
        server: headline.2,
        baselines,
        ratios,
        writes_per_decision: empty.writes.clone(),
    })
}

/// Blocks a growth run's embedded halves take turns in.
const GROWTH_BLOCKS: u64 = 4;

/// Stops `server`, writes `rows` decided proposals straight into its
/// database, starts it again and waits until its sequencer has chained them
/// into the audit log behind the `decided` it already held; records the
/// seed's and the sequencer's rates.
async fn fill(
    server: &mut Server,
    rows: u64,
    pool: u64,
    decided: u64,
    baselines: &mut BTreeMap<String, f64>,
) -> anyhow::Result<()> {
    server.stop();
    let seeded = match &server.production {
        Some(production) => {
            crate::growth::seed_decided_postgres(&production.owner_url, 0, rows, pool).await?
        }
        None => {
            crate::growth::seed_decided(
                &server.data_dir.path().join("countersign.db"),
                0,
                rows,
                pool,
            )
            .await?
        }
    };
    baselines.insert(
        "growth_seed_rows_per_s".to_owned(),
        rows as f64 / seeded.as_secs_f64(),
    );
    // A server that starts on the full database (its fan-out starts at the
    // newest event rather than replaying the seed to no one), and whose
    // sequencer has chained the seed into the audit log before we measure.
    server.resume()?;
    let auditor = server.admin(&[
        "admin", "key", "create", "--tenant", "default", "--role", "auditor",
    ])?;
    let mut audit = crate::audit_query::client(&server.endpoint, &auditor).await?;
    let chained = crate::audit_query::await_log(&mut audit, decided + rows).await?;
    baselines.insert(
        "growth_sequencer_entries_per_s".to_owned(),
        rows as f64 / chained.as_secs_f64(),
    );
    Ok(())
}

/// `load.proposals` on each of two servers in [`GROWTH_BLOCKS`] turns, one
/// block on `first`, then one on `second`, and again; each side's blocks
/// summed, and each turn's two decision rates.
async fn take_turns(
    (first, first_key): (&Server, &str),
    (second, second_key): (&Server, &str),
    load: &LoadArgs,
    pool: u64,
) -> anyhow::Result<(Measured, Measured, Vec<[f64; 2]>)> {
    let block = LoadArgs {
        proposals: (load.proposals / GROWTH_BLOCKS).max(1),
        ..load.clone()
    };
    let mut sides: [Option<Measured>; 2] = [None, None];
    let mut rates = Vec::new();
    for turn in 0..GROWTH_BLOCKS {
        let mut pair = [0.0; 2];
        // Numbered past the warm-ups' rounds (1 and 2) and the first run.
        let numbered = (pool, (3 + turn) << 40);
        for (side, (server, key)) in [(first, first_key), (second, second_key)]
            .into_iter()
            .enumerate()
        {
            let measured = measure_from(server, key, &block, numbered).await?;
            pair[side] = measured.throughput();
            match &mut sides[side] {
                Some(sum) => sum.absorb(measured)?,
                empty => *empty = Some(measured),
            }
        }
        rates.push(pair);
    }
    let [Some(first), Some(second)] = sides else {
        anyhow::bail!("no block was measured");
    };
    Ok((first, second, rates))
}

/// How long a trickle runs: for a span, or until its flag is set.
#[derive(Debug, Clone)]
pub(crate) struct Stop {
    deadline: Option<Instant>,
    flag: Arc<AtomicBool>,
}

impl Stop {
    pub(crate) fn after(span: Duration) -> Stop {
        Stop {
            deadline: Some(Instant::now() + span),
            flag: Arc::default(),
        }
    }

    /// Runs until [`Stop::flag`] is set.
    pub(crate) fn when_flagged() -> Stop {
        Stop {
            deadline: None,
            flag: Arc::default(),
        }
    }

    pub(crate) fn flag(&self) -> Arc<AtomicBool> {
        self.flag.clone()
    }

    fn reached(&self) -> bool {
        self.flag.load(Ordering::Relaxed) || self.deadline.is_some_and(|d| Instant::now() >= d)
    }
}

/// The quiet tenant's trickle until `stop`: its decision latencies. It is a
/// probe of the server, so it runs on a thread and a runtime of its own: on
/// the generator's runtime its calls would wait behind the load's own
/// clients (and the fake model provider) whenever they are busy, and the
/// generator's queueing would be counted as the server's. A separate thread
/// is what a neighbour's own process is to the operating system's scheduler.
pub(crate) async fn trickle(
    endpoint: &str,
    key: &str,
    rate: u64,
    stop: Stop,
    tally: Arc<Mutex<Tally>>,
    via: Via,
) -> anyhow::Result<()> {
    let (endpoint, key) = (endpoint.to_owned(), key.to_owned());
    let (done, finished) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("bench-trickle".into())
        .spawn(move || {
            let result = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(anyhow::Error::from)
                .and_then(|runtime| {
                    runtime.block_on(trickle_here(&endpoint, &key, rate, stop, tally, via))
                });
            let _ = done.send(result);
        })?;
    finished.await?
}

/// One decision of either `noisy-neighbour` tenant: a proposal built to
/// pass, over the targets of the run, given a minute.
async fn noisy_decision(client: &mut Proposals, n: u64, tally: &Mutex<Tally>, via: Via) {
    submit_and_await(
        client,
        (n, false, MAX_TARGETS),
        Duration::from_secs(60),
        tally,
        Learn::new(via, None),
    )
    .await;
}

async fn trickle_here(
    endpoint: &str,
    key: &str,
    rate: u64,
    stop: Stop,
    tally: Arc<Mutex<Tally>>,
    via: Via,
) -> anyhow::Result<()> {
    let client = proposals(endpoint, key).await?;
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate.max(1) as f64));
    let mut tasks = tokio::task::JoinSet::new();
    let mut n = 0;
    while !stop.reached() {
        tick.tick().await;
        let (mut client, tally) = (client.clone(), tally.clone());
        tasks.spawn(async move {
            noisy_decision(&mut client, n, &tally, via).await;
        });
        n += 1;
    }
    while tasks.join_next().await.is_some() {}
    Ok(())
}

/// The turns of `noisy-neighbour`: busy cores alone, then the flood, each a
/// quarter of the run's duration a turn.
const NOISY_BLOCKS: u32 = 4;

pub async fn noisy_neighbour(args: &BenchArgs, noisy: &NoisyArgs) -> anyhow::Result<Report> {
    args.production
        .run(args, |production| {
            noisy_neighbour_on(args, noisy, production)
        })
        .await
}

async fn noisy_neighbour_on(
    args: &BenchArgs,
    noisy: &NoisyArgs,
    production: Option<Production>,
) -> anyhow::Result<Report> {
    if noisy.via == Via::Watch {
        anyhow::bail!(
            "noisy-neighbour --via: await or submit-wait (watch has no shared board here)"
        );
    }
    let started_at = now_rfc3339();
    let backend = backend_name(production.as_ref());
    let server = Server::start_on(args, production)?;
    let flood_key = seed(&server, "default", MAX_TARGETS).await?;
    let quiet_key = seed(&server, "quiet", MAX_TARGETS).await?;

    // The trickle alone first: the latency it should keep.
    let alone = Arc::new(Mutex::new(Tally::new()));
    trickle(
        &server.endpoint,
        &quiet_key,
        noisy.trickle_rate,
        Stop::after(noisy.duration / 2),
        alone.clone(),
        noisy.via,
    )
    .await?;

    // Then the trickle beside threads of this process that spin on every
    // core and share nothing with the server (what CPU contention alone
    // costs it), and while the other tenant floods, in `NOISY_BLOCKS` turns
    // of a quarter of `duration` each: both sides of the target's ratio
    // share the machine's same minutes, and each side's p99 is over as many
    // decisions as the other's.
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let contended = Arc::new(Mutex::new(Tally::new()));
    let flooded = Arc::new(Mutex::new(Tally::new()));
    let flood = Arc::new(Mutex::new(Tally::new()));
    let block = noisy.duration / NOISY_BLOCKS;
    // The flood's clients connect once; each turn floods on the same connections.
    let mut flood_clients = Vec::new();
    for _ in 0..noisy.flood_clients.max(1) {
        flood_clients.push(proposals(&server.endpoint, &flood_key).await?);
    }
    let mut flood_spans = Vec::new();
    let mut wall = Duration::ZERO;
    for _ in 0..NOISY_BLOCKS {
        let burners = crate::burners::Burners::start(cores);
        trickle(
            &server.endpoint,
            &quiet_key,
            noisy.trickle_rate,
            Stop::after(block),
            contended.clone(),
            noisy.via,
        )
        .await?;
        drop(burners);

        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let before = server.usage();
        let started = Instant::now();
        let mut flooders = tokio::task::JoinSet::new();
        for (c, client) in (0u64..).zip(&flood_clients) {
            let (mut client, stop, flood, via) =
                (client.clone(), stop.clone(), flood.clone(), noisy.via);
            flooders.spawn(async move {
                let mut n = c * 1_000_000;
                while !stop.load(Ordering::Relaxed) {
                    noisy_decision(&mut client, n, &flood, via).await;
                    n += 1;
                }
            });
        }
        trickle(
            &server.endpoint,
            &quiet_key,
            noisy.trickle_rate,
            Stop::after(block),
            flooded.clone(),
            noisy.via,
        )
        .await?;
        stop.store(true, Ordering::Relaxed);
        while flooders.join_next().await.is_some() {}
        wall += started.elapsed();
        flood_spans.push((before, server.usage()));
    }

    let (alone, flooded, flood) = (alone.lock().await, flooded.lock().await, flood.lock().await);
    let contended = contended.lock().await;
    let contended_p = Percentiles::of(contended.decision.as_ref().expect("histogram"));
    let alone_p = Percentiles::of(alone.decision.as_ref().expect("histogram"));
    let flooded_p = Percentiles::of(flooded.decision.as_ref().expect("histogram"));
    let flood_p = Percentiles::of(flood.decision.as_ref().expect("histogram"));
    let mut errors = flooded.errors.clone();
    add_counts(&mut errors, "flood ", &flood.errors);
    let flood_rate = flood_p.count as f64 / wall.as_secs_f64();
    let submit_of = |tally: &Tally| Percentiles::of(tally.submit.as_ref().expect("histogram"));
    Ok(Report {
        scenario: "noisy-neighbour".into(),
        started_at,
        machine: Machine::here(),
        params: json!({
            "flood_clients": noisy.flood_clients, "trickle_rate": noisy.trickle_rate,
            "duration_s": noisy.duration.as_secs_f64(), "reviewers": args.reviewers,
            "backend": backend, "spinning_threads": cores, "via": noisy.via,
            "blocks": NOISY_BLOCKS,
        }),
        duration_s: wall.as_secs_f64(),
        throughput_per_s: flood_rate,
        ratios: BTreeMap::from([
            (
                "trickle p50 flooded / alone".to_owned(),
                flooded_p.p50_ms / alone_p.p50_ms.max(1e-9),
            ),
            (
                "trickle p99 flooded / alone".to_owned(),
                flooded_p.p99_ms / alone_p.p99_ms.max(1e-9),
            ),
            // The target's ratio: the flood against busy cores alone.
            (
                "trickle p99 flooded / beside spinning threads".to_owned(),
                flooded_p.p99_ms / contended_p.p99_ms.max(1e-9),
            ),
            // The machine's own part: no flood, only busy cores.
            (
                "trickle p99 beside spinning threads / alone".to_owned(),
                contended_p.p99_ms / alone_p.p99_ms.max(1e-9),
            ),
        ]),
        latencies: BTreeMap::from([
            ("trickle alone".to_owned(), alone_p),
            ("trickle while flooded".to_owned(), flooded_p),
            (
                "trickle beside spinning threads".to_owned(),
                contended_p.clone(),
            ),
            ("flood".to_owned(), flood_p),
            // The Submit call alone (its share of the latencies above).
            ("trickle submit alone".to_owned(), submit_of(&alone)),
            (
                "trickle submit while flooded".to_owned(),
                submit_of(&flooded),
            ),
        ]),
        outcomes: flooded.outcomes.clone(),
        errors,
        server: usage_over(&flood_spans, wall),
        // The machine's own limit for the ratio: the trickle with no flood,
        // beside one spinning thread per core.
        baselines: BTreeMap::from([(
            "trickle_p99_ms_beside_spinning_threads".to_owned(),
            contended_p.p99_ms,
        )]),
        writes_per_decision: BTreeMap::new(),
    })
}

pub async fn baseline_only(args: &BenchArgs) -> anyhow::Result<Report> {
    let started_at = now_rfc3339();
    let (mut baselines, limits_here) = limits(args, None).await?;
    let sqlite = limits_here[0].1;
    let production = args.production.prepare(args).await?;
    if let Some(p) = &production {
        let measured = limits(args, Some(p)).await;
        p.clean_up().await;
        baselines.extend(measured?.0);
    }
    Ok(Report {
        scenario: "baseline".into(),
        started_at,
        machine: Machine::here(),
        params: json!({ "backend": backend_name(production.as_ref()) }),
        duration_s: args.baseline_time.as_secs_f64(),
        throughput_per_s: sqlite,
        latencies: BTreeMap::new(),
        outcomes: BTreeMap::new(),
        errors: BTreeMap::new(),
        server: ServerUsage::default(),
        baselines,
        ratios: BTreeMap::new(),
        writes_per_decision: BTreeMap::new(),
    })
}
