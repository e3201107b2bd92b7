//! From the store's outbox to the Redis review queue: "accepted means never
//! lost" when the store (PostgreSQL) and the queue (Redis) are two systems.
//!
//! Submit commits the proposal and its outbox row in one transaction and
//! answers: once `Submit` answers OK the row is there, whatever the queue's
//! state. The store reads and marks the rows through [`Outbox`] (PostgreSQL:
//! `store/src/postgres/outbox.rs`); the [`Publisher`] then enqueues unpublished rows (enqueue is
//! idempotent per proposal) and marks them. A submission committed in this
//! process is published by its key as soon as it commits, without reading the
//! outbox; every `poll` the publisher reads the outbox for the rest (other
//! processes' rows, and any it could not publish). With Redis down, rows stay
//! unpublished and are published when it answers again. The [`Sweeper`] covers what the
//! outbox alone cannot: an entry published and then lost (Redis restarted
//! without persistence). It pages through every undecided proposal and
//! re-enqueues those Redis has no entry for. A redundant entry (its proposal
//! decided meanwhile) is harmless: the worker finds the proposal terminal and
//! acks it.

use std::{pin::Pin, sync::Arc, time::Duration};

use async_trait::async_trait;
use countersign_domain::ReviewKey;
use countersign_peers::Peers;
use futures::FutureExt;
use tokio::task::JoinSet;
use tokio_stream::{Stream, StreamExt};
use tokio_util::sync::CancellationToken;

use crate::{Queue, RedisQueue, Result, wake::announce_enqueued};

/// The store's side of the outbox: the rows a proposal's transaction wrote,
/// read across tenants. Its errors reach the publisher as
/// [`crate::QueueError::backend`].
#[async_trait]
pub trait Outbox: Send + Sync + 'static {
    /// Up to `limit` proposals (of every tenant) whose entry was never
    /// published, oldest first.
    async fn unpublished(&self, limit: u32) -> Result<Vec<ReviewKey>>;
    /// Marks these entries as published (a row already marked stays as it is).
    async fn mark_published(&self, keys: &[ReviewKey]) -> Result<()>;
    /// Up to `limit` undecided (PENDING or REVIEWING) proposals of every
    /// tenant whose entry was published, by id, after the id `after` (a page
    /// of the sweep; unpublished entries are the publisher's).
    async fn undecided(&self, after: Option<&str>, limit: u32) -> Result<Vec<ReviewKey>>;
}

/// This process's submissions as they commit: the proposal's key, or `None`
/// when some may have been missed (the publisher then reads the outbox).
pub type Submissions = Pin<Box<dyn Stream<Item = Option<ReviewKey>> + Send>>;

#[derive(Debug, Clone)]
pub struct OutboxConfig {
    /// How often the publisher looks for rows other processes committed.
    pub poll: Duration,
    /// How often the sweeper checks every undecided proposal against Redis.
    pub sweep_every: Duration,
    /// Rows published, or proposals checked, per round trip.
    pub batch: u32,
}

impl Default for OutboxConfig {
    fn default() -> Self {
        OutboxConfig {
            poll: Duration::from_millis(200),
            sweep_every: Duration::from_secs(5),
            batch: 256,
        }
    }
}

/// Enqueues unpublished outbox rows and marks them published.
#[derive(Clone)]
pub struct Publisher {
    pub outbox: Arc<dyn Outbox>,
    pub queue: Arc<RedisQueue>,
    /// Where other processes hear that this one enqueued (their idle workers
    /// fetch at once); `None` leaves them to their idle poll.
    pub peers: Option<Arc<dyn Peers>>,
    pub config: OutboxConfig,
}

/// What the publisher does next.
enum Round {
    /// Reads a batch of unpublished rows from the outbox and publishes them.
    Scan,
    /// Publishes these submissions of this process; then scans when some
    /// may have been missed.
    Submitted { keys: Vec<ReviewKey>, missed: bool },
}

impl Publisher {
    /// Publishes one batch read from the outbox; returns how many rows it
    /// published.
    pub async fn publish_once(&self) -> Result<usize> {
        let keys = self.outbox.unpublished(self.config.batch).await?;
        self.publish(keys).await
    }

    /// Enqueues `keys` and marks what reached Redis published; returns how
    /// many.
    async fn publish(&self, mut keys: Vec<ReviewKey>) -> Result<usize> {
        let pairs: Vec<(&str, &str)> = keys
            .iter()
            .map(|k| (k.tenant.as_str(), k.id.as_str()))
            .collect();
        let (done, enqueued) = self.queue.enqueue_all(&pairs).await;
        if done > 0
            && let Some(peers) = &self.peers
        {
            announce_enqueued(peers.as_ref()).await;
        }
        // What reached Redis is marked even when a later enqueue failed.
        keys.truncate(done);
        self.outbox.mark_published(&keys).await?;
        enqueued?;
        Ok(keys.len())
    }

