//! `countersign decisions`, `countersign verify`, `countersign checkpoint`: the
//! decision log for auditors, and its offline verification.

use std::{
    io::{BufRead, Write},
    path::{Path, PathBuf},
};

use anyhow::Context;
use clap::Args;
use countersign_domain::audit::{Checkpoint, Verification, Verifier, leaf_hash};
use countersign_proto::{
    convert::{audit::checkpoint_to_proto, timestamp},
    v1::{
        self, GetCheckpointRequest, ListDecisionsRequest, VerifyLogRequest,
        audit_service_client::AuditServiceClient,
    },
};

use crate::{client::ClientArgs, output};

#[derive(Debug, Clone, Args)]
pub struct DecisionsArgs {
    /// Decided at or after this time (RFC 3339, e.g. `2026-11-30T00:00:00Z`).
    #[arg(long, value_parser = parse_time)]
    pub from: Option<i64>,
    /// Decided before this time (RFC 3339).
    #[arg(long, value_parser = parse_time)]
    pub until: Option<i64>,
    #[arg(long)]
    pub action: Option<String>,
    #[arg(long)]
    pub target: Option<String>,
    #[arg(long)]
    pub operator: Option<String>,
    /// The API key name that submitted the proposal.
    #[arg(long)]
    pub submitted_by: Option<String>,
    /// approve, reject or timed_out.
    #[arg(long)]
    pub outcome: Option<String>,
    /// single_device, cluster or tenant_wide.
    #[arg(long)]
    pub blast_radius: Option<String>,
    #[arg(long)]
    pub sop: Option<String>,
    /// Entries per page (at most 1,000).
    #[arg(long, default_value = "100")]
    pub page_size: u32,
    /// Every page, not just the first (`--all --json` is the export `verify` reads).
    #[arg(long)]
    pub all: bool,
    /// Comma-separated values with a header line, every field quoted; a field
    /// that a spreadsheet would take for a formula starts with `'`.
    #[arg(long, conflicts_with = "json")]
    pub csv: bool,
}

#[derive(Debug, Clone, Args)]
pub struct VerifyArgs {
    /// Verify this export (`countersign decisions --all --json`) offline: no server.
    #[arg(long)]
    pub export: Option<PathBuf>,
    /// Also check the log against this checkpoint (`countersign checkpoint` output).
    #[arg(long)]
    pub checkpoint: Option<PathBuf>,
    /// The public key (hex) the checkpoint must verify under; needed offline
    /// with a checkpoint (`countersign admin signing-key show`).
    #[arg(long)]
    pub public_key: Option<String>,
}

fn parse_time(s: &str) -> Result<i64, String> {
    humantime::parse_rfc3339_weak(s)
        .map_err(|e| format!("{e} (use RFC 3339, e.g. 2026-11-30T00:00:00Z)"))
        .map(|t| {
            t.duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64)
        })
}

fn enum_value(kind: &str, value: &Option<String>) -> anyhow::Result<i32> {
    let Some(value) = value else { return Ok(0) };
    let upper = value.to_ascii_uppercase();
    let found = match kind {
        "outcome" => v1::DecisionOutcome::from_str_name(&format!("DECISION_OUTCOME_{upper}"))
            .map(|v| v as i32),
        _ => v1::BlastRadius::from_str_name(&format!("BLAST_RADIUS_{upper}")).map(|v| v as i32),
    };
    found.ok_or_else(|| anyhow::anyhow!("--{}: unknown value `{value}`", kind.replace('_', "-")))
}

/// The export line of an entry: what `verify --export` reads back. The record
/// is the exact canonical JSON that was hashed, as a string.
fn export_line(entry: &v1::AuditEntry) -> anyhow::Result<String> {
    Ok(serde_json::json!({
        "sequence": entry.sequence,
        "digest": entry.digest,
        "record": entry.record_json,
    })
    .to_string())
}

