//! `escalation`: proposals that a route sends to people, each resolved by two
//! approvers (quorum of two). Measures the deciding vote: from the second
//! approver's `Resolve` call to the decision's event on a `Watch` stream,
//! beside the transport floor (gRPC health checks from the same clients,
//! same run).

use std::{
    collections::BTreeMap,
    sync::Arc,
    time::{Duration, Instant},
};

use countersign_proto::{
    client::BearerAuth,
    v1::{
        self, ListEscalationsRequest, PutRouteRequest, ResolveRequest, SubmitRequest,
        escalation_service_client::EscalationServiceClient,
        policy_service_client::PolicyServiceClient,
    },
};
use hdrhistogram::Histogram;
use serde_json::json;
use tokio::sync::Mutex;
use tonic::{service::interceptor::InterceptedService, transport::Channel};

use crate::{
    BenchArgs, EscalationArgs,
    board::Board,
    closed_loop::{errors_of, health_checks},
    production::Production,
    report::{Machine, Percentiles, Report, add_counts},
    scenario::{backend_name, channel, limits, now_rfc3339, proposals, seed, spec, usage_between},
    server::Server,
};

type Escalations = EscalationServiceClient<InterceptedService<Channel, BearerAuth>>;

/// The route every proposal of the run matches.
const ROUTE: &str = "bench-quorum";
/// How long the run waits for the proposals to escalate, and for one decision.
const PATIENCE: Duration = Duration::from_secs(120);

pub async fn escalation(args: &BenchArgs, load: &EscalationArgs) -> anyhow::Result<Report> {
    args.production
        .run(args, |production| escalation_on(args, load, production))
        .await
}

/// What one resolving client measured.
struct Measured {
    first_vote: Histogram<u64>,
    deciding_vote: Histogram<u64>,
    resolution: Histogram<u64>,
    outcomes: BTreeMap<String, u64>,
}

impl Measured {
    fn new() -> Measured {
        Measured {
            first_vote: Histogram::new(3).expect("histogram"),
            deciding_vote: Histogram::new(3).expect("histogram"),
            resolution: Histogram::new(3).expect("histogram"),
            outcomes: BTreeMap::new(),
        }
    }

    fn count(&mut self, outcome: impl Into<String>) {
        *self.outcomes.entry(outcome.into()).or_default() += 1;
    }

    fn add(&mut self, other: Measured) {
        let _ = self.first_vote.add(&other.first_vote);
        let _ = self.deciding_vote.add(&other.deciding_vote);
        let _ = self.resolution.add(&other.resolution);
        add_counts(&mut self.outcomes, "", &other.outcomes);
    }
}

