//! The production queue: Redis Streams with one consumer group.
//!
//! One stream per tenant (`{prefix}:q:{tenant}`) read by the group
//! `reviewers`; a worker is a stable consumer name. A lease is an entry in the
//! group's pending entries list (PEL) plus its expiry in a per-tenant zset (a
//! fetch chooses its lease length, so the PEL's idle time alone cannot say
//! when a lease ends). Fetch schedules tenants in rotating rounds and claims
//! (XCLAIM) entries whose lease ran out or whose release delay is over before
//! it reads new ones; the PEL's delivery count is [`Lease::attempts`]. Every
//! change of more than one key is one Lua script, so workers never race.
//! See `lua/prelude.lua` for the keys. Times are Redis's (`TIME`), so workers
//! on hosts with skewed clocks agree on when a lease ends.
//!
//! Why expired entries are claimed by id (XCLAIM, which counts the delivery
//! as XAUTOCLAIM would) rather than found by XAUTOCLAIM: its one min-idle
//! cannot tell a 1 s lease from a 30 s one, and `fetch`/`extend` choose the
//! length per call. A released or reclaimed entry stays pending, owned by the
//! reserved consumer `(parked)` (no worker may take that name), so its
//! delivery count goes on and the poison limit holds.
//!
//! Scripts touch keys they compute from the prefix: one Redis (or a primary
//! with replicas), not a cluster.

mod connect;
mod inspect;
mod scripts;
mod token;

use std::time::Duration;

use async_trait::async_trait;
use redis::{
    Client,
    aio::{ConnectionManager, ConnectionManagerConfig},
};

use crate::{Lease, Queue, QueueError, Result, TenantDepth};
pub use inspect::{Consumer, DeadLetter};
use scripts::SCRIPTS;

#[derive(Debug, Clone)]
pub struct RedisQueueOptions {
    /// Every key starts with it (`{prefix}:q:{tenant}`, …); tests use a random one.
    pub prefix: String,
    /// The consumer group every worker reads through.
    pub group: String,
    /// A consumer not seen (by fetch or extend) for this long is deleted from
    /// the group by [`Queue::reclaim_expired`] — once it owns no pending entry.
    pub consumer_ttl: Duration,
    /// A pending entry idle this long with no lease record at all (its records
    /// were lost) is made fetchable again by [`Queue::reclaim_expired`].
    pub orphan_after: Duration,
    /// At most this many leases are reclaimed per tenant and call.
    pub reclaim_batch: usize,
    /// How long a command may take before the queue counts as unavailable.
    pub response_timeout: Duration,
}

impl Default for RedisQueueOptions {
    fn default() -> Self {
        RedisQueueOptions {
            prefix: "countersign".into(),
            group: "reviewers".into(),
            consumer_ttl: Duration::from_secs(600),
            orphan_after: Duration::from_secs(300),
            reclaim_batch: 1_000,
            response_timeout: Duration::from_secs(5),
        }
    }
}

#[derive(Clone)]
pub struct RedisQueue {
    conn: ConnectionManager,
    options: RedisQueueOptions,
    /// Moves on every enqueue from this process (`Queue::enqueued`).
    enqueued: std::sync::Arc<tokio::sync::watch::Sender<u64>>,
}

