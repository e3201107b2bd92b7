//! The shared tier (production: Redis, through [`Peers`]): a rejection cached
//! by one replica answers a retry routed to any other, including one started
//! since; a change of an SOP, target or policy on one replica reaches the
//! others' in-process tiers. Every failure here is a miss: the retry is then
//! reviewed again, which rejects it again — never an approval.

use std::{sync::Arc, time::Duration};

use countersign_domain::{Millis, Proposal, ProposalSpec};
use countersign_peers::{PeerMessage, PeerSignal, Peers};
use serde::{Deserialize, Serialize};
use tokio::{sync::broadcast::error::RecvError, task::JoinHandle};

use super::{Entry, Scope, Suppression};

/// How long a Submit waits for the shared tier before it counts as a miss.
pub const LOOKUP_TIMEOUT: Duration = Duration::from_millis(50);

impl Scope {
    pub fn to_key(&self) -> String {
        match self {
            Scope::Action(action) => format!("action:{action}"),
            Scope::Target(target) => format!("target:{target}"),
            Scope::Policy => "policy".to_owned(),
        }
    }

    pub fn from_key(key: &str) -> Option<Scope> {
        match key.split_once(':') {
            Some(("action", action)) => Some(Scope::Action(action.to_owned())),
            Some(("target", target)) => Some(Scope::Target(target.to_owned())),
            None if key == "policy" => Some(Scope::Policy),
            _ => None,
        }
    }

    /// The scopes a rejection of `spec` rests on.
    pub fn of(spec: &ProposalSpec) -> [Scope; 3] {
        [
            Scope::Action(spec.action.clone()),
            Scope::Target(spec.target.clone()),
            Scope::Policy,
        ]
    }
}

/// An entry as the shared tier keeps it (what the in-process one keeps).
#[derive(Serialize)]
struct StoredRef<'a> {
    proposal: &'a Proposal,
    fingerprint: &'a str,
    expires_at: Millis,
    review_started: Millis,
}

#[derive(Deserialize)]
struct Stored {
    proposal: Proposal,
    fingerprint: String,
    expires_at: Millis,
    review_started: Millis,
}

pub fn encode(entry: &Entry) -> Vec<u8> {
    serde_json::to_vec(&StoredRef {
        proposal: &entry.proposal,
        fingerprint: &entry.fingerprint,
        expires_at: entry.expires_at,
        review_started: entry.review_started,
    })
    .expect("a proposal serialises")
}

/// An entry another replica kept; `None` (a miss) for anything else.
pub fn decode(bytes: &[u8]) -> Option<Entry> {
    let stored: Stored = serde_json::from_slice(bytes).ok()?;
    Some(Entry::kept(
        stored.proposal,
        stored.fingerprint,
        stored.expires_at,
        stored.review_started,
    ))
}

/// Applies what other replicas tell: their invalidations; after a lost
/// subscription, the in-process tier is emptied (invalidations may be missed).
pub fn spawn_listener(suppression: Arc<Suppression>, peers: Arc<dyn Peers>) -> JoinHandle<()> {
    let mut signals = peers.subscribe();
    tokio::spawn(async move {
        loop {
            match signals.recv().await {
                Ok(PeerSignal::Message(PeerMessage::Invalidate { tenant, scope, at })) => {
                    match Scope::from_key(&scope) {
                        Some(scope) => suppression.invalidate_local(&tenant, scope, at),
                        None => tracing::warn!(%scope, "suppression: unknown scope from a peer"),
                    }
                }
                Ok(PeerSignal::Message(PeerMessage::Events | PeerMessage::Enqueued)) => {}
                Ok(PeerSignal::Reconnected) | Err(RecvError::Lagged(_)) => {
                    suppression.forget_cached();
                }
                Err(RecvError::Closed) => return,
            }
        }
    })
}