async fn escalation_on(
    args: &BenchArgs,
    load: &EscalationArgs,
    production: Option<Production>,
) -> anyhow::Result<Report> {
    let started_at = now_rfc3339();
    let backend = backend_name(production.as_ref());
    let (baselines, _) = limits(args, production.as_ref()).await?;
    let server = Server::start_on(args, production)?;
    // One target per proposal: no escalated proposal waits on another's target.
    let key = seed(&server, "default", load.proposals.max(1)).await?;
    let admin = server.admin(&[
        "admin", "key", "create", "--tenant", "default", "--role", "admin",
    ])?;
    let mut approvers = Vec::new();
    for person in ["approver-1@bench.example", "approver-2@bench.example"] {
        approvers.push(server.admin(&[
            "admin", "key", "create", "--tenant", "default", "--role", "oncall", "--person", person,
        ])?);
    }

    let mut policy = PolicyServiceClient::with_interceptor(
        channel(&server.endpoint).await?,
        BearerAuth::new(&admin)?,
    );
    policy
        .put_route(PutRouteRequest {
            route: Some(v1::Route {
                id: ROUTE.into(),
                r#match: Some(v1::RouteMatch {
                    actions: vec!["bench_*".into()],
                    ..Default::default()
                }),
                approvals_required: 2,
                ..Default::default()
            }),
        })
        .await?;

    // Submit every proposal, then wait until all of them wait for people.
    let mut submitter = proposals(&server.endpoint, &key).await?;
    let mut ids = Vec::new();
    for n in 0..load.proposals {
        let proposal = submitter
            .submit(SubmitRequest {
                spec: Some(spec(n, false, load.proposals.max(1))),
                ..Default::default()
            })
            .await?
            .into_inner()
            .proposal
            .ok_or_else(|| anyhow::anyhow!("Submit answered without a proposal"))?;
        ids.push(proposal.id);
    }
    let mut inbox = escalations(&server.endpoint, &approvers[0]).await?;
    let deadline = Instant::now() + PATIENCE;
    loop {
        let open = count_open(&mut inbox).await?;
        if open >= load.proposals {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "only {open} of {} proposals escalated within {PATIENCE:?}",
            load.proposals
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Resolve: each client takes the next proposal, the first approver votes,
    // then the second, whose vote decides; the clock runs from the deciding
    // call until the decision arrives on the Watch stream.
    let board = Board::open(&server.endpoint, &key).await?;
    let queue = Arc::new(Mutex::new(ids));
    let measured = Arc::new(Mutex::new(Measured::new()));
    let before = server.usage();
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..load.clients.max(1) {
        let mut first = escalations(&server.endpoint, &approvers[0]).await?;
        let mut second = escalations(&server.endpoint, &approvers[1]).await?;
        let (queue, measured, board) = (queue.clone(), measured.clone(), board.clone());
        tasks.spawn(async move {
            let mut mine = Measured::new();
            while let Some(id) = queue.lock().await.pop() {
                resolve_one(&mut first, &mut second, &board, &id, &mut mine).await;
            }
            measured.lock().await.add(mine);
        });
    }
    while tasks.join_next().await.is_some() {}
    let wall = started.elapsed();
    let server_usage = usage_between(before, server.usage(), wall);
    let measured = Arc::try_unwrap(measured)
        .map_err(|_| anyhow::anyhow!("a resolving client outlived the run"))?
        .into_inner();

    let floor = health_checks(&server, load.clients, load.clients, load.proposals * 2).await?;
    let floor_latency = Percentiles::of(&floor.latency);
    let resolution = Percentiles::of(&measured.resolution);
    let approved = measured
        .outcomes
        .get("approved")
        .copied()
        .unwrap_or_default();
    let mut errors = errors_of(&measured.outcomes);
    add_counts(&mut errors, "health check: ", &errors_of(&floor.outcomes));
    let floor_rate = floor.rate_of("served");
    let mut baselines = baselines;
    baselines.insert("grpc_health_checks_per_s".to_owned(), floor_rate);
    baselines.insert("grpc_health_check_p99_ms".to_owned(), floor_latency.p99_ms);
    Ok(Report {
        scenario: "escalation".into(),
        started_at,
        machine: Machine::here(),
        params: json!({
            "proposals": load.proposals, "clients": load.clients, "reviewers": args.reviewers,
            "approvals_required": 2, "backend": backend,
            "resolution_p99_target_ms": 20,
        }),
        duration_s: wall.as_secs_f64(),
        throughput_per_s: approved as f64 / wall.as_secs_f64().max(1e-9),
        latencies: BTreeMap::from([
            (
                "first vote (Resolve)".to_owned(),
                Percentiles::of(&measured.first_vote),
            ),
            (
                "deciding vote (Resolve)".to_owned(),
                Percentiles::of(&measured.deciding_vote),
            ),
            (
                "resolution (deciding Resolve -> decision on Watch)".to_owned(),
                resolution.clone(),
            ),
            ("health check (floor)".to_owned(), floor_latency.clone()),
        ]),
        outcomes: measured.outcomes,
        errors,
        server: server_usage,
        baselines,
        ratios: BTreeMap::from([
            (
                "resolution_p99_ms / 20 ms target".to_owned(),
                resolution.p99_ms / 20.0,
            ),
            (
                "resolution_p99_ms / health_check_p99_ms".to_owned(),
                resolution.p99_ms / floor_latency.p99_ms.max(1e-3),
            ),
        ]),
        writes_per_decision: BTreeMap::new(),
    })
}

async fn escalations(endpoint: &str, key: &str) -> anyhow::Result<Escalations> {
    Ok(EscalationServiceClient::with_interceptor(
        channel(endpoint).await?,
        BearerAuth::new(key)?,
    ))
}

/// Open escalations, counted page by page.
async fn count_open(client: &mut Escalations) -> anyhow::Result<u64> {
    let (mut open, mut page_token) = (0, String::new());
    loop {
        let page = client
            .list_escalations(ListEscalationsRequest {
                page_size: 1000,
                page_token,
                ..Default::default()
            })
            .await?
            .into_inner();
        open += page.escalations.len() as u64;
        if page.next_page_token.is_empty() {
            return Ok(open);
        }
        page_token = page.next_page_token;
    }
}

/// Two approvals of one proposal; the outcome counted by the decision's state
/// as the Watch stream delivered it.
async fn resolve_one(
    first: &mut Escalations,
    second: &mut Escalations,
    board: &Board,
    id: &str,
    measured: &mut Measured,
) {
    let approve = |comment: &str| ResolveRequest {
        proposal_id: id.to_owned(),
        verdict: v1::Verdict::Approve as i32,
        comment: comment.to_owned(),
    };
    let t = Instant::now();
    match first.resolve(approve("first look")).await {
        Ok(_) => {
            let _ = measured.first_vote.record(micros(t));
        }
        Err(status) => return measured.count(format!("error {:?}", status.code())),
    }
    let t = Instant::now();
    match second.resolve(approve("second look")).await {
        Ok(_) => {
            let _ = measured.deciding_vote.record(micros(t));
        }
        Err(status) => return measured.count(format!("error {:?}", status.code())),
    }
    match board.decision(id, PATIENCE).await {
        Some(p) if p.state == v1::ProposalState::Approved as i32 => {
            let _ = measured.resolution.record(micros(t));
            measured.count("approved");
        }
        Some(p) => measured.count(format!(
            "error decided {}",
            v1::ProposalState::try_from(p.state)
                .map(|s| s.as_str_name())
                .unwrap_or("unknown")
        )),
        None => measured.count("error no decision on Watch"),
    }
}

fn micros(since: Instant) -> u64 {
    (since.elapsed().as_micros() as u64).max(1)
}
