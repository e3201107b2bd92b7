use std::{sync::Arc, time::Duration};

use countersign_domain::gates::{ReviewFacts, Verdict};
use countersign_model::Models;

/// The function that turns facts into a verdict: the domain's gates in
/// production. Tests may swap in one that misbehaves (panics, drops gates) to
/// prove that a broken reviewer never approves.
pub type Evaluator = Arc<dyn Fn(&ReviewFacts) -> Verdict + Send + Sync>;

#[derive(Clone)]
pub struct ReviewerConfig {
    /// Names workers `NAME/0`, `NAME/1`, … (and shows up as the decision's reviewer).
    pub name: String,
    pub workers: usize,
    /// Express workers besides `workers`: they take only tenants nobody is
    /// reviewing ([`countersign_queue::Queue::fetch_idle_tenants`]), so a
    /// tenant's first proposal is not held behind another tenant's backlog.
    pub express_workers: usize,
    /// Entries leased per fetch.
    pub batch: usize,
    /// How long a worker holds an entry before another may take it.
    pub lease: Duration,
    /// Leases after which the proposal is REJECTED "review failed".
    pub max_attempts: u32,
    /// From REVIEWING to decision; past it the proposal is TIMED_OUT.
    pub review_deadline: Duration,
    /// Wait before an entry whose review failed is tried again.
    pub retry_delay: Duration,
    /// How often an idle worker looks for work that no event announced
    /// (another process submitted it, a lease expired).
    pub idle_poll: Duration,
    /// How often the janitor reclaims expired leases and times out overdue reviews.
    pub janitor_every: Duration,
    pub evaluator: Evaluator,
    /// The operator's model endpoints, which tenants' model profiles name
    /// (none: no proposal is reviewed by a model).
    pub models: Models,
}

impl ReviewerConfig {
    pub fn with_workers(workers: usize) -> Self {
        ReviewerConfig {
            name: "reviewer".to_owned(),
            workers,
            express_workers: 1,
            batch: 16,
            lease: Duration::from_secs(30),
            max_attempts: 3,
            review_deadline: Duration::from_secs(60),
            retry_delay: Duration::from_secs(1),
            idle_poll: Duration::from_millis(250),
            janitor_every: Duration::from_secs(1),
            evaluator: Arc::new(countersign_domain::gates::evaluate),
            models: Models::default(),
        }
    }
}

impl std::fmt::Debug for ReviewerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReviewerConfig")
            .field("name", &self.name)
            .field("workers", &self.workers)
            .field("express_workers", &self.express_workers)
            .field("batch", &self.batch)
            .field("lease", &self.lease)
            .field("max_attempts", &self.max_attempts)
            .field("review_deadline", &self.review_deadline)
            .field("models", &self.models.names())
            .finish_non_exhaustive()
    }
}
