//! Retry-loop suppression and operator breakers, as the API applies them.
//!
//! Rejections reach [`Suppression`] through the fan-out (so it sees what any
//! reviewer decided, in this process or another). A Submit whose fingerprint
//! matches a cached rejection is answered at once with the earlier proposal
//! (after its idempotency key, if any, is honoured: the service's part); the
//! retry is counted in memory and written in batches. An operator with too
//! many recent rejections is refused until the window passes or an admin
//! resets the breaker.

mod maintenance;
mod shared;
mod tier;

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use countersign_domain::{
    Event, EventKind, Millis, Proposal, ProposalSpec, TenantPolicy,
    suppression::{Breaker, fingerprint, suppresses_retries},
};
use countersign_peers::{PeerMessage, Peers};
use countersign_store::{BreakerReset, RecentRejection, ReviewKey};

pub use maintenance::spawn_maintenance;
pub use shared::spawn_listener;
pub use tier::{Entry, LocalTier, SuppressionTier};

/// Rejections older than this are forgotten by breakers (the longest window).
pub const MAX_BREAKER_WINDOW: Duration = Duration::from_secs(24 * 3600);

#[derive(Debug, Clone, Copy)]
pub struct SuppressionConfig {
    /// Rejections the cache holds (least recently used go first).
    pub capacity: u64,
    /// About how many bytes the cache's rejections may hold in all.
    pub max_bytes: u64,
    /// How long a rejection answers identical retries.
    pub ttl: Duration,
    /// How often counted retries are written, and breaker resets read.
    pub flush_every: Duration,
}

impl Default for SuppressionConfig {
    fn default() -> Self {
        SuppressionConfig {
            capacity: 10_000,
            max_bytes: 64 * 1024 * 1024,
            ttl: Duration::from_secs(600),
            flush_every: Duration::from_secs(1),
        }
    }
}

/// What changes a rejection's premise: the tenant's SOPs for an action, or a
/// target's status or labels.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Scope {
    Action(String),
    Target(String),
    /// The tenant's review policy (it decides, e.g., force_approve_no_sop).
    Policy,
}

/// Why a submission is answered without review.
pub enum Refusal {
    /// The operator's breaker is open.
    BreakerOpen { window: Duration },
    /// An identical call was rejected moments ago.
    Suppressed(Arc<Entry>),
}

pub struct Suppression {
    config: SuppressionConfig,
    tier: Box<dyn SuppressionTier>,
    /// When each scope last changed, per tenant.
    changes: Mutex<HashMap<String, Changes>>,
    retries: Mutex<Retries>,
    /// Each operator's breaker, per tenant (two levels, so that a lookup
    /// borrows the names it is given).
    breakers: Mutex<HashMap<String, HashMap<String, Breaker>>>,
    /// The policy each tenant had at its last submission.
    policies: Mutex<HashMap<String, TenantPolicy>>,
    /// The tier other replicas share, and how they hear of changes.
    peers: Option<Arc<dyn Peers>>,
}

/// When each scope of one tenant last changed, each kind by name, so that
/// a lookup borrows the spec's.
#[derive(Debug, Default)]
struct Changes {
    actions: HashMap<String, Millis>,
    targets: HashMap<String, Millis>,
    policy: Option<Millis>,
}

impl Changes {
    fn record(&mut self, scope: Scope, at: Millis) {
        let last = match scope {
            Scope::Action(action) => self.actions.entry(action).or_insert(at),
            Scope::Target(target) => self.targets.entry(target).or_insert(at),
            Scope::Policy => self.policy.get_or_insert(at),
        };
        *last = (*last).max(at);
    }

    /// Whether a scope a rejection of `spec` rests on ([`Scope::of`]) changed
    /// at or after `since`.
    fn any_since(&self, spec: &ProposalSpec, since: Millis) -> bool {
        let after = |at: Option<&Millis>| at.is_some_and(|&at| at >= since);
        after(self.actions.get(spec.action.as_str()))
            || after(self.targets.get(spec.target.as_str()))
            || after(self.policy.as_ref())
    }
}

/// Retries answered since the last flush, per tenant and earlier proposal
/// (two levels, so that counting one more allocates nothing), and each
/// tenant's `countersign_suppressed_total`, registered once.
#[derive(Default)]
struct Retries {
    counts: HashMap<String, HashMap<String, u64>>,
    counters: HashMap<String, metrics::Counter>,
}

fn add_retries(
    retries: &mut HashMap<String, HashMap<String, u64>>,
    tenant: &str,
    id: &str,
    n: u64,
) {
    let ids = match retries.get_mut(tenant) {
        Some(ids) => ids,
        None => retries.entry(tenant.to_owned()).or_default(),
    };
    match ids.get_mut(id) {
        Some(count) => *count += n,
        None => {
            ids.insert(id.to_owned(), n);
        }
    }
}

