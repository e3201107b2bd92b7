//! What `serve` runs beside (or instead of) the API: the reviewers, and on
//! PostgreSQL the outbox publisher and sweeper that feed the Redis queue.
//!
//! Roles on PostgreSQL + Redis: every role runs the publisher (the API's wakes
//! on its own submissions; a worker's polls and so also covers an API replica
//! that stopped before publishing); `worker` and `all` run the reviewers and
//! the sweeper. Redis is connected in the background, so the API accepts (and
//! the outbox keeps) submissions while Redis is unreachable.

use countersign_reviewer::{OutboxTasks, Publisher, ReviewerConfig, Reviewers};
use countersign_store::DynStore;
use tokio::{sync::watch, task::JoinHandle};

use crate::{
    backends::{Backends, Production},
    config::Role,
    queue_gauges,
};

pub enum Background {
    Embedded {
        reviewers: Option<Reviewers>,
        stop: watch::Sender<bool>,
        gauges: JoinHandle<()>,
    },
    Production {
        stop: watch::Sender<bool>,
        task: JoinHandle<()>,
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
                    tracing::info!(workers = config.workers, deadline = ?config.review_deadline, "reviewers starting");
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
                let task = tokio::spawn(run(production, workers, config, stopped));
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
            Background::Production { stop, task } => {
                let _ = stop.send(true);
                if let Err(error) = task.await {
                    tracing::error!(%error, "background tasks failed");
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
    let gauges = queue_gauges::spawn(store.clone(), queue.clone(), stop.clone());
    let publisher = Publisher {
        store: store.clone(),
        outbox: production.store.clone(),
        queue: queue.clone(),
        config: production.outbox.clone(),
    };
    let outbox = OutboxTasks::start(publisher, workers);
    let reviewers = workers.then(|| {
        tracing::info!(workers = config.workers, deadline = ?config.review_deadline, "reviewers starting");
        Reviewers::start(store, queue, config)
    });
    let _ = stop.wait_for(|stopped| *stopped).await;
    if let Some(reviewers) = reviewers {
        reviewers.shutdown().await;
    }
    outbox.shutdown().await;
    let _ = gauges.await;
}
