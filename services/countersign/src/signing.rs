//! The checkpoint signing key: `--signing-key` / `COUNTERSIGN_SIGNING_KEY` (hex
//! seed, for a secret store), else the file `--signing-key-file` (default
//! `signing.key` in the key directory: beside an SQLite database, else the
//! data directory). Only `serve` creates the file, on a first start whose
//! database holds no checkpoint; it never starts with a key other than the
//! one that signed the database's newest checkpoint.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use countersign_domain::audit::{Checkpoint, SigningKey};
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
    /// A file holding the seed; default `signing.key` beside an SQLite
    /// database (with PostgreSQL, in the data directory).
    #[arg(long, env = "COUNTERSIGN_SIGNING_KEY_FILE")]
    pub signing_key_file: Option<PathBuf>,
}

impl SigningArgs {
    /// The file the seed is read from (and `serve` creates), unless the seed
    /// itself is given.
    pub fn file(&self, key_dir: &Path) -> Option<PathBuf> {
        self.key.is_none().then(|| {
            self.signing_key_file
                .clone()
                .unwrap_or_else(|| key_dir.join(SIGNING_KEY_FILE))
        })
    }

    /// The configured key, or `None` when its file does not exist. Creates
    /// nothing.
    pub fn read(&self, key_dir: &Path) -> anyhow::Result<Option<SigningKey>> {
        let Some(path) = self.file(key_dir) else {
            let seed = self.key.as_deref().unwrap_or_default();
            return SigningKey::from_seed_hex(seed)
                .context("audit.signing_key (COUNTERSIGN_SIGNING_KEY)")
                .map(Some);
        };
        if !path.exists() {
            return Ok(None);
        }
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        SigningKey::from_seed_hex(&text)
            .with_context(|| path.display().to_string())
            .map(Some)
    }

    /// What `serve` signs with: the configured key, or on a first start (no
    /// key file, and no checkpoint in the database) a new one, written to its
    /// file. Refuses a key that did not sign `newest`, the database's newest
    /// checkpoint: with it, no earlier checkpoint would verify.
    pub fn load_for_serve(
        &self,
        key_dir: &Path,
        newest: Option<&Checkpoint>,
    ) -> anyhow::Result<SigningKey> {
        let key = match self.read(key_dir)? {
            Some(key) => key,
            None => {
                let path = self.file(key_dir).expect("a key that is read from a file");
                if let Some(newest) = newest {
                    anyhow::bail!(
                        "the signing key file {} does not exist, but the database holds \
                         checkpoints signed by the key {} (tenant `{}`, size {}): restore \
                         that key's file there (or give it as audit.signing_key, \
                         COUNTERSIGN_SIGNING_KEY); a new key would leave every earlier \
                         checkpoint unverifiable",
                        path.display(),
                        newest.public_key,
                        newest.tenant,
                        newest.size,
                    );
                }
                let mut seed = [0u8; 32];
                rand::rng().fill_bytes(&mut seed);
                crate::settings::write_secret(&path, &hex::encode(seed))?;
                tracing::info!(path = %path.display(), "created a checkpoint signing key");
                return Ok(SigningKey::from_seed(seed));
            }
        };
        if let Some(newest) = newest
            && (newest.public_key != key.public_hex() || newest.verify(&key.public_hex()).is_err())
        {
            let source = match self.file(key_dir) {
                Some(path) => path.display().to_string(),
                None => "audit.signing_key".to_owned(),
            };
            anyhow::bail!(
                "the database's newest checkpoint (tenant `{}`, size {}) was signed by the \
                 key {}, not by the configured signing key {} (from {source}): configure the \
                 key that signed it; with another, no earlier checkpoint would verify",
                newest.tenant,
                newest.size,
                newest.public_key,
                key.public_hex(),
            );
        }
        Ok(key)
    }
}