fn millis(d: Duration) -> Millis {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl Suppression {
    pub fn new(config: SuppressionConfig) -> Self {
        Suppression {
            config,
            tier: Box::new(LocalTier::new(
                config.capacity,
                config.max_bytes,
                config.ttl,
            )),
            changes: Mutex::default(),
            retries: Mutex::default(),
            breakers: Mutex::default(),
            policies: Mutex::default(),
            peers: None,
        }
    }

    /// Shares rejections and changes with the other replicas through `peers`.
    pub fn with_peers(mut self, peers: Arc<dyn Peers>) -> Self {
        self.peers = Some(peers);
        self
    }

    /// Decides whether `spec` from this tenant is answered without review. A
    /// suppressed answer is counted once given ([`Suppression::count_retry`]).
    pub fn check(
        &self,
        tenant: &str,
        policy: &TenantPolicy,
        spec: &ProposalSpec,
        now: Millis,
    ) -> Option<Refusal> {
        let open = self
            .breakers
            .lock()
            .expect("breakers")
            .get(tenant)
            .and_then(|operators| operators.get(spec.operator.as_str()))
            .is_some_and(|breaker| {
                breaker.is_open(now, policy.breaker_threshold, policy.breaker_window_ms)
            });
        if open {
            return Some(Refusal::BreakerOpen {
                window: Duration::from_millis(policy.breaker_window_ms.max(0) as u64),
            });
        }
        self.notice_policy(tenant, policy, now);
        let key = cache_key(tenant, spec);
        let entry = self.tier.get(&key)?;
        if entry.expires_at <= now
            || self.changed_since(tenant, &entry.proposal, entry.review_started)
        {
            self.tier.remove(&key);
            return None;
        }
        Some(Refusal::Suppressed(entry))
    }

    /// After [`Suppression::check`] found nothing in this process: the shared
    /// tier, if there is one (a miss on any failure or after [`shared::LOOKUP_TIMEOUT`]).
    pub async fn check_shared(
        &self,
        tenant: &str,
        spec: &ProposalSpec,
        now: Millis,
    ) -> Option<Arc<Entry>> {
        let peers = self.peers.as_ref()?;
        let key = cache_key(tenant, spec);
        let scopes = Scope::of(spec).map(|scope| scope.to_key());
        let found = tokio::time::timeout(
            shared::LOOKUP_TIMEOUT,
            peers.rejection(tenant, &key, &scopes),
        )
        .await;
        let found = match found {
            Ok(Ok(found)) => found?,
            Ok(Err(error)) => {
                tracing::debug!(%error, "suppression: shared tier unavailable");
                return None;
            }
            Err(_) => return None,
        };
        let entry = Arc::new(shared::decode(&found.value)?);
        let fits = entry.proposal.tenant == tenant && entry.fingerprint == key;
        if !fits
            || entry.expires_at <= now
            || found
                .changed_at
                .is_some_and(|at| at >= entry.review_started)
            || self.changed_since(tenant, &entry.proposal, entry.review_started)
        {
            return None;
        }
        self.tier.put(key, entry.clone());
        Some(entry)
    }

    /// Counts a retry answered with `entry`.
    pub fn count_retry(&self, tenant: &str, entry: &Entry) {
        let mut retries = self.retries.lock().expect("retries");
        add_retries(&mut retries.counts, tenant, &entry.proposal.id, 1);
        let counter = match retries.counters.get(tenant) {
            Some(counter) => counter,
            None => retries.counters.entry(tenant.to_owned()).or_insert_with(
                || metrics::counter!("countersign_suppressed_total", "tenant" => tenant.to_owned()),
            ),
        };
        counter.increment(1);
    }

    /// The events it learns from: rejections, and the breaker's trips.
    pub fn observes(kind: EventKind) -> bool {
        matches!(kind, EventKind::Rejected | EventKind::BreakerTripped)
    }

    /// Learns from one published event: rejections feed the cache and the
    /// operator's breaker; a trip is counted.
    pub fn observe(&self, event: &Event) {
        if !Suppression::observes(event.kind) {
            return;
        }
        if event.kind == EventKind::BreakerTripped {
            metrics::counter!("countersign_breaker_trips_total", "tenant" => event.tenant().to_owned())
                .increment(1);
            return;
        }
        let proposal = &event.proposal;
        let Some(decision) = &proposal.decision else {
            return;
        };
        self.breaker(&proposal.tenant, &proposal.spec.operator, |breaker| {
            breaker.record_rejection(decision.decided_at, millis(MAX_BREAKER_WINDOW));
        });
        self.remember(proposal);
    }

    /// Caches a rejection's answer for identical retries (where it may be
    /// cached), in this process and the shared tier. The published event
    /// calls it ([`Suppression::observe`], which also counts it toward the
    /// breaker); a Submit decided as it was stored calls it before it
    /// answers, so a retry the moment the answer arrives is suppressed too.
    pub fn remember(&self, proposal: &countersign_domain::Proposal) {
        let Some(decision) = &proposal.decision else {
            return;
        };
        if !suppresses_retries(decision) {
            return;
        }
        let review_started = decision.decided_at - decision.review_latency_ms as Millis;
        if self.changed_since(&proposal.tenant, proposal, review_started) {
            return; // reviewed against facts that have changed since
        }
        let key = cache_key(&proposal.tenant, &proposal.spec);
        // Already here: a Submit decided as it was stored remembered it, and
        // this is its event.
        if self
            .tier
            .get(&key)
            .is_some_and(|cached| cached.proposal.id == proposal.id)
        {
            return;
        }
        let entry = Entry::new(
            proposal,
            key.clone(),
            decision.decided_at.saturating_add(millis(self.config.ttl)),
            review_started,
        );
        if let Some(peers) = &self.peers {
            let remaining = entry
                .expires_at
                .saturating_sub(countersign_domain::now_ms());
            if remaining > 0 {
                let (peers, key, value) = (peers.clone(), key.clone(), shared::encode(&entry));
                let ttl = Duration::from_millis(remaining as u64);
                tokio::spawn(async move {
                    if let Err(error) = peers.put_rejection(&key, &value, ttl).await {
                        tracing::debug!(%error, "suppression: shared tier unavailable");
                    }
                });
            }
        }
        self.tier.put(key, Arc::new(entry));
    }

    /// A change to `scope` made here: rejections that rested on it go, in
    /// this process and (through the peers) in the others and the shared tier.
    pub fn invalidate(&self, tenant: &str, scope: Scope, now: Millis) {
        if let Some(peers) = &self.peers {
            let peers = peers.clone();
            let (tenant, key) = (tenant.to_owned(), scope.to_key());
            // Kept as long as a rejection reviewed before the change may live.
            let keep = self.config.ttl * 2 + Duration::from_secs(3600);
            tokio::spawn(async move {
                let message = PeerMessage::Invalidate {
                    tenant: tenant.clone(),
                    scope: key.clone(),
                    at: now,
                };
                let shared = peers.scope_changed(&tenant, &key, now, keep).await;
                let told = peers.publish(&message).await;
                if let Err(error) = shared.and(told) {
                    tracing::warn!(%error, %tenant, scope = %key, "suppression: other replicas not told of a change");
                }
            });
        }
        self.invalidate_local(tenant, scope, now);
    }

    /// A change to `scope`, in this process only (another replica made it).
    pub fn invalidate_local(&self, tenant: &str, scope: Scope, now: Millis) {
        let mut changes = self.changes.lock().expect("changes");
        match changes.get_mut(tenant) {
            Some(of_tenant) => of_tenant.record(scope, now),
            None => changes
                .entry(tenant.to_owned())
                .or_default()
                .record(scope, now),
        }
    }

    /// Empties the in-process tier (changes may have been missed).
    pub fn forget_cached(&self) {
        self.tier.clear();
    }

    /// A policy other than the one last seen is a change: rejections reviewed
    /// under the old one go.
    fn notice_policy(&self, tenant: &str, policy: &TenantPolicy, now: Millis) {
        let mut policies = self.policies.lock().expect("policies");
        match policies.get(tenant) {
            Some(seen) if seen == policy => {}
            Some(_) => {
                policies.insert(tenant.to_owned(), *policy);
                drop(policies);
                self.invalidate(tenant, Scope::Policy, now);
            }
            None => {
                policies.insert(tenant.to_owned(), *policy);
            }
        }
    }

    /// Counted retries since the last call.
    pub fn take_retries(&self) -> Vec<(ReviewKey, u64)> {
        std::mem::take(&mut self.retries.lock().expect("retries").counts)
            .into_iter()
            .flat_map(|(tenant, ids)| {
                ids.into_iter().map(move |(id, n)| {
                    let tenant = tenant.clone();
                    (ReviewKey { tenant, id }, n)
                })
            })
            .collect()
    }

    /// Puts counts back after a failed write, so none is lost.
    pub fn restore_retries(&self, counts: Vec<(ReviewKey, u64)>) {
        let mut retries = self.retries.lock().expect("retries");
        for (key, n) in counts {
            add_retries(&mut retries.counts, &key.tenant, &key.id, n);
        }
    }

    /// The operators of `tenant` whose breaker is open at `now` under
    /// `policy`, by name.
    pub fn open_breakers(&self, tenant: &str, policy: &TenantPolicy, now: Millis) -> Vec<String> {
        let mut open: Vec<String> = self
            .breakers
            .lock()
            .expect("breakers")
            .get(tenant)
            .into_iter()
            .flatten()
            .filter(|(_, breaker)| {
                breaker.is_open(now, policy.breaker_threshold, policy.breaker_window_ms)
            })
            .map(|(operator, _)| operator.clone())
            .collect();
        open.sort();
        open
    }

    pub fn apply_reset(&self, reset: &BreakerReset) {
        self.breaker(&reset.tenant, &reset.operator, |breaker| {
            breaker.reset(reset.reset_at);
        });
    }

    pub fn remember_rejection(&self, rejection: &RecentRejection) {
        self.breaker(&rejection.tenant, &rejection.operator, |breaker| {
            breaker.record_rejection(rejection.decided_at, millis(MAX_BREAKER_WINDOW));
        });
    }

    /// Applies `change` to the breaker of `operator` in `tenant`, made if new.
    fn breaker(&self, tenant: &str, operator: &str, change: impl FnOnce(&mut Breaker)) {
        let mut breakers = self.breakers.lock().expect("breakers");
        let operators = breakers.entry(tenant.to_owned()).or_default();
        change(operators.entry(operator.to_owned()).or_default());
    }

    /// Drops breakers with nothing left in their window.
    pub fn forget_idle(&self, now: Millis) {
        let mut breakers = self.breakers.lock().expect("breakers");
        for operators in breakers.values_mut() {
            operators.retain(|_, b| !b.is_idle(now, millis(MAX_BREAKER_WINDOW)));
        }
        breakers.retain(|_, operators| !operators.is_empty());
    }

    pub fn cached(&self) -> u64 {
        self.tier.entries()
    }

    fn changed_since(&self, tenant: &str, proposal: &Proposal, since: Millis) -> bool {
        self.changes
            .lock()
            .expect("changes")
            .get(tenant)
            .is_some_and(|changes| changes.any_since(&proposal.spec, since))
    }
}

impl crate::fanout::Observer for Suppression {
    fn observes(&self, kind: EventKind) -> bool {
        Suppression::observes(kind)
    }

    fn observe(&self, event: &Event) {
        Suppression::observe(self, event);
    }
}

fn cache_key(tenant: &str, spec: &ProposalSpec) -> String {
    fingerprint(tenant, spec)
}

#[cfg(test)]
mod tests {
    use countersign_domain::{Decision, DecisionOutcome, ProposalState, TenantPolicy, now_ms};
    use countersign_test_support::fixtures;

    use super::*;

    /// Proposal `id` of tenant `a`, decided by `decision`.
    fn decided(id: &str, decision: Decision) -> countersign_domain::Proposal {
        let now = now_ms();
        countersign_domain::Proposal {
            id: id.into(),
            tenant: "a".into(),
            spec: fixtures::spec(),
            state: decision.outcome.state(),
            submitted_by: "bot".into(),
            submitted_by_person: None,
            created_at: now,
            updated_at: now,
            decision: Some(decision),
            suppressed_retries: 0,
            cancel_reason: None,
        }
    }

    fn answers(suppression: &Suppression) -> Option<String> {
        let policy = TenantPolicy::default();
        match suppression.check("a", &policy, &fixtures::spec(), now_ms()) {
            Some(Refusal::Suppressed(entry)) => Some(entry.proposal.id.clone()),
            Some(Refusal::BreakerOpen { .. }) => panic!("no breaker was fed"),
            None => None,
        }
    }

    /// What a Submit decided as it was stored remembers before it answers:
    /// a rejection that may be cached answers the identical retry at once;
    /// an approval, or a rejection only for a parallel operation, does not.
    #[test]
    fn a_remembered_rejection_answers_the_identical_retry_and_nothing_else_is_remembered() {
        let spec = fixtures::spec();
        let mut approved = fixtures::rejection(&spec, countersign_domain::gates::SOP);
        approved.outcome = DecisionOutcome::Approve;
        let cases = [
            (fixtures::rejection(&spec, "target_state"), Some("p-1")),
            (approved, None),
            (fixtures::rejection(&spec, "no_parallel_operation"), None),
        ];
        for (decision, answered) in cases {
            let suppression = Suppression::new(SuppressionConfig::default());
            let proposal = decided("p-1", decision);
            assert_ne!(proposal.state, ProposalState::Pending);
            assert_eq!(answers(&suppression), None);
            suppression.remember(&proposal);
            assert_eq!(answers(&suppression).as_deref(), answered, "{proposal:?}");
        }
    }
}
