//! The checkpoint signing key: `--signing-key` / `COUNTERSIGN_SIGNING_KEY` (hex
//! seed, for a secret store), else the file `--signing-key-file` (default
//! `<data-dir>/signing.key`), created with a fresh key on first use.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use countersign_domain::audit::SigningKey;
use rand::RngCore;

pub const SIGNING_KEY_FILE: &str = "signing.key";

#[derive(Debug, Clone, Args)]
pub struct SigningArgs {
    /// The Ed25519 seed that signs checkpoints, 64 hex characters (a secret:
    /// prefer the environment or the file).
    #[arg(
        long = "signing-key",
        env = "COUNTERSIGN_SIGNING_KEY",
        hide_env_values = true
    )]
    pub key: Option<String>,
    /// A file holding the seed; default `<data-dir>/signing.key`, created on first use.
    #[arg(long, env = "COUNTERSIGN_SIGNING_KEY_FILE")]
    pub signing_key_file: Option<PathBuf>,
}

impl SigningArgs {
    pub fn load(&self, data_dir: &Path) -> anyhow::Result<SigningKey> {
        if let Some(seed) = &self.key {
            return SigningKey::from_seed_hex(seed).context("COUNTERSIGN_SIGNING_KEY");
        }
        let path = self
            .signing_key_file
            .clone()
            .unwrap_or_else(|| data_dir.join(SIGNING_KEY_FILE));
        if path.exists() {
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            return SigningKey::from_seed_hex(&text).with_context(|| path.display().to_string());
        }
        let mut seed = [0u8; 32];
        rand::rng().fill_bytes(&mut seed);
        crate::settings::write_secret(&path, &hex::encode(seed))?;
        tracing::info!(path = %path.display(), "created a checkpoint signing key");
        Ok(SigningKey::from_seed(seed))
    }
}