const CSV_HEADER: [&str; 14] = [
    "sequence",
    "decided_at",
    "proposal_id",
    "action",
    "target",
    "operator",
    "submitted_by",
    "blast_radius",
    "outcome",
    "sop_id",
    "sop_version",
    "missing_gates",
    "reason",
    "digest",
];

/// An entry's decision and its decision time.
fn decided(entry: &v1::AuditEntry) -> (v1::Decision, i64) {
    let d = entry.decision.clone().unwrap_or_default();
    let at = d
        .decided_at
        .as_ref()
        .map(countersign_proto::convert::millis)
        .unwrap_or(0);
    (d, at)
}

/// An entry's CSV fields, in [`CSV_HEADER`]'s order.
fn csv_fields(entry: &v1::AuditEntry) -> [String; 14] {
    let (d, decided) = decided(entry);
    [
        entry.sequence.to_string(),
        output::time(decided),
        entry.proposal_id.clone(),
        entry.action.clone(),
        entry.target.clone(),
        entry.operator.clone(),
        entry.submitted_by.clone(),
        output::enum_short(
            v1::BlastRadius::try_from(entry.blast_radius).map(|v| v.as_str_name()),
            "BLAST_RADIUS_",
        ),
        output::enum_short(
            v1::DecisionOutcome::try_from(d.outcome).map(|v| v.as_str_name()),
            "DECISION_OUTCOME_",
        ),
        d.sop_id.clone(),
        if d.sop_version == 0 {
            String::new()
        } else {
            d.sop_version.to_string()
        },
        d.missing_gates.join(" "),
        d.reason.clone(),
        entry.digest.clone(),
    ]
}

/// Where `decisions` writes entries: lines (text or JSON), or CSV with a
/// header, whose fields come from callers and so are neutralised.
enum Sink<W: Write> {
    Lines { out: W, json: bool },
    Csv(Box<csv::Writer<W>>),
}

impl<W: Write> Sink<W> {
    fn new(out: W, json: bool, csv: bool) -> anyhow::Result<Sink<W>> {
        if !csv {
            return Ok(Sink::Lines { out, json });
        }
        let mut writer = output::csv_writer(out);
        writer.write_record(CSV_HEADER)?;
        Ok(Sink::Csv(Box::new(writer)))
    }

    fn entry(&mut self, entry: &v1::AuditEntry) -> anyhow::Result<()> {
        match self {
            Sink::Lines { out, json: true } => writeln!(out, "{}", export_line(entry)?)?,
            Sink::Lines { out, json: false } => writeln!(out, "{}", text_line(entry))?,
            Sink::Csv(writer) => {
                let fields = csv_fields(entry);
                let cells: Vec<_> = fields.iter().map(|f| output::csv_cell(f)).collect();
                writer.write_record(cells.iter().map(|cell| cell.as_bytes()))?
            }
        }
        Ok(())
    }

    fn flush(&mut self) -> anyhow::Result<()> {
        match self {
            Sink::Lines { out, .. } => out.flush()?,
            Sink::Csv(writer) => writer.flush()?,
        }
        Ok(())
    }
}

fn text_line(entry: &v1::AuditEntry) -> String {
    let (d, decided) = decided(entry);
    let outcome = output::enum_short(
        v1::DecisionOutcome::try_from(d.outcome).map(|v| v.as_str_name()),
        "DECISION_OUTCOME_",
    );
    let mut line = format!(
        "#{:<6} {} {} {} {} → {}",
        entry.sequence,
        output::time(decided),
        entry.proposal_id,
        entry.action,
        entry.target,
        outcome.to_ascii_uppercase(),
    );
    if !d.sop_id.is_empty() {
        line.push_str(&format!(" ({} v{})", d.sop_id, d.sop_version));
    }
    if !d.missing_gates.is_empty() {
        line.push_str(&format!(" missing: {}", d.missing_gates.join(", ")));
    }
    line
}

