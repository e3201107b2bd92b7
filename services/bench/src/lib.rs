//! `countersign-bench`: drives the real server (`countersign serve`, started
//! as a child process from the `countersign` binary) with the generated client
//! and prints throughput, latency percentiles, errors by code, server RSS and
//! CPU, beside limits measured on the same machine in the same run. Results
//! also go to a JSON file per run.

mod audit_query;
mod baseline;
mod board;
mod burners;
mod closed_loop;
mod encoded;
mod escalation;
mod growth;
mod model;
mod production;
mod report;
mod rows_floor;
mod scenario;
mod server;
mod suppressed;
mod watch_fanout;
mod writes;

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::Context;
use clap::{Args, Subcommand};

pub use report::Report;

#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub scenario: Scenario,
    /// Where the JSON result of the run is written.
    #[arg(long, global = true, default_value = "bench-results")]
    pub out_dir: PathBuf,
    /// Reviewer workers in the server (default: one per core).
    #[arg(long, global = true)]
    pub reviewers: Option<usize>,
    /// How long to measure each baseline.
    #[arg(long, global = true, default_value = "2s", value_parser = humantime::parse_duration)]
    pub baseline_time: Duration,
    /// The `countersign` binary whose `serve` is measured (default: the one
    /// beside this executable, as `cargo build` leaves them).
    #[arg(long, global = true, env = "COUNTERSIGN_BIN")]
    pub countersign: Option<PathBuf>,
    #[command(flatten)]
    pub production: production::ProductionArgs,
}

impl BenchArgs {
    /// The `countersign` binary to run: `--countersign`, or the one beside
    /// this executable.
    pub fn server_binary(&self) -> anyhow::Result<PathBuf> {
        let binary = match &self.countersign {
            Some(path) => path.clone(),
            None => beside_this_executable("countersign")?,
        };
        if !binary.is_file() {
            anyhow::bail!(
                "no countersign binary at {}: build it first (`cargo build --release` builds it \
                 beside countersign-bench), or name it with --countersign (COUNTERSIGN_BIN)",
                binary.display()
            );
        }
        Ok(binary)
    }
}

fn beside_this_executable(name: &str) -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("locating this executable")?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    Ok(dir.join(format!("{name}{}", std::env::consts::EXE_SUFFIX)))
}

#[derive(Debug, Clone, Subcommand)]
pub enum Scenario {
    /// Submit proposals that pass or fail gates in a set ratio and await each decision.
    SubmitDecide(LoadArgs),
    /// One tenant floods while another submits a trickle; the trickle's latency.
    NoisyNeighbour(NoisyArgs),
    /// Identical resubmissions of a rejected proposal, answered from the cache.
    Suppressed(SuppressedArgs),
    /// K watchers on one tenant while proposals are decided at a set rate.
    WatchFanout(FanoutArgs),
    /// Pages of `ListDecisions` with filters over a large log, and `VerifyLog` of all of it.
    AuditQuery(AuditQueryArgs),
    /// Proposals a route sends to people, each approved by two of them; the
    /// deciding vote's time to the decision on `Watch`.
    Escalation(EscalationArgs),
    /// One tenant's proposals reviewed by a model endpoint answering after a
    /// fixed delay, beside a gate-only tenant's trickle.
    Model(ModelArgs),
    /// Only the machine's baselines (SQLite single-row inserts; with
    /// `--production`, pgbench and redis-benchmark too).
    Baseline,
}

