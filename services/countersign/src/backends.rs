//! Which store and queue `serve` runs on: SQLite with its embedded queue (the
//! default), or PostgreSQL with the Redis Streams queue fed through the
//! store's outbox (production). SQLite with a Redis URL is refused: its queue
//! is the database itself, and there is no outbox to feed Redis from.

use std::sync::Arc;

use anyhow::Context;
use countersign_peers::{Peers, RedisPeers};
use countersign_queue::{DynQueue, OutboxConfig, RedisQueueOptions};
use countersign_store::{DynStore, EmbeddedQueue, Lifecycle, PostgresStore, SqliteStore};

use crate::{config::Config, output::redact_url, settings::is_postgres};

/// PostgreSQL and the Redis queue it feeds (connected once Redis answers).
pub struct Production {
    pub store: Arc<PostgresStore>,
    /// The other processes of the deployment (wake-ups, suppression).
    pub peers: Arc<RedisPeers>,
    pub redis_url: String,
    pub queue_options: RedisQueueOptions,
    pub outbox: OutboxConfig,
}

pub enum Backends {
    /// SQLite and its embedded queue, ready now.
    Embedded {
        store: DynStore,
        queue: DynQueue,
    },
    Production(Production),
}

impl Backends {
    /// The other processes of the deployment, on the production backends.
    pub fn peers(&self) -> Option<Arc<dyn Peers>> {
        match self {
            Backends::Embedded { .. } => None,
            Backends::Production(production) => Some(production.peers.clone()),
        }
    }

    /// The embedded queue; the Redis one is connected in the background.
    pub fn queue(&self) -> Option<DynQueue> {
        match self {
            Backends::Embedded { queue, .. } => Some(queue.clone()),
            Backends::Production(_) => None,
        }
    }

    pub fn store(&self) -> DynStore {
        match self {
            Backends::Embedded { store, .. } => store.clone(),
            Backends::Production(production) => production.store.clone(),
        }
    }
}

impl Backends {
    /// Connects the store (and, on PostgreSQL, prepares the Redis queue).
    pub async fn open(config: &Config) -> anyhow::Result<Backends> {
        let url = config.database_url();
        if is_postgres(&url) {
            let Some(redis_url) = config.redis.url.clone() else {
                anyhow::bail!(
                    "a PostgreSQL database (`{}`) needs the Redis review queue: set \
                     redis.url (COUNTERSIGN_REDIS_URL, --redis-url); the embedded queue is SQLite-only",
                    redact_url(&url)
                );
            };
            let pg = PostgresStore::connect_with(&url, config.database.pool)
                .await
                .context("opening the database")?;
            // An outdated schema is said here: the service role cannot migrate.
            pg.migrate().await.context("checking the schema")?;
            let peers = RedisPeers::new(
                &redis_url,
                &config.redis.prefix,
                RedisQueueOptions::default().response_timeout,
            )
            .context("the Redis URL")?;
            return Ok(Backends::Production(Production {
                store: Arc::new(pg),
                peers,
                redis_url,
                queue_options: RedisQueueOptions {
                    prefix: config.redis.prefix.clone(),
                    ..RedisQueueOptions::default()
                },
                outbox: OutboxConfig {
                    poll: config.outbox.poll,
                    sweep_every: config.outbox.sweep,
                    ..OutboxConfig::default()
                },
            }));
        }
        if !url.starts_with("sqlite:") {
            anyhow::bail!(
                "unsupported database URL `{}`: use sqlite:// or postgres://",
                redact_url(&url)
            );
        }
        if config.redis.url.is_some() {
            anyhow::bail!(
                "redis.url (COUNTERSIGN_REDIS_URL) needs a postgres:// database: on SQLite \
                 the review queue is embedded in the database (unset it)"
            );
        }
        let sqlite = open_sqlite(config).await?;
        let queue = EmbeddedQueue::new(sqlite.writer());
        Ok(Backends::Embedded {
            store: Arc::new(sqlite),
            queue: Arc::new(queue),
        })
    }
}

/// The embedded database, migrated, committing as configured
/// (`database.sqlite_synchronous`).
async fn open_sqlite(config: &Config) -> anyhow::Result<SqliteStore> {
    if config.database.url.is_none() {
        config.store_args().ensure_data_dir()?;
    }
    let synchronous = config.database.sqlite_synchronous;
    let sqlite = SqliteStore::connect_with(&config.database_url(), synchronous.into())
        .await
        .context("opening the database")?;
    sqlite.migrate().await.context("running migrations")?;
    tracing::info!(synchronous = ?synchronous, "embedded database");
    Ok(sqlite)
}

#[cfg(test)]
mod tests {
    use countersign_store::Synchronous;

    use super::*;
    use crate::config::SqliteSynchronous;

    /// `database.sqlite_synchronous` is the setting the embedded database's
    /// writer commits with: FULL unless NORMAL is asked for.
    #[tokio::test]
    async fn the_embedded_database_commits_as_configured() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config {
            data_dir: Some(dir.path().to_path_buf()),
            ..Config::default()
        };
        let full = open_sqlite(&config).await.unwrap();
        assert_eq!(full.synchronous().await.unwrap(), Synchronous::Full);
        drop(full);
        config.database.sqlite_synchronous = SqliteSynchronous::Normal;
        let normal = open_sqlite(&config).await.unwrap();
        assert_eq!(normal.synchronous().await.unwrap(), Synchronous::Normal);
    }
}