impl std::fmt::Debug for RedisQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisQueue")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl RedisQueue {
    /// Connects to `url` (`redis://host:port/db`); fails if Redis does not answer.
    pub async fn connect(url: &str, options: RedisQueueOptions) -> Result<Self> {
        let client = Client::open(url).map_err(QueueError::backend)?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(options.response_timeout))
            .set_response_timeout(Some(options.response_timeout))
            .set_number_of_retries(2);
        let conn = ConnectionManager::new_with_config(client, config)
            .await
            .map_err(QueueError::backend)?;
        let queue = RedisQueue {
            conn,
            options,
            enqueued: std::sync::Arc::new(tokio::sync::watch::Sender::new(0)),
        };
        let _: String = redis::cmd("PING")
            .query_async(&mut queue.conn())
            .await
            .map_err(QueueError::backend)?;
        Ok(queue)
    }

    pub fn options(&self) -> &RedisQueueOptions {
        &self.options
    }

    /// Enqueues entries in order, in one script call (one round trip, however
    /// many), and wakes this process's idle workers once, after: woken at the
    /// first of many, they would lease the batch one entry at a time. Returns
    /// how many went in (all or, on a failure, none counted: a failed call's
    /// entries are enqueued again, which is idempotent), and the failure.
    pub async fn enqueue_all(&self, keys: &[(&str, &str)]) -> (usize, Result<()>) {
        if keys.is_empty() {
            return (0, Ok(()));
        }
        match self.enqueue_quietly(keys).await {
            Ok(()) => {
                self.signal_enqueued();
                (keys.len(), Ok(()))
            }
            Err(error) => (0, Err(error)),
        }
    }

    #[tracing::instrument(name = "queue.redis.enqueue", skip_all, fields(n = keys.len()))]
    async fn enqueue_quietly(&self, keys: &[(&str, &str)]) -> Result<()> {
        let mut call = self.call(&SCRIPTS.enqueue);
        for (tenant, proposal_id) in keys {
            call.arg(*tenant).arg(*proposal_id);
        }
        let _: i64 = call
            .invoke_async(&mut self.conn())
            .await
            .map_err(QueueError::backend)?;
        Ok(())
    }

    fn signal_enqueued(&self) {
        self.enqueued.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Wakes this process's idle workers as its own enqueue does: another
    /// process said it enqueued (`PeerMessage::Enqueued`).
    pub fn wake_idle_workers(&self) {
        self.signal_enqueued();
    }

    fn conn(&self) -> ConnectionManager {
        self.conn.clone()
    }

    /// A script call with the prefix and group, the arguments every script takes first.
    fn call<'a>(&'a self, script: &'a redis::Script) -> redis::ScriptInvocation<'a> {
        let mut call = script.prepare_invoke();
        call.arg(&self.options.prefix).arg(&self.options.group);
        call
    }

    /// One call of the fetch script; `idle_only` skips every tenant with a
    /// live lease.
    async fn fetch_from(
        &self,
        worker: &str,
        max: usize,
        lease: Duration,
        idle_only: bool,
    ) -> Result<Vec<Lease>> {
        let mut call = self.call(&SCRIPTS.fetch);
        call.arg(worker)
            .arg(max)
            .arg(ms(lease))
            .arg(if idle_only { "1" } else { "0" });
        let (expires_at, entries): (i64, Vec<(String, String, String, u32)>) = call
            .invoke_async(&mut self.conn())
            .await
            .map_err(QueueError::backend)?;
        Ok(entries
            .into_iter()
            .map(|(tenant, entry_id, proposal_id, delivered)| Lease {
                entry_id,
                tenant,
                proposal_id,
                attempts: delivered,
                token: token::token(worker, delivered),
                expires_at,
            })
            .collect())
    }

    /// The script call for one held lease: tenant, entry, consumer, delivery count.
    fn call_for<'a>(
        &'a self,
        script: &'a redis::Script,
        lease: &Lease,
    ) -> redis::ScriptInvocation<'a> {
        let (consumer, delivered) = token::holder(lease);
        let mut call = self.call(script);
        call.arg(&lease.tenant)
            .arg(&lease.entry_id)
            .arg(consumer)
            .arg(delivered);
        call
    }
}

#[async_trait]
impl Queue for RedisQueue {
    async fn enqueue(&self, tenant: &str, proposal_id: &str) -> Result<()> {
        self.enqueue_quietly(&[(tenant, proposal_id)]).await?;
        self.signal_enqueued();
        Ok(())
    }

    fn enqueued(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        Some(self.enqueued.subscribe())
    }

    #[tracing::instrument(name = "queue.redis.fetch", skip(self, lease))]
    async fn fetch(&self, worker: &str, max: usize, lease: Duration) -> Result<Vec<Lease>> {
        self.fetch_from(worker, max, lease, false).await
    }

