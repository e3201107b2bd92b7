//! What `serve` runs beside (or instead of) the API: the reviewers, and on
//! PostgreSQL the outbox publisher and sweeper that feed the Redis queue.
//!
//! Roles on PostgreSQL + Redis: every role runs the publisher (the API's wakes
//! on its own submissions and announces what it enqueued to the other
//! processes, whose idle workers fetch at once; a worker's polls and so also
//! covers an API replica that stopped before publishing); `worker` and `all`
//! run the reviewers and the sweeper. Redis is connected in the background, so
//! the API accepts (and the outbox keeps) submissions while Redis is
//! unreachable. On PostgreSQL every role also keeps the planner's statistics
//! current (`statistics`).

use std::sync::Arc;

use countersign_api::QueueDepths;
use countersign_peers::{PeerMessage, Peers, RedisPeers};
use countersign_queue::{OutboxTasks, Publisher, RedisQueue, relay_enqueued};
use countersign_reviewer::{ReviewerConfig, Reviewers, submissions};
use countersign_store::DynStore;
use tokio::{
    sync::broadcast::error::{RecvError, TryRecvError},
    task::{JoinHandle, JoinSet},
};
use tokio_util::sync::CancellationToken;

use crate::{
    backends::{Backends, Production},
    config::Role,
    queue_gauges, statistics,
};

/// The background's tasks hold children of `stop`, itself a child of the
/// process's shutdown token: the reviewers (and on PostgreSQL the statistics
/// keeper and the wait for Redis) stop first, at [`Background::shutdown`];
/// the rest once the reviewers have finished.
pub enum Background {
    Embedded {
        reviewers: Option<Reviewers>,
        stop: CancellationToken,
        gauges: JoinHandle<()>,
    },
    Production {
        /// Cancelled first (a child of the background's own token, which
        /// `run` cancels once the reviewers and the outbox have stopped).
        intake: CancellationToken,
        /// The reviewers and outbox, and the statistics keeper; a set so that
        /// dropping it (the grace period over) aborts them.
        task: JoinSet<()>,
    },
}

impl Background {
    pub fn start(
        backends: Backends,
        role: Role,
        config: ReviewerConfig,
        depths: QueueDepths,
        shutdown: &CancellationToken,
    ) -> Background {
        let workers = role != Role::Api;
        let stop = shutdown.child_token();
        match backends {
            Backends::Embedded { store, queue } => {
                let gauges =
                    queue_gauges::spawn(store.clone(), queue.clone(), depths, stop.clone());
                let reviewers = workers.then(|| {
                    tracing::info!(workers = config.workers, express = config.express_workers, deadline = ?config.review_deadline, "reviewers starting");
                    Reviewers::start(store, queue, config, &stop)
                });
                Background::Embedded {
                    reviewers,
                    stop,
                    gauges,
                }
            }
            Backends::Production(production) => {
                let intake = stop.child_token();
                let mut task = JoinSet::new();
                task.spawn(statistics::keep(production.store.clone(), intake.clone()));
                task.spawn(run(
                    production,
                    workers,
                    config,
                    depths,
                    stop,
                    intake.clone(),
                ));
                Background::Production { intake, task }
            }
        }
    }

    /// Stops the reviewers (each finishes its review), then the rest.
    pub async fn shutdown(self) {
        match self {
            Background::Embedded {
                reviewers,
                stop,
                gauges,
            } => {
                if let Some(reviewers) = reviewers {
                    reviewers.shutdown().await;
                }
                stop.cancel();
                let _ = gauges.await;
            }
            Background::Production { intake, mut task } => {
                intake.cancel();
                while let Some(joined) = task.join_next().await {
                    if let Err(error) = joined {
                        tracing::error!(%error, "background tasks failed");
                    }
                }
            }
        }
    }
}

/// The production background: waits for Redis, then runs the outbox, the
/// reviewers and the wake-ups until `intake` is cancelled; stops the
/// reviewers, then the outbox, then (cancelling `stop`) the rest.
async fn run(
    production: Production,
    workers: bool,
    config: ReviewerConfig,
    depths: QueueDepths,
    stop: CancellationToken,
    intake: CancellationToken,
) {
    let Some(queue) = RedisQueue::connect_retrying(
        &production.redis_url,
        production.queue_options.clone(),
        &intake,
    )
    .await
    .map(Arc::new) else {
        return;
    };
    let store: DynStore = production.store.clone();
    let announcer = tokio::spawn(announce_events(store.clone(), production.peers.clone()));
    let gauges = queue_gauges::spawn(store.clone(), queue.clone(), depths, stop.clone());
    let publisher = Publisher {
        outbox: production.store.clone(),
        queue: queue.clone(),
        peers: Some(production.peers.clone()),
        config: production.outbox.clone(),
    };
    // Another process's enqueue wakes this one's idle workers.
    let relay = workers.then(|| relay_enqueued(queue.clone(), production.peers.clone()));
    let outbox = OutboxTasks::start(publisher, submissions(store.as_ref()), workers, &stop);
    let reviewers = workers.then(|| {
        tracing::info!(workers = config.workers, express = config.express_workers, deadline = ?config.review_deadline, "reviewers starting");
        Reviewers::start(store, queue, config, &intake)
    });
    intake.cancelled().await;
    if let Some(reviewers) = reviewers {
        reviewers.shutdown().await;
    }
    outbox.shutdown().await;
    announcer.abort();
    if let Some(relay) = relay {
        relay.abort();
    }
    stop.cancel();
    let _ = gauges.await;
}

/// Tells the other processes whenever this one commits events (a submission,
/// a review started, a decision), so their fan-outs read them at once. Signals
/// that pile up while one is being sent go out as one.
async fn announce_events(store: DynStore, peers: Arc<RedisPeers>) {
    let mut events = store.subscribe();
    loop {
        match events.recv().await {
            Ok(_) | Err(RecvError::Lagged(_)) => {}
            Err(RecvError::Closed) => return,
        }
        while let Ok(_) | Err(TryRecvError::Lagged(_)) = events.try_recv() {}
        if let Err(error) = peers.publish(&PeerMessage::Events).await {
            tracing::debug!(%error, "events not announced to other processes (they poll)");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::{sync::Arc, time::Duration};

    use countersign_store::EmbeddedQueue;

    use super::*;

    /// The background's tasks hold children of the process's token:
    /// cancelling it alone stops them (here, the queue gauges, which
    /// otherwise stop only after the reviewers).
    #[tokio::test]
    async fn cancelling_the_process_token_stops_the_background() {
        let (sqlite, _dir) = countersign_test_support::sqlite::store().await;
        let queue = Arc::new(EmbeddedQueue::new(sqlite.writer()));
        let backends = Backends::Embedded {
            store: Arc::new(sqlite),
            queue,
        };
        let shutdown = CancellationToken::new();
        let background = Background::start(
            backends,
            Role::All,
            ReviewerConfig::with_workers(1),
            QueueDepths::default(),
            &shutdown,
        );
        let Background::Embedded {
            reviewers: Some(_reviewers),
            gauges,
            ..
        } = background
        else {
            panic!("the embedded background with reviewers")
        };
        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(5), gauges)
            .await
            .expect("the gauges stop")
            .unwrap();
    }
}
