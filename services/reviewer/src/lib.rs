//! Reviewer workers. Each worker leases proposals from the queue, moves them
//! to REVIEWING, gathers the facts, runs the gates and records the decision in
//! one transaction (or, where a tenant's route says so, escalates the
//! proposal to people), then acks. Every failure path ends in a retry, a
//! rejection or a time-out — never in an approval. The janitor also expires
//! escalations nobody completed in time.

mod config;
mod janitor;
mod sequencer;
mod trace_context;
mod worker;

use std::sync::Arc;

use countersign_queue::DynQueue;
use countersign_store::DynStore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

pub use config::{Evaluator, ReviewerConfig};
pub use sequencer::Sequencer;
pub use worker::{Lane, submissions};

/// A running pool of workers and its janitor.
pub struct Reviewers {
    tasks: JoinSet<()>,
    stop: CancellationToken,
}

impl Reviewers {
    /// Starts `config.workers` shared and `config.express_workers` express
    /// workers, and one janitor. They stop at [`Reviewers::shutdown`], or when
    /// `shutdown` is cancelled (they hold a child of it).
    pub fn start(
        store: DynStore,
        queue: DynQueue,
        config: ReviewerConfig,
        shutdown: &CancellationToken,
    ) -> Reviewers {
        let stop = shutdown.child_token();
        let stopped = stop.clone();
        let config = Arc::new(config);
        let mut tasks = JoinSet::new();
        let host = config.name.clone();
        let shared = (0..config.workers).map(|n| (format!("{host}/{n}"), Lane::Shared));
        let express =
            (0..config.express_workers).map(|n| (format!("{host}/express/{n}"), Lane::Express));
        for (id, lane) in shared.chain(express) {
            let worker = worker::Worker {
                id,
                lane,
                store: store.clone(),
                escalations: store.clone(),
                changes: store.clone(),
                queue: queue.clone(),
                config: config.clone(),
            };
            tasks.spawn(worker.run(stopped.clone()));
        }
        if config.workers + config.express_workers > 0 {
            let sequencer = Sequencer {
                log: store.clone(),
                changes: store.clone(),
                every: config.janitor_every,
            };
            tasks.spawn(sequencer.run(stopped.clone()));
            let janitor = janitor::Janitor {
                id: format!("{host}/janitor"),
                store: store.clone(),
                escalations: store,
                queue,
                config,
            };
            tasks.spawn(janitor.run(stopped));
        }
        Reviewers { tasks, stop }
    }

    /// Asks every worker to finish its current review, and waits for them.
    /// A review left half-done keeps its lease, which expires and is reclaimed.
    pub async fn shutdown(mut self) {
        self.stop.cancel();
        while self.tasks.join_next().await.is_some() {}
    }
}
