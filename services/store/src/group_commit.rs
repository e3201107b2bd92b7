//! Group commit for submissions, for both backends: callers hand their
//! proposal to a committer task and wait for its answer; the committer takes
//! every submission waiting at that moment (up to `MAX_GROUP`) and commits
//! them in one transaction, then answers each; a committer that can go on
//! from one commit to the next (the embedded writer's thread) takes what
//! waited meanwhile itself ([`Waiting`]), so the writer does not wait for
//! the lane's task to be scheduled between groups. OK still means committed. Each
//! backend supplies how a group is committed (`sqlite::group_commit`,
//! `postgres::group_commit`) and how submissions are split into committers
//! ([`Lanes`]).
//!
//! A committer is a lane: a task with its own queue, started by the first
//! submission that needs it and kept while the store is (a lane waiting is a
//! task and an empty queue of boxed submissions, about a kilobyte; the lanes
//! are at most the tenants).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, oneshot};

use crate::{NewProposal, Result, StoreError, StoreEvent, SubmitOutcome, types::Submission};

/// The most submissions one transaction takes.
pub(crate) const MAX_GROUP: usize = 256;

pub(crate) type Inserted = Result<(SubmitOutcome, Option<StoreEvent>)>;
pub(crate) type Reply = oneshot::Sender<Inserted>;
pub(crate) type Group = Vec<(Submission, Reply)>;
/// A submission as its lane's queue holds it: boxed, so that a queue's
/// slots (allocated in blocks, and kept while the lane is) are a pointer
/// and a reply each, whatever a proposal's size.
type Job = (Box<Submission>, Reply);
type Commit = Arc<dyn Fn(Group, Waiting) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// Which submissions share a committer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lanes {
    /// One committer for every tenant: one transaction takes them all. For
    /// a store whose transactions commit one at a time anyway (SQLite's one
    /// writer), where a group that spans tenants is one commit fewer.
    One,
    /// A committer per tenant, committing beside the others: a tenant's
    /// submission never waits for another tenant's group to commit
    /// (PostgreSQL commits transactions concurrently). Two groups in flight
    /// never hold the same tenant's idempotency keys, so they never wait
    /// on each other's rows.
    PerTenant,
}

impl Lanes {
    fn of<'a>(&self, new: &'a NewProposal) -> &'a str {
        match self {
            Lanes::One => "",
            Lanes::PerTenant => &new.tenant,
        }
    }
}

#[derive(Clone)]
pub(crate) struct Submitter {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Submitter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Submitter")
            .field("lanes", &self.inner.lanes)
            .finish_non_exhaustive()
    }
}

struct Inner {
    lanes: Lanes,
    commit: Commit,
    /// The queue of each lane started.
    open: Mutex<HashMap<String, mpsc::Sender<Job>>>,
}

impl Submitter {
    /// A submitter whose lanes run `commit`, which answers every reply of
    /// its group.
    pub(crate) fn start<F, Fut>(lanes: Lanes, commit: F) -> Submitter
    where
        F: Fn(Group, Waiting) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let commit: Commit = Arc::new(move |group, waiting| Box::pin(commit(group, waiting)));
        Submitter {
            inner: Arc::new(Inner {
                lanes,
                commit,
                open: Mutex::new(HashMap::new()),
            }),
        }
    }

    pub(crate) async fn submit(&self, submission: Submission) -> Inserted {
        let (reply, answer) = oneshot::channel();
        let lane = self.inner.lane(self.inner.lanes.of(&submission.new));
        lane.send((Box::new(submission), reply))
            .await
            .map_err(|_| StoreError::Unavailable("the store is shutting down".into()))?;
        answer
            .await
            .map_err(|_| StoreError::Unavailable("the submission was dropped".into()))?
    }
}

