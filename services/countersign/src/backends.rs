//! Which store and queue `serve` runs on: SQLite with its embedded queue (the
//! default), or PostgreSQL with the Redis Streams queue fed through the
//! store's outbox (production). SQLite with a Redis URL is refused: its queue
//! is the database itself, and there is no outbox to feed Redis from.

use std::{sync::Arc, time::Duration};

use anyhow::Context;
use clap::Args;
use countersign_queue::{
    DynQueue, EmbeddedQueue, Peers, RedisPeers, RedisQueue, RedisQueueOptions,
};
use countersign_reviewer::OutboxConfig;
use countersign_store::{DynStore, PostgresStore, SqliteStore, Store};

use crate::{
    output::redact_url,
    settings::{StoreArgs, is_postgres},
};

#[derive(Debug, Clone, Args)]
pub struct BackendArgs {
    /// The Redis Streams review queue (`redis://host:port/db`); needs a
    /// `postgres://` database. Unset = the embedded queue (SQLite only).
    #[arg(long, env = "COUNTERSIGN_REDIS_URL")]
    pub redis_url: Option<String>,
    /// Every Redis key starts with it (several deployments may share a Redis).
    #[arg(long, env = "COUNTERSIGN_REDIS_PREFIX", default_value = "countersign")]
    pub redis_prefix: String,
    /// PostgreSQL connections this process opens at most.
    #[arg(long, env = "COUNTERSIGN_DATABASE_POOL", default_value = "16")]
    pub database_pool: u32,
    /// How often the outbox publisher looks for proposals other processes committed.
    #[arg(long, env = "COUNTERSIGN_OUTBOX_POLL", default_value = "200ms", value_parser = humantime::parse_duration)]
    pub outbox_poll: Duration,
    /// How often workers re-publish undecided proposals missing from Redis.
    #[arg(long, env = "COUNTERSIGN_OUTBOX_SWEEP", default_value = "5s", value_parser = humantime::parse_duration)]
    pub outbox_sweep: Duration,
}

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

    pub fn store(&self) -> DynStore {
        match self {
            Backends::Embedded { store, .. } => store.clone(),
            Backends::Production(production) => production.store.clone(),
        }
    }
}

impl BackendArgs {
    pub async fn open(&self, store: &StoreArgs) -> anyhow::Result<Backends> {
        let url = store.database_url();
        if is_postgres(&url) {
            let Some(redis_url) = self.redis_url.clone() else {
                anyhow::bail!(
                    "a PostgreSQL database (`{}`) needs the Redis review queue: set \
                     COUNTERSIGN_REDIS_URL (or --redis-url); the embedded queue is SQLite-only",
                    redact_url(&url)
                );
            };
            let pg = PostgresStore::connect_with(&url, self.database_pool)
                .await
                .context("opening the database")?;
            // An outdated schema is said here: the service role cannot migrate.
            pg.migrate().await.context("checking the schema")?;
            let peers = RedisPeers::new(
                &redis_url,
                &self.redis_prefix,
                RedisQueueOptions::default().response_timeout,
            )
            .context("the Redis URL")?;
            return Ok(Backends::Production(Production {
                store: Arc::new(pg),
                peers,
                redis_url,
                queue_options: RedisQueueOptions {
                    prefix: self.redis_prefix.clone(),
                    ..RedisQueueOptions::default()
                },
                outbox: OutboxConfig {
                    poll: self.outbox_poll,
                    sweep_every: self.outbox_sweep,
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
        if self.redis_url.is_some() {
            anyhow::bail!(
                "COUNTERSIGN_REDIS_URL needs a postgres:// database: on SQLite the review \
                 queue is embedded in the database (unset COUNTERSIGN_REDIS_URL)"
            );
        }
        if store.database_url.is_none() {
            store.ensure_data_dir()?;
        }
        let sqlite = SqliteStore::connect(&url)
            .await
            .context("opening the database")?;
        sqlite.migrate().await.context("running migrations")?;
        let queue = EmbeddedQueue::new(sqlite.writer_pool());
        Ok(Backends::Embedded {
            store: Arc::new(sqlite),
            queue: Arc::new(queue),
        })
    }
}

impl Production {
    /// Connects to Redis, retrying every second until it answers or `stop`
    /// (Submit goes on meanwhile: the outbox keeps what it accepts).
    pub async fn connect_queue(
        &self,
        stop: &mut tokio::sync::watch::Receiver<bool>,
    ) -> Option<Arc<RedisQueue>> {
        let mut warned = false;
        loop {
            match RedisQueue::connect(&self.redis_url, self.queue_options.clone()).await {
                Ok(queue) => {
                    tracing::info!(redis = %redact_url(&self.redis_url), "review queue ready");
                    return Some(Arc::new(queue));
                }
                Err(error) => {
                    if !warned {
                        tracing::warn!(
                            redis = %redact_url(&self.redis_url), %error,
                            "Redis unreachable; retrying (submissions wait in the outbox)"
                        );
                        warned = true;
                    }
                }
            }
            tokio::select! {
                _ = stop.changed() => return None,
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
            if *stop.borrow() {
                return None;
            }
        }
    }
}
