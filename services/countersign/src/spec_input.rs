//! Building a proposal spec from flags, a YAML/JSON file, or both (flags win).

use std::{collections::BTreeMap, path::PathBuf};

use anyhow::{Context, bail};
use clap::Args;
use countersign_proto::{convert::json_to_struct, v1};
use serde::Deserialize;

#[derive(Debug, Clone, Default, Args)]
pub struct SpecArgs {
    /// A YAML (or JSON) file with the spec's fields; flags override it.
    #[arg(long, short = 'f')]
    pub file: Option<PathBuf>,
    /// e.g. `host_restart_service`.
    #[arg(long)]
    pub action: Option<String>,
    /// write, destructive (read operations are never reviewed).
    #[arg(long)]
    pub class: Option<String>,
    #[arg(long)]
    pub target: Option<String>,
    /// A parameter `key=value`; the value is JSON if it parses, else a string.
    #[arg(long = "param", value_name = "KEY=VALUE")]
    pub params: Vec<String>,
    #[arg(long)]
    pub reason: Option<String>,
    /// single_device, cluster, tenant_wide.
    #[arg(long)]
    pub blast_radius: Option<String>,
    #[arg(long)]
    pub operator: Option<String>,
    #[arg(long)]
    pub context_summary: Option<String>,
    #[arg(long)]
    pub incident_id: Option<String>,
    /// A label `key=value`.
    #[arg(long = "label", value_name = "KEY=VALUE")]
    pub labels: Vec<String>,
    #[arg(long)]
    pub rollback_plan: Option<String>,
    #[arg(long)]
    pub force_approve_no_sop: bool,
    #[arg(long)]
    pub idempotency_key: Option<String>,
    /// Wait for the decision (exit 0 approved, 3 otherwise).
    #[arg(long)]
    pub wait: bool,
    /// With --wait: how long to wait.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub timeout: std::time::Duration,
}

/// The file form of a spec: the contract's field names, enums by short name.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct SpecFile {
    action: String,
    class: Option<String>,
    target: String,
    parameters: serde_json::Map<String, serde_json::Value>,
    reason: String,
    blast_radius: Option<String>,
    operator: String,
    context_summary: String,
    incident_id: String,
    labels: BTreeMap<String, String>,
    rollback_plan: String,
    force_approve_no_sop: bool,
    idempotency_key: String,
}

/// Parses a wire enum by its short name (`cluster`, `single-device`) or its
/// full name (`BLAST_RADIUS_CLUSTER`).
pub fn wire_enum<E: Into<i32>>(
    name: &str,
    prefix: &str,
    from_str_name: fn(&str) -> Option<E>,
    (kind, expected): (&str, &str),
) -> anyhow::Result<i32> {
    let upper = name.to_ascii_uppercase().replace('-', "_");
    let full = if upper.starts_with(prefix) {
        upper
    } else {
        format!("{prefix}{upper}")
    };
    from_str_name(&full)
        .map(Into::into)
        .with_context(|| format!("unknown {kind} `{name}` ({expected})"))
}

pub fn class_value(name: &str) -> anyhow::Result<i32> {
    wire_enum(
        name,
        "OPERATION_CLASS_",
        v1::OperationClass::from_str_name,
        ("class", "write, destructive or read"),
    )
}

pub fn blast_radius_value(name: &str) -> anyhow::Result<i32> {
    wire_enum(
        name,
        "BLAST_RADIUS_",
        v1::BlastRadius::from_str_name,
        ("blast radius", "single_device, cluster or tenant_wide"),
    )
}

pub fn key_value(pair: &str, what: &str) -> anyhow::Result<(String, String)> {
    match pair.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => bail!("{what} `{pair}` must look like key=value"),
    }
}

impl SpecArgs {
    /// The spec a file holds, as `submit -f FILE` submits it.
    pub fn from_file(path: &std::path::Path) -> anyhow::Result<v1::ProposalSpec> {
        SpecArgs {
            file: Some(path.to_owned()),
            ..SpecArgs::default()
        }
        .to_spec()
    }

    pub fn to_spec(&self) -> anyhow::Result<v1::ProposalSpec> {
        let mut file = match &self.file {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading {}", path.display()))?;
                serde_yaml_ng::from_str::<SpecFile>(&text)
                    .with_context(|| format!("parsing {}", path.display()))?
            }
            None => SpecFile::default(),
        };
        let set = |slot: &mut String, flag: &Option<String>| {
            if let Some(v) = flag {
                slot.clone_from(v);
            }
        };
        set(&mut file.action, &self.action);
        set(&mut file.target, &self.target);
        set(&mut file.reason, &self.reason);
        set(&mut file.operator, &self.operator);
        set(&mut file.context_summary, &self.context_summary);
        set(&mut file.incident_id, &self.incident_id);
        set(&mut file.rollback_plan, &self.rollback_plan);
        set(&mut file.idempotency_key, &self.idempotency_key);
        if self.class.is_some() {
            file.class.clone_from(&self.class);
        }
        if self.blast_radius.is_some() {
            file.blast_radius.clone_from(&self.blast_radius);
        }
        file.force_approve_no_sop |= self.force_approve_no_sop;
        for pair in &self.params {
            let (k, v) = key_value(pair, "parameter")?;
            let value = serde_json::from_str(&v).unwrap_or(serde_json::Value::String(v));
            file.parameters.insert(k, value);
        }
        for pair in &self.labels {
            let (k, v) = key_value(pair, "label")?;
            file.labels.insert(k, v);
        }
        Ok(v1::ProposalSpec {
            action: file.action,
            class: file
                .class
                .as_deref()
                .map(class_value)
                .transpose()?
                .unwrap_or(0),
            target: file.target,
            parameters: Some(json_to_struct(&file.parameters)),
            reason: file.reason,
            blast_radius: file
                .blast_radius
                .as_deref()
                .map(blast_radius_value)
                .transpose()?
                .unwrap_or(0),
            operator: file.operator,
            context_summary: file.context_summary,
            incident_id: file.incident_id,
            labels: file.labels.into_iter().collect(),
            rollback_plan: file.rollback_plan,
            force_approve_no_sop: file.force_approve_no_sop,
            idempotency_key: file.idempotency_key,
        })
    }
}