#[derive(Debug, Clone, Args)]
pub struct LoadArgs {
    /// Proposals to decide.
    #[arg(long, default_value = "10000")]
    pub proposals: u64,
    /// Concurrent clients (closed loop: each waits for its decision before the next).
    #[arg(long, default_value = "32")]
    pub clients: u64,
    /// Open loop instead: this many submissions per second, whatever the server does.
    #[arg(long)]
    pub rate: Option<u64>,
    /// The share of proposals built to fail a gate (an unknown target).
    #[arg(long, default_value = "0.2")]
    pub reject_ratio: f64,
    /// Give up on one decision after this long.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub decision_timeout: Duration,
    /// How clients learn decisions: the `Submit` itself (`submit-wait`, the
    /// one call the CLI's `submit --wait` and the SDKs' `submit_and_wait`
    /// make: `wait_for_decision`), one `AwaitDecision` per proposal after
    /// the `Submit`, or one shared `Watch` stream (terminal events only).
    #[arg(long, value_enum, default_value_t = Via::SubmitWait)]
    pub via: Via,
    /// The growth run: measure, write this many decided proposals straight
    /// into a database, measure again, and print the ratio. Embedded, the
    /// grown database is a second server's, and the two servers take turns
    /// in blocks; on PostgreSQL the run's one database grows between the two
    /// measurements.
    #[arg(long)]
    pub growth: Option<u64>,
    /// Proposals decided before each measured run and not counted: a cold
    /// first run measures the start (connections, plan and buffer caches, a
    /// young table's first statistics) as much as the steady state.
    #[arg(long, default_value = "1000")]
    pub warmup: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Via {
    Await,
    Watch,
    SubmitWait,
}

#[derive(Debug, Clone, Args)]
pub struct NoisyArgs {
    /// Concurrent clients of the flooding tenant.
    #[arg(long, default_value = "32")]
    pub flood_clients: u64,
    /// Trickle submissions per second from the quiet tenant.
    #[arg(long, default_value = "20")]
    pub trickle_rate: u64,
    /// How long to run.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// How both tenants' clients learn their decisions: the one call the SDKs
    /// make (`submit-wait`, decided as stored), or `AwaitDecision` after the
    /// `Submit` (queued for the reviewers).
    #[arg(long, value_enum, default_value_t = Via::SubmitWait)]
    pub via: Via,
}

#[derive(Debug, Clone, Args)]
pub struct SuppressedArgs {
    /// Identical resubmissions in all.
    #[arg(long, default_value = "100000")]
    pub submits: u64,
    /// Concurrent clients (closed loop).
    #[arg(long, default_value = "32")]
    pub clients: u64,
    /// HTTP/2 connections the clients share (default: one each).
    #[arg(long)]
    pub connections: Option<u64>,
}

#[derive(Debug, Clone, Args)]
pub struct FanoutArgs {
    /// Watchers, each on its own connection.
    #[arg(long, default_value = "200")]
    pub watchers: u64,
    /// Proposals submitted (and decided) per second.
    #[arg(long, default_value = "500")]
    pub rate: u64,
    /// How long to submit.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// Watch every event, not only decisions.
    #[arg(long)]
    pub all_events: bool,
}

#[derive(Debug, Clone, Args)]
pub struct ModelArgs {
    /// The model tenant's proposals to decide.
    #[arg(long, default_value = "1000")]
    pub proposals: u64,
    /// The model tenant's concurrent clients (closed loop).
    #[arg(long, default_value = "64")]
    pub clients: u64,
    /// How long the fake model endpoint takes to answer each request.
    #[arg(long, default_value = "200ms", value_parser = humantime::parse_duration)]
    pub model_latency: Duration,
    /// The endpoint's `max_concurrency`: requests in flight at most.
    #[arg(long, default_value = "64")]
    pub model_concurrency: usize,
    /// The gate-only tenant's submissions per second.
    #[arg(long, default_value = "20")]
    pub trickle_rate: u64,
    /// How long the gate-only tenant's trickle is measured alone: half
    /// before the loads, half after them.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub trickle_alone: Duration,
    /// Give up on one decision after this long.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub decision_timeout: Duration,
    /// How the model tenant's clients learn their decisions (as
    /// `submit-decide --via`); the default is the one call the SDKs make.
    #[arg(long, value_enum, default_value_t = Via::SubmitWait)]
    pub via: Via,
}

#[derive(Debug, Clone, Args)]
pub struct AuditQueryArgs {
    /// Decisions in the log (seeded straight into the database, chained by the
    /// server's own sequencer).
    #[arg(long, default_value = "1000000")]
    pub decisions: u64,
    /// The small log measured first, for the growth ratio.
    #[arg(long, default_value = "10000")]
    pub small: u64,
    /// Queries per round (each one to four pages).
    #[arg(long, default_value = "2000")]
    pub queries: u64,
    /// Concurrent auditors.
    #[arg(long, default_value = "8")]
    pub clients: u64,
}

#[derive(Debug, Clone, Args)]
pub struct EscalationArgs {
    /// Escalated proposals to resolve (one target each).
    #[arg(long, default_value = "1000")]
    pub proposals: u64,
    /// Concurrent resolving clients, each a pair of approvers.
    #[arg(long, default_value = "8")]
    pub clients: u64,
}

/// Runs one scenario, prints its table and writes its JSON; returns the report.
pub async fn run(args: BenchArgs) -> anyhow::Result<Report> {
    let report = match &args.scenario {
        Scenario::SubmitDecide(load) => scenario::submit_decide(&args, load).await?,
        Scenario::NoisyNeighbour(noisy) => scenario::noisy_neighbour(&args, noisy).await?,
        Scenario::Suppressed(load) => suppressed::suppressed(&args, load).await?,
        Scenario::WatchFanout(fan) => watch_fanout::watch_fanout(&args, fan).await?,
        Scenario::AuditQuery(q) => audit_query::audit_query(&args, q).await?,
        Scenario::Escalation(e) => escalation::escalation(&args, e).await?,
        Scenario::Model(m) => model::model(&args, m).await?,
        Scenario::Baseline => scenario::baseline_only(&args).await?,
    };
    print!("{}", report.table());
    let path = report.write_json(&args.out_dir)?;
    println!("\nresult written to {}", path.display());
    Ok(report)
}
