//! `countersign sop …` and `countersign target …`.

use std::{collections::BTreeMap, path::PathBuf};

use anyhow::Context;
use clap::Subcommand;
use countersign_proto::{
    convert::MAX_PAGE_SIZE,
    v1::{
        self, GetSopRequest, GetTargetRequest, ListSopsRequest, ListTargetsRequest, PutSopRequest,
        PutTargetRequest, RetireSopRequest, sop_service_client::SopServiceClient,
        target_service_client::TargetServiceClient,
    },
};
use serde::Deserialize;
use serde_json::json;

use crate::{client::ClientArgs, output::enum_short};

#[derive(Debug, Subcommand)]
pub enum SopCommand {
    /// Create or replace an SOP from a YAML file (each put bumps its version).
    Put {
        #[arg(long, short = 'f')]
        file: PathBuf,
    },
    Get {
        id: String,
    },
    List {
        /// Include retired SOPs.
        #[arg(long)]
        all: bool,
    },
    /// Retire an SOP: it no longer covers anything.
    Retire {
        id: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum TargetCommand {
    /// Create or replace a target.
    Put {
        id: String,
        /// online, offline, restart_loop or maintenance.
        #[arg(long)]
        status: String,
        /// A label `key=value` (e.g. `cluster=eu-1`).
        #[arg(long = "label", value_name = "KEY=VALUE")]
        labels: Vec<String>,
    },
    Get {
        id: String,
    },
    List,
}

/// The file form of an SOP.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SopFile {
    id: String,
    action: String,
    title: String,
    #[serde(default)]
    covers: String,
    #[serde(default)]
    rollback_path: String,
    max_blast_radius: String,
    #[serde(default)]
    selector: BTreeMap<String, String>,
}

fn sop_json(s: &v1::Sop) -> serde_json::Value {
    json!({
        "id": s.id, "action": s.action, "title": s.title, "covers": s.covers,
        "rollback_path": s.rollback_path,
        "max_blast_radius": enum_short(v1::BlastRadius::try_from(s.max_blast_radius).map(|b| b.as_str_name()), "BLAST_RADIUS_"),
        "selector": s.selector, "version": s.version, "retired": s.retired,
    })
}

fn sop_line(s: &v1::Sop) -> String {
    let mut selector: Vec<String> = s.selector.iter().map(|(k, v)| format!("{k}={v}")).collect();
    selector.sort();
    format!(
        "{:<12} v{:<3} {:<24} max {:<13} {}{}  {}",
        s.id,
        s.version,
        s.action,
        enum_short(
            v1::BlastRadius::try_from(s.max_blast_radius).map(|b| b.as_str_name()),
            "BLAST_RADIUS_"
        ),
        if selector.is_empty() {
            "*".to_owned()
        } else {
            selector.join(",")
        },
        if s.retired { "  (retired)" } else { "" },
        s.title,
    )
}

fn target_json(t: &v1::Target) -> serde_json::Value {
    json!({
        "id": t.id,
        "status": enum_short(v1::TargetStatus::try_from(t.status).map(|s| s.as_str_name()), "TARGET_STATUS_"),
        "labels": t.labels,
    })
}

fn target_line(t: &v1::Target) -> String {
    let mut labels: Vec<String> = t.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    labels.sort();
    format!(
        "{:<24} {:<13} {}",
        t.id,
        enum_short(
            v1::TargetStatus::try_from(t.status).map(|s| s.as_str_name()),
            "TARGET_STATUS_"
        ),
        labels.join(",")
    )
}

fn print<T>(
    conn: &ClientArgs,
    items: &[T],
    json: fn(&T) -> serde_json::Value,
    line: fn(&T) -> String,
) {
    for item in items {
        if conn.json {
            println!("{}", json(item));
        } else {
            println!("{}", line(item));
        }
    }
}

pub async fn run_sop(conn: &ClientArgs, command: SopCommand) -> anyhow::Result<()> {
    let (channel, auth) = conn.channel().await?;
    let mut client = SopServiceClient::with_interceptor(channel, auth);
    let sops = match command {
        SopCommand::Put { file } => {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("reading {}", file.display()))?;
            let f: SopFile = serde_yaml_ng::from_str(&text)
                .with_context(|| format!("parsing {}", file.display()))?;
            let sop = v1::Sop {
                id: f.id,
                action: f.action,
                title: f.title,
                covers: f.covers,
                rollback_path: f.rollback_path,
                max_blast_radius: crate::spec_input::blast_radius_value(&f.max_blast_radius)?,
                selector: f.selector.into_iter().collect(),
                ..Default::default()
            };
            vec![
                client
                    .put_sop(PutSopRequest { sop: Some(sop) })
                    .await?
                    .into_inner(),
            ]
        }
        SopCommand::Get { id } => vec![client.get_sop(GetSopRequest { id }).await?.into_inner()],
        SopCommand::List { all } => {
            // Every page, to the end.
            let mut sops = Vec::new();
            let mut page_token = String::new();
            loop {
                let page = client
                    .list_sops(ListSopsRequest {
                        include_retired: all,
                        page_size: MAX_PAGE_SIZE,
                        page_token,
                    })
                    .await?
                    .into_inner();
                sops.extend(page.sops);
                if page.next_page_token.is_empty() {
                    break sops;
                }
                page_token = page.next_page_token;
            }
        }
        SopCommand::Retire { id } => {
            vec![
                client
                    .retire_sop(RetireSopRequest { id })
                    .await?
                    .into_inner(),
            ]
        }
    };
    print(conn, &sops, sop_json, sop_line);
    Ok(())
}

pub async fn run_target(conn: &ClientArgs, command: TargetCommand) -> anyhow::Result<()> {
    let (channel, auth) = conn.channel().await?;
    let mut client = TargetServiceClient::with_interceptor(channel, auth);
    let targets = match command {
        TargetCommand::Put { id, status, labels } => {
            let status = crate::spec_input::wire_enum(
                &status,
                "TARGET_STATUS_",
                v1::TargetStatus::from_str_name,
                ("status", "online, offline, restart_loop or maintenance"),
            )?;
            let labels = labels
                .iter()
                .map(|pair| crate::spec_input::key_value(pair, "label"))
                .collect::<anyhow::Result<_>>()?;
            let target = v1::Target {
                id,
                status,
                labels,
                updated_at: None,
            };
            vec![
                client
                    .put_target(PutTargetRequest {
                        target: Some(target),
                    })
                    .await?
                    .into_inner(),
            ]
        }
        TargetCommand::Get { id } => {
            vec![
                client
                    .get_target(GetTargetRequest { id })
                    .await?
                    .into_inner(),
            ]
        }
        TargetCommand::List => {
            // Every page, to the end.
            let mut targets = Vec::new();
            let mut page_token = String::new();
            loop {
                let page = client
                    .list_targets(ListTargetsRequest {
                        page_size: MAX_PAGE_SIZE,
                        page_token,
                    })
                    .await?
                    .into_inner();
                targets.extend(page.targets);
                if page.next_page_token.is_empty() {
                    break targets;
                }
                page_token = page.next_page_token;
            }
        }
    };
    print(conn, &targets, target_json, target_line);
    Ok(())
}
