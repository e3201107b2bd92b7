//! The outbox publisher against the test Redis, over an outbox held in
//! memory that counts its reads: this process's submissions are published by
//! their keys, the rest by reading the outbox every poll.

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use countersign_domain::ReviewKey;
use countersign_queue::{Outbox, OutboxConfig, Publisher, RedisQueue, Submissions};
use countersign_test_support::redis::queue as redis_queue;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_util::sync::CancellationToken;

/// Rows as (key, published), and how often they were read.
#[derive(Default)]
struct MemoryOutbox {
    rows: Mutex<Vec<(ReviewKey, bool)>>,
    reads: AtomicUsize,
}

impl MemoryOutbox {
    /// A row committed, as another process's (or this one's) would be.
    fn commit(&self, tenant: &str) -> ReviewKey {
        let key = ReviewKey {
            tenant: tenant.to_owned(),
            id: countersign_test_support::random_name("p-"),
        };
        self.rows.lock().unwrap().push((key.clone(), false));
        key
    }

    fn published(&self, key: &ReviewKey) -> bool {
        let rows = self.rows.lock().unwrap();
        rows.iter().any(|(k, published)| k == key && *published)
    }

    fn reads(&self) -> usize {
        self.reads.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl Outbox for MemoryOutbox {
    async fn unpublished(&self, limit: u32) -> countersign_queue::Result<Vec<ReviewKey>> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        let rows = self.rows.lock().unwrap();
        Ok(rows
            .iter()
            .filter(|(_, published)| !published)
            .map(|(key, _)| key.clone())
            .take(limit as usize)
            .collect())
    }

    async fn mark_published(&self, keys: &[ReviewKey]) -> countersign_queue::Result<()> {
        for (key, published) in self.rows.lock().unwrap().iter_mut() {
            if keys.contains(key) {
                *published = true;
            }
        }
        Ok(())
    }

    async fn undecided(
        &self,
        _after: Option<&str>,
        _limit: u32,
    ) -> countersign_queue::Result<Vec<ReviewKey>> {
        Ok(Vec::new())
    }
}

/// A running publisher polling every `poll`, and the sender of its
/// submissions.
struct Running {
    outbox: Arc<MemoryOutbox>,
    queue: Arc<RedisQueue>,
    submit: mpsc::UnboundedSender<Option<ReviewKey>>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

async fn publisher(poll: Duration) -> Running {
    let outbox = Arc::new(MemoryOutbox::default());
    let queue = Arc::new(redis_queue().await);
    let (submit, submissions) = mpsc::unbounded_channel();
    let submissions: Submissions = Box::pin(UnboundedReceiverStream::new(submissions));
    let publisher = Publisher {
        outbox: outbox.clone(),
        queue: queue.clone(),
        peers: None,
        config: OutboxConfig {
            poll,
            ..OutboxConfig::default()
        },
    };
    let stop = CancellationToken::new();
    let task = tokio::spawn(publisher.run(submissions, stop.clone()));
    Running {
        outbox,
        queue,
        submit,
        stop,
        task,
    }
}

impl Running {
    /// Waits (up to 10 s) until `key` is in Redis and marked published.
    async fn await_published(&self, key: &ReviewKey) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let pair = [(key.tenant.as_str(), key.id.as_str())];
            let in_redis = self.queue.missing(&pair).await.unwrap().is_empty();
            if in_redis && self.outbox.published(key) {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{key:?} was not published"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits until the publisher has read the outbox `n` times.
    async fn await_reads(&self, n: usize) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while self.outbox.reads() < n {
            assert!(
                tokio::time::Instant::now() < deadline,
                "read {} times",
                self.outbox.reads()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    async fn stop(self) {
        self.stop.cancel();
        self.task.await.unwrap();
    }
}

const HOUR: Duration = Duration::from_secs(3600);

#[tokio::test]
async fn a_submission_of_this_process_is_published_by_its_key_without_reading_the_outbox() {
    let running = publisher(HOUR).await;
    running.await_reads(1).await; // the read at start
    let mut keys = Vec::new();
    for _ in 0..20 {
        let key = running.outbox.commit("acme");
        running.submit.send(Some(key.clone())).unwrap();
        keys.push(key);
    }
    for key in &keys {
        running.await_published(key).await;
    }
    assert_eq!(running.outbox.reads(), 1, "the outbox was read again");
    running.stop().await;
}

#[tokio::test]
async fn rows_nobody_announced_are_published_by_the_poll_while_submissions_keep_arriving() {
    let running = publisher(Duration::from_millis(100)).await;
    running.await_reads(1).await;
    // Another process's row: no submission of this one names it.
    let theirs = running.outbox.commit("acme");
    // This process submits every 10 ms until the end: the poll still comes.
    let submit = running.submit.clone();
    let outbox = running.outbox.clone();
    let busy = tokio::spawn(async move {
        loop {
            let key = outbox.commit("busy");
            if submit.send(Some(key)).is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    running.await_published(&theirs).await;
    busy.abort();
    running.stop().await;
}

#[tokio::test]
async fn submissions_that_may_have_been_missed_make_the_publisher_read_the_outbox() {
    let running = publisher(HOUR).await;
    running.await_reads(1).await;
    let unheard = running.outbox.commit("acme");
    running.submit.send(None).unwrap();
    running.await_reads(2).await;
    running.await_published(&unheard).await;

    // Missed in the middle of submissions that were heard: those are
    // published by their keys, then the outbox is read for the rest.
    let unheard = running.outbox.commit("acme");
    let heard = running.outbox.commit("acme");
    running.submit.send(Some(heard.clone())).unwrap();
    running.submit.send(None).unwrap();
    running.await_published(&heard).await;
    running.await_published(&unheard).await;
    assert!(running.outbox.reads() >= 3, "{}", running.outbox.reads());
    running.stop().await;
}
