//! `countersign admin …`: tenants, keys and tenant policy, straight on the
//! configured database (no server needed).

use std::time::Duration;

use clap::Subcommand;
use countersign_domain::Role;
use countersign_store::{NewApiKey, Tenant, TenantPolicy};

use crate::{output, settings::StoreArgs};

#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// Tenants and their review policy.
    Tenant {
        #[command(subcommand)]
        command: TenantCommand,
    },
    /// API keys.
    Key {
        #[command(subcommand)]
        command: KeyCommand,
    },
    /// Operator breakers.
    Breaker {
        #[command(subcommand)]
        command: BreakerCommand,
    },
    /// The key that signs the decision log's checkpoints.
    SigningKey {
        #[command(flatten)]
        signing: crate::signing::SigningArgs,
        #[command(subcommand)]
        command: SigningKeyCommand,
    },
}

#[derive(Debug, Subcommand)]
pub enum SigningKeyCommand {
    /// Print the public key (hex) that verifies checkpoints (the key `serve`
    /// signs with; this command never creates one).
    Show,
}

#[derive(Debug, Subcommand)]
pub enum TenantCommand {
    /// Create a tenant.
    Create { name: String },
    /// List tenants.
    List,
    /// Show a tenant and its policy.
    Show { name: String },
    /// Change a tenant's review policy.
    Set {
        name: String,
        /// How long an approval blocks overlapping operations (e.g. `10m`).
        #[arg(long, value_parser = humantime::parse_duration)]
        parallel_window: Option<Duration>,
        /// Whether `force_approve_no_sop` may stand in for a missing SOP.
        #[arg(long, action = clap::ArgAction::Set)]
        allow_force_approve_no_sop: Option<bool>,
        /// Rejections of one operator within the breaker window that open
        /// their breaker (0: never).
        #[arg(long)]
        breaker_threshold: Option<u32>,
        /// The breaker's window (e.g. `5m`).
        #[arg(long, value_parser = humantime::parse_duration)]
        breaker_window: Option<Duration>,
        /// How long an approval's signed receipt lets the operation run
        /// after the decision (1s to 24h; default 15m).
        #[arg(long, value_parser = humantime::parse_duration)]
        receipt_ttl: Option<Duration>,
    },
}