impl Inner {
    /// The queue of the lane for `key`, started if there is none yet.
    fn lane(&self, key: &str) -> mpsc::Sender<Job> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(jobs) = open.get(key) {
            return jobs.clone();
        }
        let (jobs, rx) = mpsc::channel::<Job>(4 * MAX_GROUP);
        open.insert(key.to_owned(), jobs.clone());
        tokio::spawn(run_lane(
            Waiting(Arc::new(tokio::sync::Mutex::new(rx))),
            self.commit.clone(),
        ));
        jobs
    }
}

/// The submissions waiting in a lane's queue, for its committer to take
/// from any thread: one that can go on from a commit to the next group (the
/// embedded writer) takes them itself, and does not wait for the lane's task
/// to be scheduled in between.
#[derive(Clone)]
pub(crate) struct Waiting(Arc<tokio::sync::Mutex<mpsc::Receiver<Job>>>);

impl Waiting {
    /// Up to `most` of the submissions waiting now (none while the lane's
    /// task holds the queue).
    pub(crate) fn take(&self, most: usize) -> Group {
        let mut group = Vec::new();
        let Ok(mut rx) = self.0.try_lock() else {
            return group;
        };
        while group.len() < most {
            match rx.try_recv() {
                Ok((submission, reply)) => group.push((*submission, reply)),
                Err(_) => break,
            }
        }
        group
    }
}

