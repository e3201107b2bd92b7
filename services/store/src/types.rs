use countersign_domain::{
    Millis, Proposal, ProposalSpec, Role, TenantPolicy,
    escalation::{Escalation, Resolution, Vote},
};

use crate::StoreError;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenant {
    pub name: String,
    pub created_at: Millis,
    pub policy: TenantPolicy,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKeyRecord {
    pub id: String,
    pub tenant: String,
    pub name: String,
    pub role: Role,
    pub agent: bool,
    pub key_hash: Vec<u8>,
    pub created_at: Millis,
    pub revoked_at: Option<Millis>,
    /// The person the key belongs to (for an agent key, the person the agent
    /// acts for); `None`: it names no person, and may never resolve an
    /// escalation.
    pub person: Option<String>,
}

/// A browser console session: who signed in (the key it acts as) and until
/// when. `token_hash` is the SHA-256 of the random token in its cookie.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsoleSession {
    pub token_hash: Vec<u8>,
    pub tenant: String,
    pub key_id: String,
    pub created_at: Millis,
    pub expires_at: Millis,
    pub revoked_at: Option<Millis>,
}

#[derive(Debug, Clone)]
pub struct NewApiKey {
    pub tenant: String,
    pub name: String,
    pub role: Role,
    pub agent: bool,
    /// The person the key belongs to; a blank name is stored as none.
    pub person: Option<String>,
}

impl NewApiKey {
    /// A fresh key (random id and secret) and the name it is stored under:
    /// `name`, or the role and the id's first characters when none is given.
    pub(crate) fn mint(&self) -> (countersign_domain::api_key::MintedKey, String) {
        use rand::RngCore;
        let mut id = [0u8; 8];
        let mut secret = [0u8; 32];
        rand::rng().fill_bytes(&mut id);
        rand::rng().fill_bytes(&mut secret);
        let minted = countersign_domain::api_key::mint(id, secret);
        let name = if self.name.is_empty() {
            format!("{}-{}", self.role, &minted.id[..6])
        } else {
            self.name.clone()
        };
        (minted, name)
    }

    /// The person as stored: a blank name names nobody.
    pub(crate) fn person(&self) -> Option<&str> {
        self.person.as_deref().filter(|p| !p.trim().is_empty())
    }
}

/// The admin key created on first start.
#[derive(Debug, Clone)]
pub struct BootstrapKey {
    pub tenant: String,
    pub key_id: String,
    pub key: String,
}

#[derive(Debug, Clone)]
pub struct NewProposal {
    /// The id the proposal takes ([`NewProposal::new_id`]), chosen before the
    /// insert so that a caller can wait for its decision from before it is
    /// committed. A submission answered by an earlier proposal (its
    /// idempotency key taken) is that proposal, with its own id.
    pub id: String,
    pub tenant: String,
    pub spec: ProposalSpec,
    pub submitted_by: String,
    /// The person behind the submitting key (for an agent key, the person
    /// the agent acts for); `None` when the key names no person.
    pub submitted_by_person: Option<String>,
    /// The id of the API key that submitted it (None: not through a key).
    /// A coordinator may cancel only what its own key submitted.
    pub submitted_key: Option<String>,
    /// The W3C `traceparent` of the submitting call, kept with the proposal so
    /// the review continues its trace (None: no trace).
    pub trace_parent: Option<String>,
}

impl NewProposal {
    /// A fresh proposal id: a ULID, so ids sort by the time they were made.
    pub fn new_id() -> String {
        ulid::Ulid::new().to_string()
    }

    /// The proposal as its row was just inserted: `id`, PENDING since `now`.
    pub(crate) fn into_pending(self, id: String, now: Millis) -> Proposal {
        Proposal {
            id,
            tenant: self.tenant,
            spec: self.spec,
            state: countersign_domain::ProposalState::Pending,
            submitted_by: self.submitted_by,
            submitted_by_person: self.submitted_by_person,
            created_at: now,
            updated_at: now,
            decision: None,
            suppressed_retries: 0,
            cancel_reason: None,
        }
    }
}

