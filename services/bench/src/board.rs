//! One shared `Watch` stream that hands each decision to the client waiting
//! for it (the `--via watch` mode of `submit-decide`).

use std::{collections::HashMap, sync::Arc, time::Duration};

use countersign_proto::{
    client::BearerAuth,
    v1::{Proposal, WatchRequest, notification_service_client::NotificationServiceClient},
};
use tokio::sync::{Mutex, oneshot};

#[derive(Default)]
struct Slots {
    waiting: HashMap<String, oneshot::Sender<Proposal>>,
    /// Decisions that arrived before their submitter asked.
    early: HashMap<String, Proposal>,
}

#[derive(Clone, Default)]
pub struct Board {
    slots: Arc<Mutex<Slots>>,
}

impl Board {
    /// Opens the stream (live from now) and starts dispatching.
    pub async fn open(endpoint: &str, key: &str) -> anyhow::Result<Board> {
        let mut client = NotificationServiceClient::with_interceptor(
            crate::scenario::channel(endpoint).await?,
            BearerAuth::new(key)?,
        );
        let mut stream = client
            .watch(WatchRequest {
                terminal_only: true,
                ..Default::default()
            })
            .await?
            .into_inner();
        let board = Board::default();
        let slots = board.slots.clone();
        tokio::spawn(async move {
            while let Ok(Some(n)) = stream.message().await {
                let Some(p) = n.proposal else { continue };
                let mut s = slots.lock().await;
                match s.waiting.remove(&p.id) {
                    Some(tx) => {
                        let _ = tx.send(p);
                    }
                    None => {
                        s.early.insert(p.id.clone(), p);
                    }
                }
            }
        });
        Ok(board)
    }

    /// The decided proposal `id`, or `None` after `timeout`.
    pub async fn decision(&self, id: &str, timeout: Duration) -> Option<Proposal> {
        let rx = {
            let mut s = self.slots.lock().await;
            if let Some(p) = s.early.remove(id) {
                return Some(p);
            }
            let (tx, rx) = oneshot::channel();
            s.waiting.insert(id.to_owned(), tx);
            rx
        };
        tokio::time::timeout(timeout, rx).await.ok()?.ok()
    }
}
