//! Where rejections are cached. The in-process LRU is the first tier; a shared
//! tier (Redis, so a retry routed to another replica is suppressed too) fits
//! the same trait.

use std::{sync::Arc, time::Duration};

use countersign_domain::{Millis, Proposal, ProposalSpec};
use countersign_proto::{
    convert::{json_to_struct, proposal_to_proto},
    v1,
};
use moka::sync::Cache;
use prost::Message;

/// What an entry holds besides its strings: the structs, the map's node, the
/// allocations' headers (a rough figure; the strings dominate).
const ENTRY_OVERHEAD: usize = 1024;

/// A cached rejection: what an answer to a retry needs, and no more.
#[derive(Debug)]
pub struct Entry {
    /// The rejected proposal with its decision, its spec without the
    /// parameters (a retry's are the same: they are fingerprinted, see
    /// [`Entry::answer`]) and without its context summary and labels (free
    /// text no answer shows; `GetProposal` has the whole proposal).
    pub proposal: Arc<Proposal>,
    /// The fingerprint it answers.
    pub fingerprint: String,
    pub expires_at: Millis,
    /// When its review started: a change to its SOPs or target after this
    /// makes it stale.
    pub review_started: Millis,
    /// About how many bytes it holds in memory: its weight in the LRU.
    pub bytes: usize,
    /// `proposal` on the wire as a person sees it, converted once: an answer
    /// is a copy with the retry's parameters.
    shown: v1::Proposal,
    /// Its decision as an agent sees it
    /// ([`countersign_domain::Decision::for_agent`]), in an agent's answer
    /// in place of `shown`'s.
    shown_to_agent: Option<v1::Decision>,
}

impl Entry {
    /// An entry for `rejected`, keeping only what an answer needs.
    pub fn new(
        rejected: &Proposal,
        fingerprint: String,
        expires_at: Millis,
        review_started: Millis,
    ) -> Entry {
        let spec = &rejected.spec;
        // Every field named: a field added to proposals is kept or left out here.
        let proposal = Proposal {
            id: rejected.id.clone(),
            tenant: rejected.tenant.clone(),
            spec: ProposalSpec {
                action: spec.action.clone(),
                class: spec.class,
                target: spec.target.clone(),
                parameters: Default::default(),
                reason: spec.reason.clone(),
                blast_radius: spec.blast_radius,
                operator: spec.operator.clone(),
                context_summary: String::new(),
                incident_id: spec.incident_id.clone(),
                labels: Default::default(),
                rollback_plan: spec.rollback_plan.clone(),
                force_approve_no_sop: spec.force_approve_no_sop,
                idempotency_key: spec.idempotency_key.clone(),
            },
            state: rejected.state,
            submitted_by: rejected.submitted_by.clone(),
            submitted_by_person: rejected.submitted_by_person.clone(),
            created_at: rejected.created_at,
            updated_at: rejected.updated_at,
            decision: rejected.decision.clone(),
            suppressed_retries: rejected.suppressed_retries,
            cancel_reason: rejected.cancel_reason.clone(),
        };
        Entry::kept(proposal, fingerprint, expires_at, review_started)
    }

    /// An entry as it was kept (by this process or, through the shared tier,
    /// another).
    pub fn kept(
        proposal: Proposal,
        fingerprint: String,
        expires_at: Millis,
        review_started: Millis,
    ) -> Entry {
        let shown = proposal_to_proto(&proposal, false);
        let shown_to_agent = proposal_to_proto(&proposal, true).decision;
        let bytes = serde_json::to_vec(&proposal).map_or(0, |json| json.len())
            + shown.encoded_len()
            + shown_to_agent.as_ref().map_or(0, Message::encoded_len)
            + fingerprint.len()
            + ENTRY_OVERHEAD;
        Entry {
            proposal: Arc::new(proposal),
            fingerprint,
            expires_at,
            review_started,
            bytes,
            shown,
            shown_to_agent,
        }
    }

    /// The answer to `retry`, a call with this entry's fingerprint, on the
    /// wire as an agent (`agent`) or a person sees it: the earlier proposal,
    /// with the retry's parameters (the same, or the fingerprints would
    /// differ).
    pub fn answer(&self, retry: &ProposalSpec, agent: bool) -> v1::Proposal {
        // Every field named: a field added to proposals is answered here too.
        let v1::Proposal {
            id,
            tenant,
            spec,
            state,
            submitted_by,
            created_at,
            updated_at,
            decision,
            suppressed_retries,
            cancel_reason,
            submitted_by_person,
        } = &self.shown;
        let spec = spec.as_ref().map(|spec| v1::ProposalSpec {
            parameters: Some(json_to_struct(&retry.parameters)),
            ..spec.clone()
        });
        let decision = if agent {
            &self.shown_to_agent
        } else {
            decision
        };
        v1::Proposal {
            id: id.clone(),
            tenant: tenant.clone(),
            spec,
            state: *state,
            submitted_by: submitted_by.clone(),
            created_at: *created_at,
            updated_at: *updated_at,
            decision: decision.clone(),
            suppressed_retries: *suppressed_retries,
            cancel_reason: cancel_reason.clone(),
            submitted_by_person: submitted_by_person.clone(),
        }
    }
}

pub trait SuppressionTier: Send + Sync {
    fn get(&self, fingerprint: &str) -> Option<Arc<Entry>>;
    fn put(&self, fingerprint: String, entry: Arc<Entry>);
    fn remove(&self, fingerprint: &str);
    fn clear(&self);
    fn entries(&self) -> u64;
}

/// A bounded LRU with a TTL, in this process: at most `capacity` entries and
/// about `max_bytes` bytes. Each entry weighs its bytes, and at least
/// `max_bytes / capacity`, so the one budget bounds both.
pub struct LocalTier {
    cache: Cache<String, Arc<Entry>>,
}

impl LocalTier {
    pub fn new(capacity: u64, max_bytes: u64, ttl: Duration) -> Self {
        let (budget, floor) = match capacity {
            0 => (0, u64::MAX),
            n => (max_bytes, max_bytes.div_ceil(n)),
        };
        LocalTier {
            cache: Cache::builder()
                .max_capacity(budget)
                .weigher(move |key: &String, entry: &Arc<Entry>| {
                    let bytes = (entry.bytes + key.len()) as u64;
                    u32::try_from(bytes.max(floor)).unwrap_or(u32::MAX)
                })
                .time_to_live(ttl.max(Duration::from_millis(1)))
                .build(),
        }
    }
}

impl SuppressionTier for LocalTier {
    fn get(&self, fingerprint: &str) -> Option<Arc<Entry>> {
        self.cache.get(fingerprint)
    }

    fn put(&self, fingerprint: String, entry: Arc<Entry>) {
        self.cache.insert(fingerprint, entry);
    }

    fn remove(&self, fingerprint: &str) {
        self.cache.invalidate(fingerprint);
    }

    fn clear(&self) {
        self.cache.invalidate_all();
    }

    fn entries(&self) -> u64 {
        self.cache.run_pending_tasks();
        self.cache.entry_count()
    }
}

#[cfg(test)]
mod tests;