    /// Publishes until `stop`: each of `submitted` (this process's
    /// submissions) by its key as it arrives, with those that arrived beside
    /// it; and every `config.poll`, however busy the submissions, what the
    /// outbox holds unpublished.
    pub async fn run(self, mut submitted: Submissions, stop: CancellationToken) {
        let mut failing = false;
        let mut scan = tokio::time::interval(self.config.poll);
        scan.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut round = Round::Scan;
        while !stop.is_cancelled() {
            // A full batch, or submissions that may have gone unheard: read
            // the outbox again at once.
            let (published, scan_again) = match round {
                Round::Scan => {
                    scan.reset();
                    let published = self.publish_once().await;
                    let full =
                        matches!(published, Ok(n) if n as u64 >= u64::from(self.config.batch));
                    (published, full)
                }
                Round::Submitted { keys, missed } => (self.publish(keys).await, missed),
            };
            match published {
                Ok(n) => {
                    if failing {
                        tracing::info!("outbox publishing again");
                        failing = false;
                    }
                    if n > 0 {
                        metrics::counter!("countersign_outbox_published_total").increment(n as u64);
                    }
                }
                Err(error) => {
                    if !failing {
                        tracing::warn!(%error, "outbox publish failed; the rows wait in the store");
                        failing = true;
                    }
                }
            }
            if scan_again {
                round = Round::Scan;
                continue;
            }
            round = tokio::select! {
                () = stop.cancelled() => break,
                _ = scan.tick() => Round::Scan,
                first = submission(&mut submitted) => self.gather(first, &mut submitted),
            };
        }
    }

    /// The round for a submission heard (`None`: some may have been missed)
    /// and the others already waiting behind it, up to a batch.
    fn gather(&self, first: Option<ReviewKey>, submitted: &mut Submissions) -> Round {
        let Some(first) = first else {
            return Round::Scan;
        };
        let mut keys = vec![first];
        while keys.len() < self.config.batch as usize {
            match submitted.next().now_or_never() {
                Some(Some(Some(key))) => keys.push(key),
                Some(Some(None)) => return Round::Submitted { keys, missed: true },
                Some(None) | None => break,
            }
        }
        Round::Submitted {
            keys,
            missed: false,
        }
    }
}

/// The next submission (never resolves once the stream has ended).
async fn submission(submitted: &mut Submissions) -> Option<ReviewKey> {
    match submitted.next().await {
        Some(key) => key,
        None => std::future::pending().await,
    }
}

/// Re-enqueues every undecided proposal whose Redis entry is missing.
#[derive(Clone)]
pub struct Sweeper {
    pub outbox: Arc<dyn Outbox>,
    pub queue: Arc<RedisQueue>,
    pub config: OutboxConfig,
}

impl Sweeper {
    /// One pass over every undecided proposal; returns how many it re-enqueued.
    pub async fn sweep_once(&self) -> Result<u64> {
        let mut after: Option<String> = None;
        let mut requeued = 0;
        loop {
            let page = self
                .outbox
                .undecided(after.as_deref(), self.config.batch)
                .await?;
            let Some(last) = page.last() else { break };
            let from = after.replace(last.id.clone());
            let pairs: Vec<(&str, &str)> = page
                .iter()
                .map(|k| (k.tenant.as_str(), k.id.as_str()))
                .collect();
            let missing = self.queue.missing(&pairs).await?;
            if !missing.is_empty() {
                // A proposal decided (and its entry acked) between the two
                // reads looks missing: read the page again and requeue only
                // what is still undecided. (Were one decided after this, its
                // worker would find it terminal and ack it: harmless.)
                let still = self
                    .outbox
                    .undecided(from.as_deref(), self.config.batch)
                    .await?;
                for (tenant, id) in missing {
                    if still.iter().any(|k| k.tenant == tenant && k.id == id) {
                        self.queue.enqueue(tenant, id).await?;
                        requeued += 1;
                    }
                }
            }
            if page.len() < self.config.batch as usize {
                break;
            }
        }
        Ok(requeued)
    }

    pub async fn run(self, stop: CancellationToken) {
        while !stop.is_cancelled() {
            match self.sweep_once().await {
                Ok(0) => {}
                Ok(n) => {
                    tracing::warn!(requeued = n, "undecided proposals were missing from Redis");
                    metrics::counter!("countersign_outbox_requeued_total").increment(n);
                }
                Err(error) => tracing::warn!(%error, "outbox sweep failed"),
            }
            tokio::select! {
                () = stop.cancelled() => {}
                () = tokio::time::sleep(self.config.sweep_every) => {}
            }
        }
    }
}

/// A running publisher, and the sweeper where there are workers.
pub struct OutboxTasks {
    tasks: JoinSet<()>,
    stop: CancellationToken,
}

impl OutboxTasks {
    /// Runs until [`OutboxTasks::shutdown`], or until `shutdown` is cancelled;
    /// `submitted` wakes the publisher (see [`Publisher::run`]).
    pub fn start(
        publisher: Publisher,
        submitted: Submissions,
        sweep: bool,
        shutdown: &CancellationToken,
    ) -> OutboxTasks {
        let stop = shutdown.child_token();
        let stopped = stop.clone();
        let mut tasks = JoinSet::new();
        if sweep {
            let sweeper = Sweeper {
                outbox: publisher.outbox.clone(),
                queue: publisher.queue.clone(),
                config: publisher.config.clone(),
            };
            tasks.spawn(sweeper.run(stopped.clone()));
        }
        tasks.spawn(publisher.run(submitted, stopped));
        OutboxTasks { tasks, stop }
    }

    pub async fn shutdown(mut self) {
        self.stop.cancel();
        while self.tasks.join_next().await.is_some() {}
    }
}
