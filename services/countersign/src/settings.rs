//! Where the data lives: `--data-dir` (default `countersign-data/`) and the
//! database URL (default a SQLite file in the data directory); and where the
//! key files that belong to it live (beside an SQLite file, else the data
//! directory given).

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use countersign_store::DynStore;

use crate::output::redact_url;

pub const ADMIN_KEY_FILE: &str = "admin.key";

/// The data directory when none is given.
pub const DEFAULT_DATA_DIR: &str = "countersign-data";

#[derive(Debug, Clone, Args)]
pub struct StoreArgs {
    /// `sqlite://…` or `postgres://…`; default a SQLite file in the data directory.
    #[arg(long, env = "COUNTERSIGN_DATABASE_URL", global = true)]
    pub database_url: Option<String>,
    /// Where the embedded database lives (default `countersign-data`), and with
    /// PostgreSQL the first admin key and the signing key file.
    #[arg(long, env = "COUNTERSIGN_DATA_DIR", global = true)]
    pub data_dir: Option<PathBuf>,
}

impl StoreArgs {
    /// The data directory: the one given, else `countersign-data`.
    pub fn data_dir(&self) -> PathBuf {
        self.data_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR))
    }

    pub fn database_url(&self) -> String {
        self.database_url.clone().unwrap_or_else(|| {
            format!(
                "sqlite://{}",
                self.data_dir().join("countersign.db").display()
            )
        })
    }

    /// Where the key files that belong to this database live (the first
    /// admin key, the signing key): beside an SQLite file, wherever the
    /// command runs from; with any other database, the data directory, which
    /// must then be given (a default relative to the working directory would
    /// put them wherever a process happened to start).
    pub fn key_dir(&self) -> anyhow::Result<PathBuf> {
        let url = self.database_url();
        if url.starts_with("sqlite:")
            && let Some(file) = countersign_store::database_file(&url)
                .with_context(|| format!("the database URL `{}`", redact_url(&url)))?
        {
            return Ok(match file.parent() {
                Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
                _ => PathBuf::from("."),
            });
        }
        self.data_dir.clone().ok_or_else(|| {
            anyhow::anyhow!(
                "data_dir is not set (COUNTERSIGN_DATA_DIR, --data-dir): with the database \
                 `{}`, it holds the first admin key and the signing key file",
                redact_url(&url)
            )
        })
    }

    /// Creates the data directory when the database lives in it.
    pub fn ensure_data_dir(&self) -> anyhow::Result<()> {
        let dir = self.data_dir();
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn args(url: Option<&str>, data_dir: Option<&str>) -> StoreArgs {
        StoreArgs {
            database_url: url.map(str::to_owned),
            data_dir: data_dir.map(PathBuf::from),
        }
    }

    #[test]
    fn key_files_live_beside_an_sqlite_database_else_in_the_data_directory_given() {
        let dir = |a: StoreArgs| a.key_dir().unwrap();
        assert_eq!(dir(args(None, None)), Path::new("countersign-data"));
        assert_eq!(dir(args(None, Some("/srv/cs"))), Path::new("/srv/cs"));
        assert_eq!(
            dir(args(
                Some("sqlite:///var/lib/cs/db.sqlite"),
                Some("/srv/cs")
            )),
            Path::new("/var/lib/cs"),
            "beside the database, wherever the data directory is"
        );
        assert_eq!(
            dir(args(Some("sqlite://data/cs.db?mode=rwc"), None)),
            Path::new("data")
        );
        assert_eq!(dir(args(Some("sqlite:cs.db"), None)), Path::new("."));
        let postgres = Some("postgres://app:secret@db/cs");
        assert_eq!(dir(args(postgres, Some("/srv/cs"))), Path::new("/srv/cs"));
        let refused = format!("{:#}", args(postgres, None).key_dir().unwrap_err());
        assert!(
            refused.contains("data_dir") && refused.contains("COUNTERSIGN_DATA_DIR"),
            "{refused}"
        );
        assert!(!refused.contains("secret"), "{refused}");
    }
}