pub async fn run_decisions(conn: &ClientArgs, args: DecisionsArgs) -> anyhow::Result<()> {
    let (channel, auth) = conn.channel().await?;
    let mut client = AuditServiceClient::with_interceptor(channel, auth);
    let mut request = ListDecisionsRequest {
        decided_from: args.from.map(timestamp),
        decided_until: args.until.map(timestamp),
        action: args.action.clone().unwrap_or_default(),
        target: args.target.clone().unwrap_or_default(),
        operator: args.operator.clone().unwrap_or_default(),
        submitted_by: args.submitted_by.clone().unwrap_or_default(),
        outcome: enum_value("outcome", &args.outcome)?,
        blast_radius: enum_value("blast_radius", &args.blast_radius)?,
        sop_id: args.sop.clone().unwrap_or_default(),
        page_size: args.page_size,
        page_token: String::new(),
    };
    let stdout = std::io::stdout();
    let mut out = Sink::new(std::io::BufWriter::new(stdout.lock()), conn.json, args.csv)?;
    loop {
        let page = client.list_decisions(request.clone()).await?.into_inner();
        for entry in &page.entries {
            out.entry(entry)?;
        }
        if page.next_page_token.is_empty() {
            break;
        }
        if !args.all {
            out.flush()?;
            eprintln!("more: add --all for every page");
            break;
        }
        request.page_token = page.next_page_token;
    }
    out.flush()?;
    Ok(())
}

pub async fn run_checkpoint(conn: &ClientArgs, refresh: bool) -> anyhow::Result<()> {
    let (channel, auth) = conn.channel().await?;
    let mut client = AuditServiceClient::with_interceptor(channel, auth);
    let c = client
        .get_checkpoint(GetCheckpointRequest { refresh })
        .await?
        .into_inner();
    let checkpoint = Checkpoint {
        tenant: c.tenant,
        size: c.size,
        head_digest: c.head_digest,
        signed_at: c.signed_at_ms,
        public_key: c.public_key,
        signature: c.signature,
    };
    println!("{}", serde_json::to_string_pretty(&checkpoint)?);
    Ok(())
}

fn read_checkpoint(path: &Path) -> anyhow::Result<Checkpoint> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

