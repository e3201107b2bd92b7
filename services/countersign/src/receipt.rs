//! `countersign receipt verify`: an approval's receipt checked offline, as
//! the code about to run the operation (a script, an admission webhook)
//! checks it: the signature under the checkpoint key, an approval, not
//! expired, and, when given, the tenant and the spec that is about to run.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::Args;
use countersign_domain::{
    now_ms,
    receipt::{Expected, Receipt},
};
use countersign_proto::convert::spec_from_proto;

use crate::{output, spec_input::SpecArgs};

#[derive(Debug, Args)]
pub struct VerifyReceiptArgs {
    /// A receipt as JSON, or a proposal as `countersign get ID --json`
    /// prints it (its `decision.receipt`).
    pub file: PathBuf,
    /// The checkpoint key's public half, hex (`countersign checkpoint`
    /// prints it as `public_key`; `admin signing-key show` on the server).
    #[arg(long)]
    pub public_key: String,
    /// The spec about to run (YAML or JSON, as `submit -f` takes it): the
    /// receipt must be for exactly this spec.
    #[arg(long)]
    pub spec: Option<PathBuf>,
    /// The tenant the receipt must be for.
    #[arg(long)]
    pub tenant: Option<String>,
}

/// Checks the receipt; an error says which check failed.
pub fn verify(args: &VerifyReceiptArgs) -> anyhow::Result<()> {
    let receipt = read(&args.file)?;
    let spec_digest = match &args.spec {
        Some(path) => {
            let spec = spec_from_proto(SpecArgs::from_file(path)?)
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
            spec.digest()
        }
        None => receipt.spec_digest.clone(),
    };
    let expected = Expected {
        tenant: args.tenant.as_deref().unwrap_or(&receipt.tenant),
        spec_digest: &spec_digest,
        proposal_id: None,
    };
    receipt
        .verify(&args.public_key, &expected, now_ms())
        .context("the receipt does not allow the operation")?;
    println!(
        "ok: approval of proposal {} (tenant {}), valid until {}",
        receipt.proposal_id,
        receipt.tenant,
        output::time(receipt.expires_at)
    );
    Ok(())
}

/// A receipt from a file holding one, or a proposal with one.
fn read(path: &Path) -> anyhow::Result<Receipt> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let value: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    let receipt = if value.get("signature").is_some() {
        &value
    } else {
        match value.pointer("/decision/receipt") {
            Some(r) if !r.is_null() => r,
            _ => bail!(
                "{} holds no receipt (only approvals carry one, and only from a server with a signing key)",
                path.display()
            ),
        }
    };
    let text = |key: &str| -> anyhow::Result<String> {
        receipt
            .get(key)
            .and_then(|v| v.as_str())
            .map(str::to_owned)
            .with_context(|| format!("the receipt has no `{key}` text"))
    };
    let millis = |key: &str| -> anyhow::Result<i64> {
        receipt
            .get(key)
            .and_then(|v| v.as_i64())
            .with_context(|| format!("the receipt has no `{key}` in milliseconds"))
    };
    Ok(Receipt {
        tenant: text("tenant")?,
        proposal_id: text("proposal_id")?,
        spec_digest: text("spec_digest")?,
        outcome: text("outcome")?,
        decided_at: millis("decided_at")?,
        expires_at: millis("expires_at")?,
        signature: text("signature")?,
    })
}

/// A receipt as `get --json` prints it.
pub fn json(r: &countersign_proto::v1::Receipt) -> serde_json::Value {
    serde_json::json!({
        "tenant": r.tenant,
        "proposal_id": r.proposal_id,
        "spec_digest": r.spec_digest,
        "outcome": r.outcome,
        "decided_at": r.decided_at,
        "expires_at": r.expires_at,
        "signature": r.signature,
    })
}
