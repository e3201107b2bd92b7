//! Group commit for submissions. In WAL mode a commit writes every page it
//! touched; a proposal touches about a dozen (the row, its indexes, its queue
//! entry and event). Submissions that arrive together share one transaction,
//! so the pages they share are written once. Each caller hears back only after
//! the commit: OK still means durable.

use sqlx::SqlitePool;
use tokio::sync::{mpsc, oneshot};

use super::proposals;
use crate::{NewProposal, Result, StoreError, StoreEvent, SubmitOutcome};

/// The most submissions one transaction takes.
const MAX_GROUP: usize = 256;

type Reply = oneshot::Sender<Result<(SubmitOutcome, Option<StoreEvent>)>>;

#[derive(Debug, Clone)]
pub struct Submitter {
    jobs: mpsc::Sender<(NewProposal, Reply)>,
}

impl Submitter {
    /// Starts the committer task on the writer pool.
    pub fn start(writer: SqlitePool) -> Submitter {
        let (jobs, rx) = mpsc::channel(4 * MAX_GROUP);
        tokio::spawn(run(writer, rx));
        Submitter { jobs }
    }

    pub async fn submit(&self, new: NewProposal) -> Result<(SubmitOutcome, Option<StoreEvent>)> {
        let (reply, answer) = oneshot::channel();
        self.jobs
            .send((new, reply))
            .await
            .map_err(|_| StoreError::Unavailable("the store is shutting down".into()))?;
        answer
            .await
            .map_err(|_| StoreError::Unavailable("the submission was dropped".into()))?
    }
}

async fn run(writer: SqlitePool, mut rx: mpsc::Receiver<(NewProposal, Reply)>) {
    while let Some(first) = rx.recv().await {
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(job) => group.push(job),
                Err(_) => break,
            }
        }
        commit(&writer, group).await;
    }
}

#[tracing::instrument(name = "store.sqlite.commit_proposals", level = "debug", skip_all, fields(n = group.len()))]
async fn commit(writer: &SqlitePool, group: Vec<(NewProposal, Reply)>) {
    let mut tx = match writer.begin().await {
        Ok(tx) => tx,
        Err(error) => {
            for (_, reply) in group {
                let _ = reply.send(Err(StoreError::Unavailable(error.to_string())));
            }
            return;
        }
    };
    // A failed statement fails only its own submission; the others go on.
    let mut results = Vec::with_capacity(group.len());
    let mut replies = Vec::with_capacity(group.len());
    for (new, reply) in group {
        results.push(proposals::insert(&mut tx, new).await);
        replies.push(reply);
    }
    match tx.commit().await {
        Ok(()) => {
            for (result, reply) in results.into_iter().zip(replies) {
                let _ = reply.send(result);
            }
        }
        Err(error) => {
            for reply in replies {
                let _ = reply.send(Err(StoreError::Unavailable(format!(
                    "commit failed: {error}"
                ))));
            }
        }
    }
}
