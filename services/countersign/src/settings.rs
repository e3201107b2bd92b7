//! Where the data lives: `--data-dir` (default `countersign-data/`) and the
//! database URL (default a SQLite file in the data directory).

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use countersign_store::DynStore;

pub const ADMIN_KEY_FILE: &str = "admin.key";

#[derive(Debug, Clone, Args)]
pub struct StoreArgs {
    /// `sqlite://…` or `postgres://…`; default a SQLite file in the data directory.
    #[arg(long, env = "COUNTERSIGN_DATABASE_URL", global = true)]
    pub database_url: Option<String>,
    /// Where the embedded database and the first admin key live.
    #[arg(
        long,
        env = "COUNTERSIGN_DATA_DIR",
        default_value = "countersign-data",
        global = true
    )]
    pub data_dir: PathBuf,
}

impl StoreArgs {
    pub fn database_url(&self) -> String {
        self.database_url.clone().unwrap_or_else(|| {
            format!(
                "sqlite://{}",
                self.data_dir.join("countersign.db").display()
            )
        })
    }

    /// Creates the data directory when the database lives in it.
    pub fn ensure_data_dir(&self) -> anyhow::Result<()> {
        std::fs::create_dir_all(&self.data_dir)
            .with_context(|| format!("creating {}", self.data_dir.display()))
    }

    /// Connects and brings the schema up to date.
    pub async fn open(&self) -> anyhow::Result<DynStore> {
        if self.database_url.is_none() {
            self.ensure_data_dir()?;
        }
        let store = countersign_store::connect(&self.database_url())
            .await
            .context("opening the database")?;
        let what = match store.backend() {
            // The service role cannot migrate PostgreSQL: it checks the schema.
            "postgres" => "checking the schema",
            _ => "running migrations",
        };
        store.migrate().await.context(what)?;
        Ok(store)
    }
}

pub(crate) fn is_postgres(url: &str) -> bool {
    url.starts_with("postgres:") || url.starts_with("postgresql:")
}

/// Writes `key` to `dir/admin.key`, readable by the owner only.
pub fn write_admin_key(dir: &Path, key: &str) -> anyhow::Result<PathBuf> {
    let path = dir.join(ADMIN_KEY_FILE);
    write_secret(&path, key)?;
    Ok(path)
}

/// Writes a secret to `path` (mode 0600, parent created), durably.
pub fn write_secret(path: &Path, secret: &str) -> anyhow::Result<()> {
    use std::{io::Write, os::unix::fs::OpenOptionsExt, os::unix::fs::PermissionsExt};

    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    writeln!(file, "{secret}")?;
    file.sync_all()?;
    Ok(())
}