#[derive(Debug, Subcommand)]
pub enum BreakerCommand {
    /// Close an operator's breaker now: their next submission is reviewed.
    Reset {
        #[arg(long)]
        tenant: String,
        #[arg(long)]
        operator: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum KeyCommand {
    /// Mint a key; prints the key alone on stdout, once.
    Create {
        #[arg(long)]
        tenant: String,
        #[arg(long, value_parser = parse_role)]
        role: Role,
        /// An automated caller: gets terse refusals, never the diagnostic reason.
        #[arg(long)]
        agent: bool,
        /// A label, recorded as `submitted_by`.
        #[arg(long, default_value = "")]
        name: String,
        /// The person the key belongs to, e.g. `ann@example.com` (for an
        /// `--agent` key: the person the agent acts for). Only keys with a
        /// person may resolve escalations, and never their own person's.
        #[arg(long)]
        person: Option<String>,
    },
    /// List keys (never their secrets).
    List {
        #[arg(long)]
        tenant: Option<String>,
    },
    /// Revoke a key by id.
    Revoke { id: String },
}

fn parse_role(s: &str) -> Result<Role, String> {
    s.parse()
        .map_err(|e: countersign_domain::names::UnknownName| e.to_string())
}

fn print_tenant(tenant: &Tenant) {
    println!("tenant                      {}", tenant.name);
    println!(
        "created                     {}",
        output::time(tenant.created_at)
    );
    println!(
        "parallel window             {}",
        humantime::format_duration(Duration::from_millis(
            tenant.policy.parallel_window_ms as u64
        ))
    );
    println!(
        "allow force_approve_no_sop  {}",
        tenant.policy.allow_force_approve_no_sop
    );
    println!(
        "breaker                     {} rejections in {}",
        tenant.policy.breaker_threshold,
        humantime::format_duration(Duration::from_millis(
            tenant.policy.breaker_window_ms as u64
        ))
    );
    println!(
        "receipts valid for          {}",
        humantime::format_duration(Duration::from_millis(tenant.policy.receipt_ttl_ms as u64))
    );
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

pub async fn run(store_args: &StoreArgs, command: AdminCommand) -> anyhow::Result<()> {
    if let AdminCommand::SigningKey {
        signing,
        command: SigningKeyCommand::Show,
    } = &command
    {
        // No database needed: the key is configuration. It is only read:
        // `serve` creates it, beside the database it signs for.
        let key_dir = store_args.key_dir()?;
        let key = signing.read(&key_dir)?.ok_or_else(|| {
            let path = signing.file(&key_dir).unwrap_or_default();
            anyhow::anyhow!(
                "no signing key at {}: `countersign serve` creates it on its first start \
                 with this database, or give it as --signing-key / COUNTERSIGN_SIGNING_KEY",
                path.display()
            )
        })?;
        println!("{}", key.public_hex());
        return Ok(());
    }
    let store = store_args.open().await?;
    match command {
        // Answered above, without the database.
        AdminCommand::SigningKey { .. } => {}
        AdminCommand::Tenant { command } => match command {
            TenantCommand::Create { name } => {
                let tenant = store.create_tenant(&name).await?;
                println!("{}", tenant.name);
            }
            TenantCommand::List => {
                for tenant in store.list_tenants().await? {
                    println!("{}", tenant.name);
                }
            }
            TenantCommand::Show { name } => {
                let tenant = store
                    .get_tenant(&name)
                    .await?
                    .ok_or_else(|| anyhow::anyhow!("tenant `{name}` not found"))?;
                print_tenant(&tenant);
            }
            TenantCommand::Set {
                name,
                parallel_window,
                allow_force_approve_no_sop,
                breaker_threshold,
                breaker_window,
                receipt_ttl,
            } => {
                let current = store
                    .get_tenant(&name)
                    .await?
                    .ok_or_else(|| anyhow::anyhow!("tenant `{name}` not found"))?;
                let policy = TenantPolicy {
                    parallel_window_ms: parallel_window
                        .map(millis)
                        .unwrap_or(current.policy.parallel_window_ms),
                    allow_force_approve_no_sop: allow_force_approve_no_sop
                        .unwrap_or(current.policy.allow_force_approve_no_sop),
                    breaker_threshold: breaker_threshold
                        .unwrap_or(current.policy.breaker_threshold),
                    breaker_window_ms: breaker_window
                        .map(millis)
                        .unwrap_or(current.policy.breaker_window_ms),
                    receipt_ttl_ms: receipt_ttl
                        .map(millis)
                        .unwrap_or(current.policy.receipt_ttl_ms),
                };
                print_tenant(&store.set_tenant_policy(&name, policy).await?);
            }
        },
        AdminCommand::Breaker {
            command: BreakerCommand::Reset { tenant, operator },
        } => {
            store.reset_breaker(&tenant, &operator).await?;
            println!("breaker of {operator} in {tenant} reset");
        }
        AdminCommand::Key { command } => match command {
            KeyCommand::Create {
                tenant,
                role,
                agent,
                name,
                person,
            } => {
                let (record, key) = store
                    .create_api_key(NewApiKey {
                        tenant,
                        name,
                        role,
                        agent,
                        person,
                    })
                    .await?;
                tracing::info!(key_id = %record.id, "key created");
                println!("{key}");
            }
            KeyCommand::List { tenant } => {
                println!(
                    "{:<18} {:<16} {:<24} {:<12} {:<6} {:<28} {:<25} revoked",
                    "id", "tenant", "name", "role", "agent", "person", "created"
                );
                for key in store.list_api_keys(tenant.as_deref()).await? {
                    println!(
                        "{:<18} {:<16} {:<24} {:<12} {:<6} {:<28} {:<25} {}",
                        key.id,
                        key.tenant,
                        key.name,
                        key.role,
                        key.agent,
                        key.person.as_deref().unwrap_or("-"),
                        output::time(key.created_at),
                        key.revoked_at
                            .map(output::time)
                            .unwrap_or_else(|| "-".into())
                    );
                }
            }
            KeyCommand::Revoke { id } => {
                let key = store.revoke_api_key(&id).await?;
                println!("revoked {} ({}, tenant {})", key.id, key.name, key.tenant);
            }
        },
    }
    Ok(())
}