/// A submission whose idempotency key is taken: the same spec (by digest) is
/// the earlier proposal, another spec a conflict.
pub(crate) fn same_spec_as_earlier(
    key: &str,
    earlier_id: &str,
    earlier_digest: &str,
    digest: &str,
) -> Result<(), StoreError> {
    if earlier_digest == digest {
        return Ok(());
    }
    Err(StoreError::AlreadyExists(format!(
        "idempotency_key `{key}` was already used by proposal {earlier_id} with a different spec"
    )))
}

/// Target `id` as a put stores it now.
pub(crate) fn new_target(
    id: &str,
    status: countersign_domain::TargetStatus,
    labels: std::collections::BTreeMap<String, String>,
) -> countersign_domain::Target {
    countersign_domain::Target {
        id: id.to_owned(),
        status,
        labels,
        updated_at: crate::now_ms(),
    }
}

/// The proposal that holds `spec`'s idempotency key, from the `(id, spec
/// digest)` read for it: its id if it has the same spec, `AlreadyExists` if
/// another spec holds the key, `None` if no proposal does.
pub(crate) fn holder_of_key(
    spec: &countersign_domain::ProposalSpec,
    earlier: Option<(String, String)>,
) -> Result<Option<String>, StoreError> {
    let Some((earlier_id, earlier_digest)) = earlier else {
        return Ok(None);
    };
    same_spec_as_earlier(
        &spec.idempotency_key,
        &earlier_id,
        &earlier_digest,
        &spec.digest(),
    )?;
    Ok(Some(earlier_id))
}

/// Why a cancel by `key` (None: whoever submitted it) changed nothing,
/// from what was `found` of the proposal: its state and submitting key, or
/// `None` if there is no such proposal.
pub(crate) fn not_cancelled(
    id: &str,
    found: Option<(String, Option<String>)>,
    key: Option<&str>,
) -> StoreError {
    let Some((state, submitted_key)) = found else {
        return StoreError::NotFound(format!("proposal `{id}`"));
    };
    if key.is_some() && submitted_key.as_deref() != key {
        return StoreError::PermissionDenied(format!(
            "proposal {id} was submitted by another key: a coordinator may cancel only the \
             proposals its own key submitted (on-call and admin may cancel any)"
        ));
    }
    StoreError::FailedPrecondition(format!(
        "proposal {id} is already {state} and can no longer be cancelled"
    ))
}

/// A review a submission asks for inside its own transaction: the gates
/// run on the facts as that transaction reads them, and a decision they
/// reach is written with the proposal, in one commit. Where the review does
/// not conclude there (a route sends it to people, a model is to be asked,
/// the review failed), the proposal is stored PENDING and queued for the
/// reviewers, as any submission is.
pub trait SubmitReview: Send + Sync + 'static {
    /// The decision on `proposal` from `facts`; `None` leaves it to the
    /// reviewers. Never an approval the gates did not reach.
    fn review(
        &self,
        proposal: &Proposal,
        facts: &countersign_domain::gates::ReviewFacts,
    ) -> Option<countersign_domain::Decision>;
    /// A decision it gave, once committed.
    fn recorded(&self, decision: &countersign_domain::Decision);
}

/// A submission as the group commit takes it: the proposal, and the review
/// it asks for in its own transaction (none: queued for the reviewers).
pub struct Submission {
    pub new: NewProposal,
    pub review: Option<std::sync::Arc<dyn SubmitReview>>,
}

#[derive(Debug, Clone)]
pub enum SubmitOutcome {
    Created(Proposal),
    /// The idempotency key named an earlier proposal with the same spec.
    Deduplicated(Proposal),
}

impl SubmitOutcome {
    pub fn proposal(&self) -> &Proposal {
        match self {
            SubmitOutcome::Created(p) | SubmitOutcome::Deduplicated(p) => p,
        }
    }
}

