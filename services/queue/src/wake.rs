//! Idle workers wake when any process enqueues, not only their own: an API
//! replica's publisher announces what it enqueued (`PeerMessage::Enqueued`),
//! and each worker process relays the word to its idle workers. Without it a
//! worker process (`serve --role worker`) heard of a submission only at its
//! next idle poll. The announcement is a wake-up, never the record: a lost one
//! costs one poll interval.

use std::sync::Arc;

use countersign_peers::{PeerMessage, PeerSignal, Peers};
use tokio::{sync::broadcast::error::RecvError, task::JoinHandle};

use crate::RedisQueue;

/// Tells the other processes that this one enqueued proposals.
pub async fn announce_enqueued(peers: &dyn Peers) {
    if let Err(error) = peers.publish(&PeerMessage::Enqueued).await {
        tracing::debug!(%error, "enqueues not announced to other processes (their workers poll)");
    }
}

/// Wakes `queue`'s idle workers in this process whenever another process
/// announces an enqueue (or the subscription lost words, which may have been
/// such announcements). Runs until aborted.
pub fn relay_enqueued(queue: Arc<RedisQueue>, peers: Arc<dyn Peers>) -> JoinHandle<()> {
    let mut signals = peers.subscribe();
    tokio::spawn(async move {
        loop {
            match signals.recv().await {
                Ok(PeerSignal::Message(PeerMessage::Enqueued) | PeerSignal::Reconnected)
                | Err(RecvError::Lagged(_)) => queue.wake_idle_workers(),
                Ok(PeerSignal::Message(_)) => {}
                Err(RecvError::Closed) => return,
            }
        }
    })
}