/// Commits groups until every sender is gone (the store dropped).
async fn run_lane(waiting: Waiting, commit: Commit) {
    loop {
        let first = waiting.0.lock().await.recv().await;
        let Some((submission, reply)) = first else {
            return;
        };
        let mut group = vec![(*submission, reply)];
        group.extend(waiting.take(MAX_GROUP - 1));
        commit(group, waiting.clone()).await;
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use countersign_domain::{BlastRadius, OperationClass, ProposalSpec};
    use tokio::sync::Notify;

    use super::*;

    /// A submission of `tenant` on `target` (an operator's restart).
    pub(crate) fn new_proposal(tenant: &str, target: &str) -> NewProposal {
        NewProposal {
            id: NewProposal::new_id(),
            tenant: tenant.into(),
            spec: ProposalSpec {
                action: "restart".into(),
                class: OperationClass::Write,
                target: target.into(),
                parameters: Default::default(),
                reason: String::new(),
                blast_radius: BlastRadius::SingleDevice,
                operator: "ops".into(),
                context_summary: String::new(),
                incident_id: String::new(),
                labels: BTreeMap::new(),
                rollback_plan: String::new(),
                force_approve_no_sop: false,
                idempotency_key: String::new(),
            },
            submitted_by: "ci".into(),
            submitted_by_person: None,
            submitted_key: None,
            trace_parent: None,
        }
    }

    /// A lane's queue holding `n` submissions, and their answers to come.
    pub(crate) fn waiting_with(n: usize) -> (Waiting, Vec<oneshot::Receiver<Inserted>>) {
        let (jobs, rx) = mpsc::channel::<Job>(n.max(1));
        let answers = (0..n)
            .map(|_| {
                let (reply, answer) = oneshot::channel();
                jobs.try_send((Box::new(new("a")), reply))
                    .expect("room for every submission");
                answer
            })
            .collect();
        (Waiting(Arc::new(tokio::sync::Mutex::new(rx))), answers)
    }

    fn new(tenant: &str) -> Submission {
        Submission {
            new: new_proposal(tenant, "node-01"),
            review: None,
        }
    }

    /// Answers each submission with an error that names the tenants of its
    /// group, so a test can tell which submissions shared a commit.
    fn answer(group: Group) {
        let mut tenants: Vec<&str> = group.iter().map(|(n, _)| n.new.tenant.as_str()).collect();
        tenants.sort_unstable();
        tenants.dedup();
        let named = tenants.join(",");
        for (_, reply) in group {
            let _ = reply.send(Err(StoreError::Unavailable(named.clone())));
        }
    }

    fn committed(answer: Inserted) -> String {
        match answer {
            Err(StoreError::Unavailable(named)) => named,
            other => panic!("not the test's answer: {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_tenant_is_answered_while_another_tenants_group_is_still_committing() {
        let release = Arc::new(Notify::new());
        let held = release.clone();
        let submitter = Submitter::start(Lanes::PerTenant, move |group: Group, _| {
            let held = held.clone();
            async move {
                if group[0].0.new.tenant == "flood" {
                    held.notified().await;
                }
                answer(group);
            }
        });
        let flood = tokio::spawn({
            let submitter = submitter.clone();
            async move { submitter.submit(new("flood")).await }
        });
        tokio::task::yield_now().await;
        // The flood's group waits on `release`; the trickle's commits beside it.
        let trickle =
            tokio::time::timeout(Duration::from_secs(10), submitter.submit(new("trickle")))
                .await
                .expect("the trickle waited for the flood's commit");
        assert_eq!(committed(trickle), "trickle");
        assert!(!flood.is_finished());
        release.notify_one();
        assert_eq!(committed(flood.await.unwrap()), "flood");
    }

    #[tokio::test]
    async fn one_lane_commits_every_tenant_waiting_together() {
        let release = Arc::new(Notify::new());
        let held = release.clone();
        let first = Arc::new(AtomicUsize::new(0));
        let seen = first.clone();
        let submitter = Submitter::start(Lanes::One, move |group: Group, _| {
            let held = held.clone();
            let seen = seen.clone();
            async move {
                // The first group waits until the others are queued behind it.
                if seen.fetch_add(1, Ordering::SeqCst) == 0 {
                    held.notified().await;
                }
                answer(group);
            }
        });
        let mut calls = Vec::new();
        for tenant in ["a", "b", "c"] {
            let submitter = submitter.clone();
            calls.push(tokio::spawn(
                async move { submitter.submit(new(tenant)).await },
            ));
            tokio::task::yield_now().await;
        }
        while submitter.inner.open.lock().unwrap()[""].capacity() > 4 * MAX_GROUP - 2 {
            tokio::task::yield_now().await;
        }
        release.notify_one();
        let answers: Vec<String> = futures::future::join_all(calls)
            .await
            .into_iter()
            .map(|a| committed(a.unwrap()))
            .collect();
        assert_eq!(answers, ["a", "b,c", "b,c"]);
    }

    /// A committer that goes on from its group takes what waited meanwhile
    /// itself: the lane's task hands it the first group only, and the
    /// submissions queued during that commit are the committer's next group.
    #[tokio::test]
    async fn a_committer_takes_what_waited_during_its_commit_without_the_lanes_task() {
        let release = Arc::new(Notify::new());
        let held = release.clone();
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = calls.clone();
        let submitter = Submitter::start(Lanes::One, move |group: Group, waiting: Waiting| {
            let (held, counted) = (held.clone(), counted.clone());
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
                held.notified().await;
                answer(group);
                let next = waiting.take(MAX_GROUP);
                assert!(!next.is_empty(), "what waited is there to take");
                answer(next);
            }
        });
        let first = tokio::spawn({
            let submitter = submitter.clone();
            async move { submitter.submit(new("a")).await }
        });
        while calls.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        let later: Vec<_> = ["b", "c"]
            .map(|tenant| {
                let submitter = submitter.clone();
                tokio::spawn(async move { submitter.submit(new(tenant)).await })
            })
            .into_iter()
            .collect();
        while submitter.inner.open.lock().unwrap()[""].capacity() > 4 * MAX_GROUP - 2 {
            tokio::task::yield_now().await;
        }
        release.notify_one();
        assert_eq!(committed(first.await.unwrap()), "a");
        for call in later {
            assert_eq!(committed(call.await.unwrap()), "b,c");
        }
        assert_eq!(
            calls.load(Ordering::SeqCst),
            1,
            "one hand-off from the lane"
        );
    }
}
