//! The command line: `serve`, `migrate`, `admin …` and the client commands.

use std::{net::SocketAddr, num::NonZeroU32, time::Duration};

use clap::{Parser, Subcommand};

use crate::{
    admin::AdminCommand,
    client::{ClientArgs, ClientCommand},
    settings::StoreArgs,
    telemetry::LogFormat,
};

#[derive(Debug, Parser)]
#[command(
    name = "countersign",
    version,
    about = "The second signature on every mutating operation automation proposes."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

// Parsed once per process; the size of a variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the gRPC API.
    Serve(ServeArgs),
    /// Bring the database schema up to date, then exit.
    Migrate {
        #[command(flatten)]
        store: StoreArgs,
        #[command(flatten)]
        owner: crate::migrate::MigrateArgs,
    },
    /// Tenants, keys and policy, directly on the database.
    Admin {
        #[command(flatten)]
        store: StoreArgs,
        #[command(subcommand)]
        command: AdminCommand,
    },
    /// Measure the service against this machine's own limits (see BENCHMARKS.md).
    Bench(countersign_bench::BenchArgs),
    #[command(flatten)]
    Client(ClientCommandWithArgs),
}

/// Client commands carry the connection flags alongside their own.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum ClientCommandWithArgs {
    /// Submit a proposal for review.
    Submit {
        #[command(flatten)]
        conn: ClientArgs,
        #[command(flatten)]
        spec: crate::spec_input::SpecArgs,
    },
    /// Show one proposal.
    Get {
        #[command(flatten)]
        conn: ClientArgs,
        id: String,
    },
    /// Cancel a pending or reviewing proposal.
    Cancel {
        #[command(flatten)]
        conn: ClientArgs,
        id: String,
        #[arg(long, default_value = "")]
        reason: String,
    },
    /// Wait for a proposal's decision (exit 0 approved, 3 otherwise).
    Await {
        #[command(flatten)]
        conn: ClientArgs,
        id: String,
        /// How long to wait.
        #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
        timeout: Duration,
    },
    /// Follow the tenant's review stream (resumes by itself after a disconnect).
    Watch {
        #[command(flatten)]
        conn: ClientArgs,
        #[command(flatten)]
        args: crate::watch::WatchArgs,
    },
    /// SOPs: put, get, list, retire.
    Sop {
        #[command(flatten)]
        conn: ClientArgs,
        #[command(subcommand)]
        command: crate::reference::SopCommand,
    },
    /// Targets: put, get, list.
    Target {
        #[command(flatten)]
        conn: ClientArgs,
        #[command(subcommand)]
        command: crate::reference::TargetCommand,
    },
    /// The decision log, newest first (auditor or admin).
    Decisions {
        #[command(flatten)]
        conn: ClientArgs,
        #[command(flatten)]
        args: crate::audit::DecisionsArgs,
    },
    /// Verify the decision log: on the server, or offline from an export.
    Verify {
        #[command(flatten)]
        conn: ClientArgs,
        #[command(flatten)]
        args: crate::audit::VerifyArgs,
    },
    /// Print the newest signed checkpoint of the log as JSON.
    Checkpoint {
        #[command(flatten)]
        conn: ClientArgs,
        /// Sign one of the log as it is now.
        #[arg(long)]
        refresh: bool,
    },
}

impl Command {
    pub fn is_server(&self) -> bool {
        matches!(self, Command::Serve(_) | Command::Migrate { .. })
    }
}

impl Cli {
    /// How log lines are written (`serve` has the flag; other commands write text).
    pub fn log_format(&self) -> LogFormat {
        match &self.command {
            Command::Serve(args) => args.log_format,
            _ => LogFormat::Text,
        }
    }
}