/// The rules every tenant policy keeps, on both backends: windows not
/// negative, a receipt lifetime within [`countersign_domain::RECEIPT_TTL_RANGE_MS`].
pub fn check_policy(policy: &countersign_domain::TenantPolicy) -> Result<(), StoreError> {
    if policy.parallel_window_ms < 0 || policy.breaker_window_ms < 0 {
        return Err(StoreError::InvalidArgument(
            "windows must not be negative".into(),
        ));
    }
    let range = countersign_domain::RECEIPT_TTL_RANGE_MS;
    if !range.contains(&policy.receipt_ttl_ms) {
        return Err(StoreError::InvalidArgument(format!(
            "receipt_ttl_ms: must be {} to {} ms (a second to a day)",
            range.start(),
            range.end()
        )));
    }
    Ok(())
}

/// Tenant names: 1..=63 of `[a-z0-9-]`, starting with a letter or digit.
pub fn validate_tenant_name(name: &str) -> Result<(), StoreError> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && !name.starts_with('-')
        && name
            .bytes()
            .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(StoreError::InvalidArgument(format!(
            "tenant name `{name}` must be 1 to 63 of a-z, 0-9 and '-'"
        )))
    }
}

/// What the log says of an event before it is read whole: enough to tell
/// whether anyone in a process needs it ([`crate::EventLog::events_picked`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventHead {
    /// The place in the whole log.
    pub position: u64,
    pub tenant: String,
    pub proposal_id: String,
    pub kind: countersign_domain::EventKind,
}

/// Which events a read by heads takes whole.
pub type Pick = std::sync::Arc<dyn Fn(&EventHead) -> bool + Send + Sync>;

/// A page of the log read by heads: the events picked, read whole, in log
/// order, and how far the page examined.
#[derive(Debug, Clone, PartialEq)]
pub struct PickedPage {
    pub events: Vec<countersign_domain::Event>,
    /// Heads read (the page is full when this is the limit).
    pub examined: u32,
    /// The last head's position (`after` when there was none): every event
    /// up to it was examined.
    pub through: u64,
}

/// A page of heads as a read by heads picks from it: the positions to read
/// whole, and how far the page reached.
pub(crate) struct PickedHeads {
    pub positions: Vec<u64>,
    examined: u32,
    through: u64,
}

impl PickedHeads {
    /// What `pick` takes of `heads`, read after log position `after`.
    pub(crate) fn of(heads: &[EventHead], after: u64, pick: &Pick) -> PickedHeads {
        PickedHeads {
            positions: heads
                .iter()
                .filter(|h| pick(h))
                .map(|h| h.position)
                .collect(),
            examined: heads.len() as u32,
            through: heads.last().map_or(after, |h| h.position),
        }
    }

    /// The page, with the events read at [`PickedHeads::positions`].
    pub(crate) fn page(self, events: Vec<countersign_domain::Event>) -> PickedPage {
        PickedPage {
            events,
            examined: self.examined,
            through: self.through,
        }
    }
}

/// A state change, published in this process after it commits: a wake-up
/// signal. The `events` table (written by the database in the same transaction
/// as the change) is the record, with its cursors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreEvent {
    /// The event's cursor where the writer knew it (always, when read back).
    pub cursor: Option<i64>,
    pub tenant: String,
    pub proposal_id: String,
    pub kind: countersign_domain::EventKind,
    pub state: countersign_domain::ProposalState,
    /// A submission decided as it was stored: its decision is the answer to
    /// the call that stored it, and no other call can be awaiting it (its id
    /// is unknown until that answer). Only watchers and observers want it,
    /// and the observers not at once.
    pub answered: bool,
}