    #[tracing::instrument(name = "queue.redis.fetch_idle_tenants", skip(self, lease))]
    async fn fetch_idle_tenants(
        &self,
        worker: &str,
        max: usize,
        lease: Duration,
    ) -> Result<Vec<Lease>> {
        self.fetch_from(worker, max, lease, true).await
    }

    #[tracing::instrument(name = "queue.redis.extend", skip_all, fields(entry = %lease.entry_id))]
    async fn extend(&self, lease: &Lease, by: Duration) -> Result<bool> {
        let mut call = self.call_for(&SCRIPTS.extend, lease);
        call.arg(ms(by));
        let held: i64 = call
            .invoke_async(&mut self.conn())
            .await
            .map_err(QueueError::backend)?;
        Ok(held == 1)
    }

    #[tracing::instrument(name = "queue.redis.ack", skip_all, fields(entry = %lease.entry_id))]
    async fn ack(&self, lease: &Lease) -> Result<()> {
        self.ack_many(std::slice::from_ref(lease)).await
    }

    #[tracing::instrument(name = "queue.redis.ack_many", skip_all, fields(n = leases.len()))]
    async fn ack_many(&self, leases: &[Lease]) -> Result<()> {
        if leases.is_empty() {
            return Ok(());
        }
        let mut call = self.call(&SCRIPTS.ack);
        for lease in leases {
            let (consumer, delivered) = token::holder(lease);
            call.arg(&lease.tenant)
                .arg(&lease.entry_id)
                .arg(consumer)
                .arg(delivered)
                .arg(&lease.proposal_id);
        }
        let _: i64 = call
            .invoke_async(&mut self.conn())
            .await
            .map_err(QueueError::backend)?;
        Ok(())
    }

    #[tracing::instrument(name = "queue.redis.release", skip_all, fields(entry = %lease.entry_id))]
    async fn release(&self, lease: &Lease, delay: Duration) -> Result<()> {
        let mut call = self.call_for(&SCRIPTS.release, lease);
        call.arg(ms(delay));
        let _: i64 = call
            .invoke_async(&mut self.conn())
            .await
            .map_err(QueueError::backend)?;
        Ok(())
    }

    #[tracing::instrument(name = "queue.redis.reclaim_expired", skip(self))]
    async fn reclaim_expired(&self) -> Result<u64> {
        let mut call = self.call(&SCRIPTS.reclaim);
        call.arg(self.options.reclaim_batch)
            .arg(ms(self.options.orphan_after));
        let reclaimed: u64 = call
            .invoke_async(&mut self.conn())
            .await
            .map_err(QueueError::backend)?;
        let forgotten = self.forget_idle_consumers().await?;
        if forgotten > 0 {
            tracing::info!(forgotten, "idle consumers deleted from the group");
        }
        Ok(reclaimed)
    }

    #[tracing::instrument(name = "queue.redis.dead_letter", skip_all, fields(entry = %lease.entry_id))]
    async fn dead_letter(&self, lease: &Lease, reason: &str) -> Result<()> {
        let mut call = self.call_for(&SCRIPTS.dead_letter, lease);
        call.arg(&lease.proposal_id).arg(reason);
        let _: i64 = call
            .invoke_async(&mut self.conn())
            .await
            .map_err(QueueError::backend)?;
        Ok(())
    }

    #[tracing::instrument(name = "queue.redis.depth", skip(self))]
    async fn depth(&self) -> Result<u64> {
        self.call(&SCRIPTS.depth)
            .invoke_async(&mut self.conn())
            .await
            .map_err(QueueError::backend)
    }

    #[tracing::instrument(name = "queue.redis.depth_by_tenant", skip(self))]
    async fn depth_by_tenant(&self) -> Result<Vec<TenantDepth>> {
        let rows: Vec<(String, u64, u64)> = self
            .call(&SCRIPTS.depth_by_tenant)
            .invoke_async(&mut self.conn())
            .await
            .map_err(QueueError::backend)?;
        Ok(rows
            .into_iter()
            .map(|(tenant, depth, age_ms)| TenantDepth {
                tenant,
                depth,
                oldest_age: Duration::from_millis(age_ms),
            })
            .collect())
    }
}