/// Verifies an export file: every line an entry, in any order (the chain's
/// order is its sequence numbers).
pub fn verify_export(
    export: &Path,
    checkpoint: Option<&Checkpoint>,
) -> anyhow::Result<Verification> {
    let file =
        std::fs::File::open(export).with_context(|| format!("opening {}", export.display()))?;
    // (sequence, digest, leaf hash or why not): a million entries fit easily.
    let mut entries = Vec::new();
    for (n, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.with_context(|| format!("reading {}", export.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        let value: serde_json::Value = serde_json::from_str(&line)
            .with_context(|| format!("{} line {}: not JSON", export.display(), n + 1))?;
        let sequence = value["sequence"]
            .as_u64()
            .with_context(|| format!("{} line {}: no sequence", export.display(), n + 1))?;
        let digest = value["digest"].as_str().unwrap_or_default().to_owned();
        let leaf = match value["record"].as_str() {
            Some(record) => Ok(leaf_hash(record.as_bytes())),
            None => Err("the record is not the canonical JSON string".to_owned()),
        };
        entries.push((sequence, leaf, digest));
    }
    entries.sort_by_key(|(sequence, _, _)| *sequence);
    let mut verifier = match checkpoint {
        Some(c) => Verifier::against(c.size, &c.head_digest),
        None => Verifier::new(),
    };
    for (sequence, leaf, digest) in entries {
        verifier.push(sequence, &digest, leaf);
        if !verifier.wants_more() {
            break;
        }
    }
    Ok(verifier.finish())
}

fn report(
    ok: bool,
    checked: u64,
    head: &str,
    first_invalid: u64,
    kind: &str,
    detail: &str,
) -> anyhow::Result<()> {
    if ok {
        println!("ok: {checked} entries verified; head {head}");
        Ok(())
    } else {
        println!("INVALID at sequence {first_invalid}: {kind}: {detail}");
        println!("({checked} entries read; last good head {head})");
        Err(anyhow::anyhow!("the decision log does not verify"))
    }
}

pub async fn run_verify(conn: &ClientArgs, args: VerifyArgs) -> anyhow::Result<()> {
    let checkpoint = args
        .checkpoint
        .as_deref()
        .map(read_checkpoint)
        .transpose()?;
    if let Some(export) = &args.export {
        if let Some(c) = &checkpoint {
            let key = args.public_key.as_deref().context(
                "--public-key is needed to trust a checkpoint offline (countersign admin signing-key show)",
            )?;
            c.verify(key)
                .map_err(|e| anyhow::anyhow!("checkpoint: {e}"))?;
        }
        let v = verify_export(export, checkpoint.as_ref())?;
        let (first, kind, detail) = v
            .failure
            .as_ref()
            .map(|f| (f.sequence, f.kind.as_str(), f.detail.as_str()))
            .unwrap_or((0, "", ""));
        return report(
            v.ok(),
            v.entries_checked,
            &v.head_digest,
            first,
            kind,
            detail,
        );
    }
    let (channel, auth) = conn.channel().await?;
    let mut client = AuditServiceClient::with_interceptor(channel, auth);
    let r = client
        .verify_log(VerifyLogRequest {
            checkpoint: checkpoint.as_ref().map(checkpoint_to_proto),
        })
        .await?
        .into_inner();
    let kind = output::enum_short(
        v1::VerifyFailure::try_from(r.failure).map(|v| v.as_str_name()),
        "VERIFY_FAILURE_",
    );
    report(
        r.ok,
        r.entries_checked,
        &r.head_digest,
        r.first_invalid_sequence,
        &kind,
        &r.detail,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fields that come from callers (target, operator, reason, …) never
    /// reach a spreadsheet as formulas.
    #[test]
    fn the_csv_export_quotes_every_field_and_neutralises_formulas() {
        let entry = v1::AuditEntry {
            sequence: 7,
            digest: "ab".repeat(32),
            proposal_id: "01KB".into(),
            action: "host_restart_service".into(),
            target: "=cmd|' /C calc'!A0".into(),
            operator: "@op".into(),
            submitted_by: "+bot".into(),
            blast_radius: v1::BlastRadius::SingleDevice as i32,
            decision: Some(v1::Decision {
                outcome: v1::DecisionOutcome::Reject as i32,
                reason: "-1, \"unknown\"\ntarget".into(),
                sop_id: "\tSOP".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut sink = Sink::new(Vec::new(), false, true).unwrap();
        sink.entry(&entry).unwrap();
        let Sink::Csv(writer) = sink else {
            panic!("a CSV sink")
        };
        let text = String::from_utf8(writer.into_inner().unwrap()).unwrap();
        let mut reader = csv::Reader::from_reader(text.as_bytes());
        assert_eq!(
            reader.headers().unwrap(),
            &csv::StringRecord::from(CSV_HEADER.to_vec())
        );
        let row = reader.records().next().unwrap().unwrap();
        let field = |name: &str| &row[CSV_HEADER.iter().position(|h| *h == name).unwrap()];
        assert_eq!(field("target"), "'=cmd|' /C calc'!A0");
        assert_eq!(field("operator"), "'@op");
        assert_eq!(field("submitted_by"), "'+bot");
        assert_eq!(field("reason"), "'-1, \"unknown\"\ntarget");
        assert_eq!(field("sop_id"), "'\tSOP");
        assert_eq!(field("outcome"), "reject");
        assert_eq!(field("sequence"), "7");
        assert!(
            text.lines()
                .next()
                .unwrap()
                .starts_with("\"sequence\",\"decided_at\""),
            "{text}"
        );
    }
}