impl StoreEvent {
    /// The signal for a proposal that has just moved to `state` (its event is
    /// logged by the database, in the same transaction).
    pub(crate) fn changed_to(
        tenant: &str,
        proposal_id: &str,
        state: countersign_domain::ProposalState,
    ) -> StoreEvent {
        use countersign_domain::{EventKind, ProposalState};
        let kind = match state {
            ProposalState::Pending => EventKind::Submitted,
            ProposalState::Reviewing => EventKind::ReviewStarted,
            ProposalState::Approved => EventKind::Approved,
            ProposalState::Rejected => EventKind::Rejected,
            ProposalState::Cancelled => EventKind::Cancelled,
            ProposalState::TimedOut => EventKind::TimedOut,
            ProposalState::Escalated => EventKind::Escalated,
        };
        StoreEvent {
            cursor: None,
            tenant: tenant.to_owned(),
            proposal_id: proposal_id.to_owned(),
            kind,
            state,
            answered: false,
        }
    }

    /// The signal for a submission just stored: PENDING (queued for the
    /// reviewers), or decided as it was stored, and then [`answered`](Self::answered).
    pub(crate) fn stored(
        tenant: &str,
        proposal_id: &str,
        state: countersign_domain::ProposalState,
    ) -> StoreEvent {
        StoreEvent {
            answered: state.is_terminal(),
            ..StoreEvent::changed_to(tenant, proposal_id, state)
        }
    }

    /// The signal for a vote just recorded on an escalated proposal (its
    /// VOTE event is logged by the database, in the same transaction).
    pub(crate) fn voted(tenant: &str, proposal_id: &str) -> StoreEvent {
        StoreEvent {
            cursor: None,
            tenant: tenant.to_owned(),
            proposal_id: proposal_id.to_owned(),
            kind: countersign_domain::EventKind::Vote,
            state: countersign_domain::ProposalState::Escalated,
            answered: false,
        }
    }

    /// The signal for a batch of SUPPRESSED events just logged (of any
    /// tenant): it wakes the fan-out, which reads them from the log.
    pub(crate) fn suppressed() -> StoreEvent {
        StoreEvent {
            cursor: None,
            tenant: String::new(),
            proposal_id: String::new(),
            kind: countersign_domain::EventKind::Suppressed,
            state: countersign_domain::ProposalState::Rejected,
            answered: false,
        }
    }
}

/// Where a review found its proposal.
#[derive(Debug, Clone)]
pub enum BeginReview {
    /// Now REVIEWING; `started_at` is when it first entered REVIEWING.
    Reviewing {
        proposal: Box<Proposal>,
        started_at: Millis,
        /// The submitting call's W3C `traceparent`, if it had one.
        trace_parent: Option<String>,
    },
    /// Already terminal: nothing to review.
    Terminal(countersign_domain::ProposalState),
}

/// What became of a decision handed to the store.
#[derive(Debug, Clone)]
pub enum RecordOutcome {
    Recorded,
    /// The proposal was already terminal (cancelled, decided): the late result
    /// was counted and dropped.
    Discarded(countersign_domain::ProposalState),
    /// An approval whose facts changed before commit (the SOP was retired or
    /// changed, the target left ONLINE): review again.
    Stale(String),
}

/// A proposal that has been REVIEWING for longer than its deadline.
#[derive(Debug, Clone)]
pub struct OverdueReview {
    pub tenant: String,
    pub proposal_id: String,
    pub started_at: Millis,
}

/// An admin closed an operator's breaker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BreakerReset {
    pub tenant: String,
    pub operator: String,
    pub reset_at: Millis,
}

/// A recorded rejection, as the breaker counts it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecentRejection {
    pub tenant: String,
    pub operator: String,
    pub decided_at: Millis,
}

/// An open (or once-open) escalation as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct EscalationRecord {
    /// As it is now (state, spec, submitted_by_person, decision if decided).
    pub proposal: Proposal,
    /// The route's terms copied when it opened, and what the review found.
    pub escalation: Escalation,
    /// In the order cast.
    pub votes: Vec<Vote>,
}

/// What a vote did, with the proposal as it is after it.
#[derive(Debug, Clone, PartialEq)]
pub struct Voted {
    pub resolution: Resolution,
    pub proposal: Proposal,
}