#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    #[command(flatten)]
    pub backends: crate::backends::BackendArgs,
    /// Address the gRPC API listens on (port 0 picks a free one).
    #[arg(long, env = "COUNTERSIGN_LISTEN", default_value = "127.0.0.1:50051")]
    pub listen: SocketAddr,
    /// Sustained requests per second allowed per tenant.
    #[arg(
        long,
        env = "COUNTERSIGN_RATE_LIMIT_PER_SECOND",
        default_value = "5000"
    )]
    pub rate_limit_per_second: NonZeroU32,
    /// Requests a tenant may burst above the sustained rate.
    #[arg(long, env = "COUNTERSIGN_RATE_LIMIT_BURST", default_value = "10000")]
    pub rate_limit_burst: NonZeroU32,
    /// Deadline for ordinary calls (e.g. `30s`).
    #[arg(long, env = "COUNTERSIGN_REQUEST_TIMEOUT", default_value = "30s", value_parser = humantime::parse_duration)]
    pub request_timeout: Duration,
    /// How long a credential or tenant read from the database is reused; a
    /// revoked key stops working within it (`0s` = read every call).
    #[arg(long, env = "COUNTERSIGN_CREDENTIAL_CACHE_TTL", default_value = "1s", value_parser = humantime::parse_duration)]
    pub credential_cache_ttl: Duration,
    /// An idle `Watch` stream gets a heartbeat at least this often.
    #[arg(long, env = "COUNTERSIGN_WATCH_HEARTBEAT", default_value = "15s", value_parser = humantime::parse_duration)]
    pub watch_heartbeat: Duration,
    /// Notifications queued for one watcher before it is cut off as too slow.
    #[arg(long, env = "COUNTERSIGN_WATCH_BUFFER", default_value = "1024")]
    pub watch_buffer: usize,
    /// How long events are kept for watchers to resume from (e.g. `7d`).
    #[arg(long, env = "COUNTERSIGN_EVENT_RETENTION", default_value = "7d", value_parser = humantime::parse_duration)]
    pub event_retention: Duration,
    /// Rejections kept to answer identical retries at once.
    #[arg(
        long,
        env = "COUNTERSIGN_SUPPRESSION_CAPACITY",
        default_value = "10000"
    )]
    pub suppression_capacity: u64,
    /// How long a rejection answers identical retries (e.g. `10m`).
    #[arg(long, env = "COUNTERSIGN_SUPPRESSION_TTL", default_value = "10m", value_parser = humantime::parse_duration)]
    pub suppression_ttl: Duration,
    /// What this process runs: the API and the reviewers, or one of them.
    #[arg(long, env = "COUNTERSIGN_ROLE", value_enum, default_value_t = Role::All)]
    pub role: Role,
    /// Reviewer workers in this process (default: one per core).
    #[arg(long, env = "COUNTERSIGN_REVIEWERS")]
    pub reviewers: Option<usize>,
    /// From REVIEWING to decision; past it a proposal is TIMED_OUT.
    #[arg(long, env = "COUNTERSIGN_REVIEW_DEADLINE", default_value = "60s", value_parser = humantime::parse_duration)]
    pub review_deadline: Duration,
    /// Review attempts before a proposal is REJECTED "review failed".
    #[arg(long, env = "COUNTERSIGN_REVIEW_ATTEMPTS", default_value = "3")]
    pub review_attempts: u32,
    /// How long a worker holds a proposal before another may reclaim it.
    #[arg(long, env = "COUNTERSIGN_REVIEW_LEASE", default_value = "30s", value_parser = humantime::parse_duration)]
    pub review_lease: Duration,
    /// How often every grown decision log gets a signed checkpoint.
    #[arg(long, env = "COUNTERSIGN_CHECKPOINT_EVERY", default_value = "10m", value_parser = humantime::parse_duration)]
    pub checkpoint_every: Duration,
    #[command(flatten)]
    pub signing: crate::signing::SigningArgs,
    /// How log lines are written on stderr: `text` or `json` (one object per line).
    #[arg(long, env = "COUNTERSIGN_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// After SIGTERM/SIGINT: how long in-flight calls and reviews may take to
    /// finish; then the process exits anyway (unfinished reviews keep their
    /// lease, which expires and is reclaimed).
    #[arg(long, env = "COUNTERSIGN_SHUTDOWN_GRACE", default_value = "30s", value_parser = humantime::parse_duration)]
    pub shutdown_grace: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Role {
    /// API and reviewers.
    All,
    /// The gRPC API only.
    Api,
    /// Reviewer workers only.
    Worker,
}

pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(args) => crate::serve::run(args).await,
        Command::Migrate { store, owner } => {
            let migrated = crate::migrate::run(&store, &owner).await?;
            println!("migrations applied to {migrated}");
            Ok(())
        }
        Command::Admin { store, command } => crate::admin::run(&store, command).await,
        Command::Bench(args) => countersign_bench::run(args).await.map(|_| ()),
        Command::Client(command) => {
            let (conn, command) = match command {
                ClientCommandWithArgs::Submit { conn, spec } => (conn, ClientCommand::Submit(spec)),
                ClientCommandWithArgs::Get { conn, id } => (conn, ClientCommand::Get { id }),
                ClientCommandWithArgs::Cancel { conn, id, reason } => {
                    (conn, ClientCommand::Cancel { id, reason })
                }
                ClientCommandWithArgs::Await { conn, id, timeout } => {
                    (conn, ClientCommand::Await { id, timeout })
                }
                ClientCommandWithArgs::Watch { conn, args } => {
                    return crate::watch::run(&conn, args).await;
                }
                ClientCommandWithArgs::Sop { conn, command } => {
                    return crate::reference::run_sop(&conn, command).await;
                }
                ClientCommandWithArgs::Target { conn, command } => {
                    return crate::reference::run_target(&conn, command).await;
                }
                ClientCommandWithArgs::Decisions { conn, args } => {
                    return crate::audit::run_decisions(&conn, args).await;
                }
                ClientCommandWithArgs::Verify { conn, args } => {
                    return crate::audit::run_verify(&conn, args).await;
                }
                ClientCommandWithArgs::Checkpoint { conn, refresh } => {
                    return crate::audit::run_checkpoint(&conn, refresh).await;
                }
            };
            crate::client::run(&conn, command).await
        }
    }
}
