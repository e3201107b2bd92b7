//! The command line: `serve`, `migrate`, `admin …` and the client commands.

use std::time::Duration;

use clap::{Parser, Subcommand};
use countersign_proto::v1::{self, Verdict};

use crate::{
    admin::AdminCommand,
    client::{ClientArgs, ClientCommand},
    settings::StoreArgs,
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
    /// Run the gRPC API and/or the reviewers (see README.md, Configuration).
    Serve(ServeArgs),
    /// The server's configuration.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
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
    /// Decision receipts, checked offline.
    Receipt {
        #[command(subcommand)]
        command: ReceiptCommand,
    },
    #[command(flatten)]
    Client(ClientCommandWithArgs),
}

/// `countersign receipt …`.
#[derive(Debug, Subcommand)]
pub enum ReceiptCommand {
    /// Check an approval's receipt before running the operation: its
    /// signature, that it is an approval and unexpired, and (with --spec,
    /// --tenant) that it is for exactly this spec and tenant. Exit 0 when
    /// the operation may run, 1 otherwise.
    Verify(crate::receipt::VerifyReceiptArgs),
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
    /// Cancel a pending, reviewing or escalated proposal.
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
    /// Escalation routes: put, list, delete (admin).
    Route {
        #[command(flatten)]
        conn: ClientArgs,
        #[command(subcommand)]
        command: crate::policy::PolicyCommand,
    },
    /// Model profiles, which of the server's model endpoints reviews which
    /// proposals: put, list, delete (admin).
    ModelProfile {
        #[command(flatten)]
        conn: ClientArgs,
        #[command(subcommand)]
        command: crate::policy::PolicyCommand,
    },
    /// What waits for you: the open escalations you may still vote on,
    /// oldest first, with how long each has left (`--all`: every open one
    /// of the tenant).
    Inbox {
        #[command(flatten)]
        conn: ClientArgs,
        #[command(flatten)]
        args: crate::inbox::InboxArgs,
    },
    /// Approve an escalated proposal (exit 0 once it is approved, 3 while it
    /// needs more approvals or if it ends otherwise).
    Approve {
        #[command(flatten)]
        conn: ClientArgs,
        id: String,
        #[arg(long, default_value = "")]
        comment: String,
    },
    /// Reject an escalated proposal (exit 0 once it is rejected, 3 otherwise).
    Deny {
        #[command(flatten)]
        conn: ClientArgs,
        id: String,
        #[arg(long, default_value = "")]
        comment: String,
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

pub use crate::config::{Role, ServeArgs};

/// `countersign config …`.
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Print the configuration `serve` would run with (file and environment;
    /// flags aside) as TOML, secrets masked.
    Print {
        /// A TOML configuration file.
        #[arg(long, env = "COUNTERSIGN_CONFIG")]
        config: Option<std::path::PathBuf>,
    },
}

/// Runs a command; logging starts here (`serve` first reads its configuration).
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    use crate::telemetry;
    match cli.command {
        Command::Serve(args) => {
            let config = crate::config::load(&args)?;
            let telemetry = telemetry::init_server(config.log.format)?;
            let result = crate::serve::run(config).await;
            telemetry.shutdown().await;
            result
        }
        Command::Config {
            command: ConfigCommand::Print { config },
        } => {
            telemetry::init(false);
            let config = crate::config::load_file_and_env(config.as_deref())?;
            print!("{}", crate::config::to_masked_toml(&config)?);
            Ok(())
        }
        Command::Migrate { store, owner } => {
            telemetry::init(true);
            let migrated = crate::migrate::run(&store, &owner).await?;
            println!("migrations applied to {migrated}");
            Ok(())
        }
        Command::Receipt {
            command: ReceiptCommand::Verify(args),
        } => {
            telemetry::init(false);
            crate::receipt::verify(&args)
        }
        Command::Admin { store, command } => {
            telemetry::init(false);
            crate::admin::run(&store, command).await
        }
        Command::Client(command) => {
            telemetry::init(false);
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
                ClientCommandWithArgs::Route { conn, command } => {
                    return crate::policy::run::<v1::Route>(&conn, command).await;
                }
                ClientCommandWithArgs::ModelProfile { conn, command } => {
                    return crate::policy::run::<v1::ModelProfile>(&conn, command).await;
                }
                ClientCommandWithArgs::Inbox { conn, args } => {
                    return crate::inbox::run_inbox(&conn, &args).await;
                }
                ClientCommandWithArgs::Approve { conn, id, comment } => {
                    return crate::inbox::run_resolve(&conn, id, Verdict::Approve, comment).await;
                }
                ClientCommandWithArgs::Deny { conn, id, comment } => {
                    return crate::inbox::run_resolve(&conn, id, Verdict::Reject, comment).await;
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
