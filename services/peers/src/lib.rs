//! What the processes of one deployment tell each other (production: through
//! Redis). Two things travel: wake-ups — "events were committed", so every API
//! replica's fan-out reads the event log now rather than at its next poll, and
//! "proposals were enqueued", so idle workers in every process fetch now — and
//! suppression invalidations (an SOP or target changed on one replica). Delivery
//! is at most once: the event log and the queue stay the record (a missed
//! wake-up costs one poll interval) and a subscriber told
//! [`PeerSignal::Reconnected`] must assume it missed invalidations.
//!
//! Beside the messages, the shared tier of the rejection cache: a rejection
//! stored under its fingerprint answers a retry on any replica, including one
//! started after the rejection. Each scope's last change is kept beside it, so
//! a reader can tell a rejection that rests on facts changed since.

mod redis;

use std::time::Duration;

use async_trait::async_trait;
use countersign_domain::Millis;
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;

pub use redis::RedisPeers;

/// What a peers operation could not do (the backend down or too slow). The
/// backend's own error is kept as the source (for the log), never as its type.
#[derive(Debug, thiserror::Error)]
#[error("peers unavailable: {0}")]
pub struct PeersError(#[source] Box<dyn std::error::Error + Send + Sync>);

impl PeersError {
    /// A backend's error, kept as the source.
    pub fn backend(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        PeersError(Box::new(error))
    }
}

pub type Result<T, E = PeersError> = std::result::Result<T, E>;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PeerMessage {
    /// Events were committed: read the event log.
    Events,
    /// Proposals were enqueued for review: idle workers, fetch.
    Enqueued,
    /// A scope of `tenant` (`action:<a>`, `target:<t>` or `policy`) changed at `at`.
    Invalidate {
        tenant: String,
        scope: String,
        at: Millis,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerSignal {
    Message(PeerMessage),
    /// The subscription was re-established: messages may have been lost.
    Reconnected,
}

/// A rejection from the shared tier, with the last change of each scope asked about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedRejection {
    pub value: Vec<u8>,
    /// The latest change among the scopes asked about, if any.
    pub changed_at: Option<Millis>,
}

#[async_trait]
pub trait Peers: Send + Sync + 'static {
    /// Tells every other process (not this one).
    async fn publish(&self, message: &PeerMessage) -> Result<()>;
    /// What other processes tell.
    fn subscribe(&self) -> broadcast::Receiver<PeerSignal>;
    /// The rejection cached under `fingerprint`, with the latest change of
    /// `scopes` of `tenant`.
    async fn rejection(
        &self,
        tenant: &str,
        fingerprint: &str,
        scopes: &[String],
    ) -> Result<Option<SharedRejection>>;
    /// Caches a rejection for `ttl`.
    async fn put_rejection(&self, fingerprint: &str, value: &[u8], ttl: Duration) -> Result<()>;
    /// Records that `scope` of `tenant` changed at `at` (kept for `keep`).
    async fn scope_changed(
        &self,
        tenant: &str,
        scope: &str,
        at: Millis,
        keep: Duration,
    ) -> Result<()>;
}
