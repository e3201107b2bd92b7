//! [`Peers`] on Redis: PUBLISH/SUBSCRIBE on `{prefix}:peers` for the messages
//! (each tagged with its sender, so a process ignores its own), and keys for
//! the shared rejection tier: `{prefix}:supp:r:{fingerprint}` (the rejection,
//! expiring with it) and the hash `{prefix}:supp:c:{tenant}` (scope → when it
//! last changed).

use std::{
    sync::{Arc, LazyLock},
    time::Duration,
};

use async_trait::async_trait;
use countersign_domain::Millis;
use redis::{
    AsyncCommands, Client,
    aio::{ConnectionManager, ConnectionManagerConfig},
};
use serde::{Deserialize, Serialize};
use tokio::{
    sync::{broadcast, watch},
    task::JoinHandle,
};
use tokio_stream::StreamExt;

use crate::{PeerMessage, PeerSignal, Peers, PeersError, Result, SharedRejection};

/// Records a scope's change; never moves it back in time (replicas may race).
static SCOPE_CHANGED: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"local old = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
          if tonumber(ARGV[2]) > old then redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) end
          redis.call('PEXPIRE', KEYS[1], ARGV[3])
          return 1",
    )
});

/// Pause before subscribing again after the subscription broke.
const RESUBSCRIBE_AFTER: Duration = Duration::from_millis(500);

#[derive(Serialize, Deserialize)]
struct Envelope {
    from: String,
    #[serde(flatten)]
    message: PeerMessage,
}

pub struct RedisPeers {
    conn: ConnectionManager,
    prefix: String,
    /// This process's name on the channel.
    origin: String,
    signals: broadcast::Sender<PeerSignal>,
    subscribed: watch::Receiver<bool>,
    listener: JoinHandle<()>,
}

impl Drop for RedisPeers {
    fn drop(&mut self) {
        self.listener.abort();
    }
}

impl RedisPeers {
    /// Connects lazily (Redis may be down now: commands fail until it is up)
    /// and keeps a subscription in the background, re-established whenever it
    /// breaks. Fails only on a malformed URL. Needs a Tokio runtime.
    pub fn new(url: &str, prefix: &str, timeout: Duration) -> Result<Arc<Self>> {
        let client = Client::open(url).map_err(PeersError::backend)?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            .set_number_of_retries(2);
        let conn = ConnectionManager::new_lazy_with_config(client.clone(), config)
            .map_err(PeersError::backend)?;
        let origin = format!("{}-{:016x}", std::process::id(), rand::random::<u64>());
        let (signals, _) = broadcast::channel(1024);
        let (subscribed_tx, subscribed) = watch::channel(false);
        let listener = tokio::spawn(listen(
            client,
            format!("{prefix}:peers"),
            origin.clone(),
            signals.clone(),
            subscribed_tx,
        ));
        Ok(Arc::new(RedisPeers {
            conn,
            prefix: prefix.to_owned(),
            origin,
            signals,
            subscribed,
            listener,
        }))
    }

    /// Waits (up to `within`) until this process hears what others publish.
    pub async fn subscribed(&self, within: Duration) -> bool {
        let mut subscribed = self.subscribed.clone();
        tokio::time::timeout(within, subscribed.wait_for(|&on| on))
            .await
            .is_ok_and(|on| on.is_ok())
    }

    fn rejection_key(&self, fingerprint: &str) -> String {
        format!("{}:supp:r:{fingerprint}", self.prefix)
    }

    fn changes_key(&self, tenant: &str) -> String {
        format!("{}:supp:c:{tenant}", self.prefix)
    }
}

async fn listen(
    client: Client,
    channel: String,
    origin: String,
    signals: broadcast::Sender<PeerSignal>,
    subscribed: watch::Sender<bool>,
) {
    let mut ever = false;
    loop {
        match client.get_async_pubsub().await {
            Ok(mut pubsub) => match pubsub.subscribe(&channel).await {
                Ok(()) => {
                    if ever {
                        // Whatever was published meanwhile is lost to this process.
                        tracing::info!(%channel, "peers: subscribed again");
                        let _ = signals.send(PeerSignal::Reconnected);
                    }
                    ever = true;
                    subscribed.send_replace(true);
                    let mut messages = pubsub.on_message();
                    while let Some(message) = messages.next().await {
                        let Ok(payload) = message.get_payload::<Vec<u8>>() else {
                            continue;
                        };
                        match serde_json::from_slice::<Envelope>(&payload) {
                            Ok(envelope) if envelope.from != origin => {
                                let _ = signals.send(PeerSignal::Message(envelope.message));
                            }
                            Ok(_) => {}
                            Err(error) => {
                                tracing::warn!(%error, "peers: a message that is not ours")
                            }
                        }
                    }
                    subscribed.send_replace(false);
                    tracing::warn!(%channel, "peers: subscription lost");
                }
                Err(error) => tracing::warn!(%error, "peers: cannot subscribe"),
            },
            Err(error) => tracing::debug!(%error, "peers: Redis unreachable"),
        }
        tokio::time::sleep(RESUBSCRIBE_AFTER).await;
    }
}

#[async_trait]
impl Peers for RedisPeers {
    async fn publish(&self, message: &PeerMessage) -> Result<()> {
        let envelope = Envelope {
            from: self.origin.clone(),
            message: message.clone(),
        };
        let payload = serde_json::to_vec(&envelope).expect("a message serialises");
        let _: i64 = self
            .conn
            .clone()
            .publish(format!("{}:peers", self.prefix), payload)
            .await
            .map_err(PeersError::backend)?;
        Ok(())
    }

    fn subscribe(&self) -> broadcast::Receiver<PeerSignal> {
        self.signals.subscribe()
    }

    async fn rejection(
        &self,
        tenant: &str,
        fingerprint: &str,
        scopes: &[String],
    ) -> Result<Option<SharedRejection>> {
        let mut conn = self.conn.clone();
        let (value, changes): (Option<Vec<u8>>, Vec<Option<Millis>>) = if scopes.is_empty() {
            (
                conn.get(self.rejection_key(fingerprint))
                    .await
                    .map_err(PeersError::backend)?,
                Vec::new(),
            )
        } else {
            let mut pipe = redis::pipe();
            pipe.get(self.rejection_key(fingerprint));
            pipe.cmd("HMGET").arg(self.changes_key(tenant)).arg(scopes);
            pipe.query_async(&mut conn)
                .await
                .map_err(PeersError::backend)?
        };
        Ok(value.map(|value| SharedRejection {
            value,
            changed_at: changes.into_iter().flatten().max(),
        }))
    }

    async fn put_rejection(&self, fingerprint: &str, value: &[u8], ttl: Duration) -> Result<()> {
        let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let _: () = redis::cmd("SET")
            .arg(self.rejection_key(fingerprint))
            .arg(value)
            .arg("PX")
            .arg(ms)
            .query_async(&mut self.conn.clone())
            .await
            .map_err(PeersError::backend)?;
        Ok(())
    }

    async fn scope_changed(
        &self,
        tenant: &str,
        scope: &str,
        at: Millis,
        keep: Duration,
    ) -> Result<()> {
        let key = self.changes_key(tenant);
        let ms = u64::try_from(keep.as_millis()).unwrap_or(u64::MAX).max(1);
        let _: i64 = SCOPE_CHANGED
            .key(key)
            .arg(scope)
            .arg(at)
            .arg(ms)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(PeersError::backend)?;
        Ok(())
    }
}
