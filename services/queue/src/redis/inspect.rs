//! What an operator (or a test) may read of the Redis queue beyond the trait:
//! dead letters and consumer heartbeats, and the clean-up of dead consumers.

use std::collections::HashMap;

use countersign_domain::Millis;

use super::{RedisQueue, scripts::SCRIPTS};
use crate::{QueueError, Result};

/// An entry parked for good by [`crate::Queue::dead_letter`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    pub proposal_id: String,
    pub reason: String,
    /// Deliveries of the entry before it was parked.
    pub attempts: u32,
    /// The consumer that dead-lettered it.
    pub consumer: String,
}

/// A worker's heartbeat: when it last fetched or extended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Consumer {
    pub name: String,
    pub last_seen: Millis,
}

impl RedisQueue {
    /// The oldest `max` dead letters of a tenant.
    pub async fn dead_letters(&self, tenant: &str, max: usize) -> Result<Vec<DeadLetter>> {
        let key = format!("{}:dead:{tenant}", self.options.prefix);
        let entries: Vec<redis::Value> = redis::cmd("XRANGE")
            .arg(key)
            .arg("-")
            .arg("+")
            .arg("COUNT")
            .arg(max)
            .query_async(&mut self.conn())
            .await
            .map_err(QueueError::backend)?;
        let mut letters = Vec::with_capacity(entries.len());
        for entry in entries {
            // [id, [field, value, …]]
            let (_, fields): (String, HashMap<String, String>) =
                redis::from_redis_value(entry).map_err(QueueError::backend)?;
            let field = |name: &str| fields.get(name).cloned().unwrap_or_default();
            letters.push(DeadLetter {
                proposal_id: field("proposal"),
                reason: field("reason"),
                attempts: field("attempts").parse().unwrap_or(0),
                consumer: field("consumer"),
            });
        }
        Ok(letters)
    }

    /// Consumers with a heartbeat, the least recently seen first.
    pub async fn consumers(&self) -> Result<Vec<Consumer>> {
        let key = format!("{}:consumers", self.options.prefix);
        let seen: Vec<(String, f64)> = redis::cmd("ZRANGE")
            .arg(key)
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query_async(&mut self.conn())
            .await
            .map_err(QueueError::backend)?;
        Ok(seen
            .into_iter()
            .map(|(name, last_seen)| Consumer {
                name,
                last_seen: last_seen as Millis,
            })
            .collect())
    }

    /// Deletes consumers not seen for `consumer_ttl` that own no pending
    /// entry; returns how many. Part of [`crate::Queue::reclaim_expired`].
    pub async fn forget_idle_consumers(&self) -> Result<u64> {
        let mut call = self.call(&SCRIPTS.forget_consumers);
        call.arg(super::ms(self.options.consumer_ttl));
        call.invoke_async(&mut self.conn())
            .await
            .map_err(QueueError::backend)
    }
}

impl RedisQueue {
    /// Of `(tenant, proposal)` pairs, those with no entry in the queue (never
    /// enqueued, acked, or lost with a Redis that restarted without
    /// persistence): one pipelined `HEXISTS` per pair on the per-tenant id
    /// hash that makes enqueue idempotent. A dead-lettered proposal counts as
    /// present.
    pub async fn missing<'a>(
        &self,
        pairs: &'a [(&'a str, &'a str)],
    ) -> Result<Vec<(&'a str, &'a str)>> {
        if pairs.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for (tenant, proposal) in pairs {
            pipe.cmd("HEXISTS")
                .arg(format!("{}:ids:{tenant}", self.options.prefix))
                .arg(*proposal);
        }
        let present: Vec<bool> = pipe
            .query_async(&mut self.conn())
            .await
            .map_err(QueueError::backend)?;
        Ok(pairs
            .iter()
            .zip(present)
            .filter(|(_, present)| !present)
            .map(|(pair, _)| *pair)
            .collect())
    }
}
