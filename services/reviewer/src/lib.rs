//! Reviewer workers. Each worker leases proposals from the queue, moves them
//! to REVIEWING, gathers the facts, runs the gates and records the decision in
//! one transaction (or, where a tenant's route says so, escalates the
//! proposal to people), then acks. Every failure path ends in a retry, a
//! rejection or a time-out — never in an approval. Where a tenant's model
//! profile asks for it, a model reviews what the gates would approve or
//! escalate, in a task of its own per proposal (`model_stage`), and can only
//! make the decision stricter. The janitor also expires escalations nobody
//! completed in time.

mod at_submission;
mod config;
mod janitor;
mod model_stage;
mod sequencer;
mod trace_context;
mod worker;

use std::sync::Arc;

use countersign_queue::DynQueue;
use countersign_store::DynStore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

pub use at_submission::AtSubmission;
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
        let model = Arc::new(model_stage::ModelStage::new(
            config.models.clone(),
            store.clone(),
        ));
        let mut tasks = JoinSet::new();
        let host = config.name.clone();
        let worker = |id: String, lane: Lane| worker::Worker {
            id,
            lane,
            store: store.clone(),
            escalations: store.clone(),
            changes: store.clone(),
            queue: queue.clone(),
            config: config.clone(),
            model: model.clone(),
        };
        // One recorder for the process's model reviews, whichever worker
        // asked: the results that finished while it wrote the last group go
        // in the next, so the fewest transactions record them. It ends once
        // every worker, and every review it asked, is done.
        let (answers, answered) = tokio::sync::mpsc::unbounded_channel();
        let recorder = Arc::new(worker(format!("{host}/recorder"), Lane::Shared));
        tasks.spawn(recorder.record_answers(answered));
        let shared = (0..config.workers).map(|n| (format!("{host}/{n}"), Lane::Shared));
        let express =
            (0..config.express_workers).map(|n| (format!("{host}/express/{n}"), Lane::Express));
        for (id, lane) in shared.chain(express) {
            tasks.spawn(worker(id, lane).run(stopped.clone(), answers.clone()));
        }
        drop(answers);
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
    /// A model review still waiting gives its lease back; a review left
    /// half-done keeps its lease, which expires and is reclaimed.
    pub async fn shutdown(mut self) {
        self.stop.cancel();
        while self.tasks.join_next().await.is_some() {}
    }
}
