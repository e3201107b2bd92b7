//! Group commit for submissions, for both backends: callers hand their
//! proposal to one committer task and wait for its answer; the committer takes
//! every submission waiting at that moment (up to `MAX_GROUP`) and commits
//! them in one transaction, then answers each. OK still means committed. Each
//! backend supplies how a group is committed (`sqlite::group_commit`,
//! `postgres::group_commit`).

use std::future::Future;

use tokio::sync::{mpsc, oneshot};

use crate::{NewProposal, Result, StoreError, StoreEvent, SubmitOutcome};

/// The most submissions one transaction takes.
pub(crate) const MAX_GROUP: usize = 256;

pub(crate) type Inserted = Result<(SubmitOutcome, Option<StoreEvent>)>;
pub(crate) type Reply = oneshot::Sender<Inserted>;
pub(crate) type Group = Vec<(NewProposal, Reply)>;

#[derive(Debug, Clone)]
pub(crate) struct Submitter {
    jobs: mpsc::Sender<(NewProposal, Reply)>,
}

impl Submitter {
    /// Starts the committer task; `commit` answers every reply of its group.
    pub(crate) fn start<F, Fut>(commit: F) -> Submitter
    where
        F: Fn(Group) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send,
    {
        let (jobs, mut rx) = mpsc::channel::<(NewProposal, Reply)>(4 * MAX_GROUP);
        tokio::spawn(async move {
            while let Some(first) = rx.recv().await {
                let mut group = vec![first];
                while group.len() < MAX_GROUP {
                    match rx.try_recv() {
                        Ok(job) => group.push(job),
                        Err(_) => break,
                    }
                }
                commit(group).await;
            }
        });
        Submitter { jobs }
    }

    pub(crate) async fn submit(&self, new: NewProposal) -> Inserted {
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
