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

use countersign_queue::{PeerMessage, Peers, RedisPeers};
use countersign_reviewer::{OutboxTasks, Publisher, ReviewerConfig, Reviewers, relay_enqueued};
use countersign_store::DynStore;
use tokio::{
    sync::{
        broadcast::error::{RecvError, TryRecvError},
        watch,
    },
    task::{JoinHandle, JoinSet},
};

use crate::{
    backends::{Backends, Production},
    config::Role,
    queue_gauges, statistics,
};

pub enum Background {
    Embedded {
        reviewers: Option<Reviewers>,
        stop: watch::Sender<bool>,
        gauges: JoinHandle<()>,
    },
    Production {
        stop: watch::Sender<bool>,
        /// The reviewers and outbox, and the statistics keeper; a set so that
        /// dropping it (the grace period over) aborts them.
        task: JoinSet<()>,
    },
}

impl Background {
    pub fn start(backends: Backends, role: Role, config: ReviewerConfig) -> Background {
        let workers = role != Role::Api;
        match backends {
            Backends::Embedded { store, queue } => {
                let (stop, stopped) = watch::channel(false);
                let gauges = queue_gauges::spawn(store.clone(), queue.clone(), stopped);
                let reviewers = workers.then(|| {
                    tracing::info!(workers = config.workers, express = config.express_workers, deadline = ?config.review_deadline, "reviewers starting");
                    Reviewers::start(store, queue, config)
                });
                Background::Embedded {
                    reviewers,
                    stop,
                    gauges,
                }
            }
            Backends::Production(production) => {
                let (stop, stopped) = watch::channel(false);
                let mut task = JoinSet::new();
                task.spawn(statistics::keep(production.store.clone(), stopped.clone()));
                task.spawn(run(production, workers, config, stopped));
                Background::Production { stop, task }
            }
        }
    }

    /// Stops the reviewers (each finishes its review) and the outbox tasks.
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
                let _ = stop.send(true);
                let _ = gauges.await;
            }
            Background::Production { stop, mut task } => {
                let _ = stop.send(true);
                while let Some(joined) = task.join_next().await {
                    if let Err(error) = joined {
                        tracing::error!(%error, "background tasks failed");
                    }
                }
            }
        }
    }
}

async fn run(
    production: Production,
    workers: bool,
    config: ReviewerConfig,
    mut stop: watch::Receiver<bool>,
) {
    let Some(queue) = production.connect_queue(&mut stop).await else {
        return;
    };
    let store: DynStore = production.store.clone();
    let announcer = tokio::spawn(announce_events(store.clone(), production.peers.clone()));
    let gauges = queue_gauges::spawn(store.clone(), queue.clone(), stop.clone());
    let publisher = Publisher {
        store: store.clone(),
        outbox: production.store.clone(),
        queue: queue.clone(),
        peers: Some(production.peers.clone()),
        config: production.outbox.clone(),
    };
    // Another process's enqueue wakes this one's idle workers.
    let relay = workers.then(|| relay_enqueued(queue.clone(), production.peers.clone()));
    let outbox = OutboxTasks::start(publisher, workers);
    let reviewers = workers.then(|| {
        tracing::info!(workers = config.workers, express = config.express_workers, deadline = ?config.review_deadline, "reviewers starting");
        Reviewers::start(store, queue, config)
    });
    let _ = stop.wait_for(|stopped| *stopped).await;
    if let Some(reviewers) = reviewers {
        reviewers.shutdown().await;
    }
    outbox.shutdown().await;
    announcer.abort();
    if let Some(relay) = relay {
        relay.abort();
    }
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
