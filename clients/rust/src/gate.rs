//! [`ReviewGateLayer`] and [`ReviewGate`]: the second signature in front of
//! a tower service. A write is submitted and awaited; the wrapped service
//! runs only on an APPROVED decision whose signed receipt holds for exactly
//! the spec submitted. Nothing else lets it run.

use std::{
    fmt,
    sync::Arc,
    task::{Context, Poll},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use countersign_domain::{
    now_ms,
    receipt::{Expected, Receipt, ReceiptError},
};
use countersign_proto::{
    convert::{receipt_from_proto, spec_from_proto},
    v1::{self, ProposalState},
};
use futures::future::BoxFuture;
use sha2::{Digest, Sha256};
use tonic::Code;
use tower::{Layer, Service};

use crate::{Client, Error};

/// How long a gated request waits for its decision unless told otherwise.
const DEFAULT_DEADLINE: Duration = Duration::from_secs(300);
/// Derived idempotency keys stay the same for identical requests within one
/// window of this long (see [`ReviewGateLayer::idempotency_window`]).
const DEFAULT_KEY_WINDOW: Duration = Duration::from_secs(15 * 60);
/// Less time than this left after a wait ends is no time for another.
const LAST_WAIT: Duration = Duration::from_millis(50);

/// How a request of the wrapped service becomes a proposal.
pub trait Proposable {
    /// The proposal this request makes, or `None` for a read, which the gate
    /// passes straight through without submitting anything. A spec with an
    /// empty `idempotency_key` gets one derived from it (see
    /// [`ReviewGateLayer::idempotency_window`]).
    fn proposal(&self) -> Option<v1::ProposalSpec>;
}

/// Why Countersign's answer does not let a gated request run.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Denial {
    /// The review rejected it.
    Rejected,
    /// An identical proposal was rejected moments ago; this is that
    /// rejection, answered without a new review.
    Suppressed,
    /// The proposal was cancelled.
    Cancelled,
    /// The review did not finish in time.
    TimedOut,
    /// People were asked and did not approve before the escalation expired.
    /// (An agent credential does not see the gates that tell an expiry from
    /// a person's rejection: it gets [`Denial::Rejected`].)
    EscalationExpired,
    /// The gate's deadline passed with the proposal still open.
    DeadlineExceeded,
    /// Countersign could not be reached.
    Unreachable,
    /// Countersign refused the call itself (a bad spec, a key without the
    /// right, an idempotency key used with another spec…).
    Refused(Code),
    /// An APPROVED answer came without a receipt (the server signs none
    /// without a signing key).
    NoReceipt,
    /// The approval's receipt does not hold: a bad signature, another
    /// tenant, spec or proposal, or expired.
    InvalidReceipt(ReceiptError),
}

/// A gated request that did not run, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotApproved {
    /// Why.
    pub denial: Denial,
    /// The proposal the request made, where there is one.
    pub proposal_id: Option<String>,
    /// What an agent may be told: the decision's terse message, or what went
    /// wrong on the way to one.
    pub agent_message: String,
    /// The full reason, where the credential may see it (else empty), or
    /// the error's details.
    pub detail: String,
}

impl fmt::Display for NotApproved {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let id = self.proposal_id.as_deref().unwrap_or("(none)");
        write!(
            f,
            "not approved ({:?}), proposal {id}: {}",
            self.denial, self.agent_message
        )?;
        if !self.detail.is_empty() && self.detail != self.agent_message {
            write!(f, " ({})", self.detail)?;
        }
        Ok(())
    }
}

impl std::error::Error for NotApproved {}

/// What a [`ReviewGate`] call ends in, other than the wrapped service's
/// answer.
#[derive(Debug)]
pub enum GateError<E> {
    /// Countersign did not approve exactly this request: the wrapped service
    /// was not called.
    NotApproved(NotApproved),
    /// The wrapped service ran, on an approval, and failed (or was not
    /// ready).
    Inner(E),
}

impl<E: fmt::Display> fmt::Display for GateError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GateError::NotApproved(n) => n.fmt(f),
            GateError::Inner(e) => write!(f, "the gated service failed: {e}"),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for GateError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            GateError::NotApproved(n) => Some(n),
            GateError::Inner(e) => Some(e),
        }
    }
}

/// The verified approval a gated request runs under.
#[derive(Debug, Clone, PartialEq)]
pub struct Approval {
    /// The approved proposal, as the server answered it.
    pub proposal: v1::Proposal,
    /// Its receipt, verified.
    pub receipt: Receipt,
}

tokio::task_local! {
    static APPROVAL: Approval;
}

/// The verified approval the running gated call runs under; `None` outside
/// one (and in tasks it spawns).
pub fn current_approval() -> Option<Approval> {
    APPROVAL.try_with(Clone::clone).ok()
}

/// What every [`ReviewGate`] of one layer shares.
struct Gate {
    client: Client,
    public_key: String,
    tenant: Option<String>,
    deadline: Duration,
    identity: Option<String>,
    key_window: Duration,
}

/// A [`tower::Layer`] that puts Countersign's second signature in front of
/// a service: see [`ReviewGate`].
#[derive(Clone)]
pub struct ReviewGateLayer {
    gate: Arc<Gate>,
}

impl fmt::Debug for ReviewGateLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReviewGateLayer")
            .field("deadline", &self.gate.deadline)
            .field("tenant", &self.gate.tenant)
            .finish_non_exhaustive()
    }
}

impl ReviewGateLayer {
    /// Gates with `client`, trusting approvals whose receipts verify under
    /// `public_key_hex`: the server's checkpoint key (`GetCheckpoint`'s key,
    /// or `countersign admin signing-key show`), as configuration, never as
    /// the server says it.
    pub fn new(client: Client, public_key_hex: impl Into<String>) -> ReviewGateLayer {
        ReviewGateLayer {
            gate: Arc::new(Gate {
                client,
                public_key: public_key_hex.into(),
                tenant: None,
                deadline: DEFAULT_DEADLINE,
                identity: None,
                key_window: DEFAULT_KEY_WINDOW,
            }),
        }
    }

    fn with(mut self, change: impl FnOnce(&mut Gate)) -> ReviewGateLayer {
        let mut gate = Gate {
            client: self.gate.client.clone(),
            public_key: self.gate.public_key.clone(),
            tenant: self.gate.tenant.clone(),
            identity: self.gate.identity.clone(),
            ..*self.gate
        };
        change(&mut gate);
        self.gate = Arc::new(gate);
        self
    }

    /// How long a write waits for its decision (default 5 minutes); past
    /// it, [`Denial::DeadlineExceeded`].
    pub fn deadline(self, deadline: Duration) -> ReviewGateLayer {
        self.with(|g| g.deadline = deadline)
    }

    /// The tenant receipts must name. Unset, the tenant the server answers
    /// the submission with (the API key's).
    pub fn tenant(self, tenant: impl Into<String>) -> ReviewGateLayer {
        let tenant = tenant.into();
        self.with(|g| g.tenant = Some(tenant))
    }

    /// What tells this gate's requests from another's in derived
    /// idempotency keys (default: the request type's name).
    pub fn identity(self, identity: impl Into<String>) -> ReviewGateLayer {
        let identity = identity.into();
        self.with(|g| g.identity = Some(identity))
    }

    /// A spec without an idempotency key gets one derived from the gate's
    /// identity, the spec and the clock's current window of this length
    /// (default 15 minutes): a retried request within it finds its earlier
    /// proposal instead of making a second one; an identical request in a
    /// later window is reviewed afresh.
    pub fn idempotency_window(self, window: Duration) -> ReviewGateLayer {
        self.with(|g| g.key_window = window.max(Duration::from_secs(1)))
    }
}

impl<S> Layer<S> for ReviewGateLayer {
    type Service = ReviewGate<S>;

    fn layer(&self, inner: S) -> ReviewGate<S> {
        ReviewGate {
            inner,
            gate: self.gate.clone(),
        }
    }
}

/// A service whose writes run only on Countersign's verified approval.
///
/// For each request, [`Proposable::proposal`] says what it proposes: `None`
/// (a read) calls the wrapped service at once; a spec is submitted and its
/// decision awaited in one call (up to the layer's deadline), and the
/// wrapped service is called only when the answer is APPROVED for this
/// proposal and its receipt verifies — the signature under the configured
/// key, the tenant, the digest of exactly the spec submitted, this proposal,
/// not expired. Every other outcome is [`GateError::NotApproved`] and the
/// wrapped service is never called.
#[derive(Clone)]
pub struct ReviewGate<S> {
    inner: S,
    gate: Arc<Gate>,
}

impl<S: fmt::Debug> fmt::Debug for ReviewGate<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReviewGate")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S, Req> Service<Req> for ReviewGate<S>
where
    S: Service<Req> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send,
    S::Response: Send,
    Req: Proposable + Send + 'static,
{
    type Response = S::Response;
    type Error = GateError<S::Error>;
    type Future = BoxFuture<'static, Result<S::Response, GateError<S::Error>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(GateError::Inner)
    }

    fn call(&mut self, request: Req) -> Self::Future {
        // The service made ready is the one that runs this request; the
        // clone stays behind for the next.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let gate = self.gate.clone();
        let spec = request.proposal();
        Box::pin(async move {
            let Some(spec) = spec else {
                return inner.call(request).await.map_err(GateError::Inner);
            };
            let approval = gate
                .countersign::<Req>(spec)
                .await
                .map_err(|refusal| GateError::NotApproved(*refusal))?;
            APPROVAL
                .scope(approval, inner.call(request))
                .await
                .map_err(GateError::Inner)
        })
    }
}

/// The parts of a refusal that are not about a decision.
fn refused(denial: Denial, proposal_id: Option<&str>, message: String) -> Box<NotApproved> {
    Box::new(NotApproved {
        denial,
        proposal_id: proposal_id.map(str::to_owned),
        agent_message: message.clone(),
        detail: message,
    })
}

/// A failed call as a refusal: unreachable, a deadline, or refused.
fn call_failed(error: Error, proposal_id: Option<&str>) -> Box<NotApproved> {
    let denial = match error.code() {
        Some(Code::Unavailable) => Denial::Unreachable,
        Some(Code::DeadlineExceeded) => Denial::DeadlineExceeded,
        Some(code) => Denial::Refused(code),
        None => Denial::Refused(Code::Internal),
    };
    refused(denial, proposal_id, error.to_string())
}

impl Gate {
    /// The idempotency key of `digest` (the spec's, without its key) for
    /// requests of type `Req` at `now`.
    fn derive_key<Req>(&self, digest: &str, now: SystemTime) -> String {
        let identity = self
            .identity
            .as_deref()
            .unwrap_or(std::any::type_name::<Req>());
        let since = now.duration_since(UNIX_EPOCH).unwrap_or_default();
        let window = since.as_secs() / self.key_window.as_secs().max(1);
        let seed = format!("countersign-gate/v1\n{identity}\n{window}\n{digest}");
        format!("rs-{}", hex::encode(Sha256::digest(seed.as_bytes())))
    }

    /// Submits `spec`, waits for its decision, and answers the approval
    /// that lets the request run, or why not.
    async fn countersign<Req>(
        &self,
        mut spec: v1::ProposalSpec,
    ) -> Result<Approval, Box<NotApproved>> {
        let started = tokio::time::Instant::now();
        // The digest of exactly what is submitted (the idempotency key is
        // not part of it), checked against the receipt.
        let digest = spec_from_proto(spec.clone())
            .map_err(|e| refused(Denial::Refused(Code::InvalidArgument), None, e.to_string()))?
            .digest();
        if spec.idempotency_key.is_empty() {
            spec.idempotency_key = self.derive_key::<Req>(&digest, SystemTime::now());
        }
        let submitted = self
            .client
            .submit_and_wait(spec, self.deadline)
            .await
            .map_err(|e| call_failed(e, None))?;
        let id = submitted.proposal.id.clone();
        let mut proposal = submitted.proposal;
        if submitted.suppressed {
            return Err(decided(Denial::Suppressed, &proposal));
        }
        // A wait cut short (a server shutting down answers with the proposal
        // as it stands) goes on for what is left of the deadline.
        while is_open(&proposal) {
            let left = self.deadline.saturating_sub(started.elapsed());
            if left < LAST_WAIT {
                return Err(decided(Denial::DeadlineExceeded, &proposal));
            }
            proposal = self
                .client
                .await_decision(&id, left)
                .await
                .map_err(|e| call_failed(e, Some(&id)))?;
        }
        self.judge(&id, &digest, proposal)
    }

    /// The one judgement of a decided answer about proposal `id` of the
    /// spec with `digest`: an approval only when it is this proposal,
    /// APPROVED, approving, and its receipt verifies.
    fn judge(
        &self,
        id: &str,
        digest: &str,
        proposal: v1::Proposal,
    ) -> Result<Approval, Box<NotApproved>> {
        let denial = match ProposalState::try_from(proposal.state) {
            Ok(ProposalState::Approved) => None,
            Ok(ProposalState::Cancelled) => Some(Denial::Cancelled),
            Ok(ProposalState::TimedOut) => Some(Denial::TimedOut),
            Ok(ProposalState::Rejected) if expired_escalation(&proposal) => {
                Some(Denial::EscalationExpired)
            }
            _ => Some(Denial::Rejected),
        };
        if let Some(denial) = denial {
            return Err(decided(denial, &proposal));
        }
        let tenant = self.tenant.as_deref().unwrap_or(&proposal.tenant);
        let Some(receipt) = proposal.decision.as_ref().and_then(|d| d.receipt.clone()) else {
            return Err(decided(Denial::NoReceipt, &proposal));
        };
        let receipt = receipt_from_proto(receipt);
        let expected = Expected {
            tenant,
            spec_digest: digest,
            proposal_id: Some(id),
        };
        if let Err(error) = receipt.verify(&self.public_key, &expected, now_ms()) {
            return Err(decided(Denial::InvalidReceipt(error), &proposal));
        }
        Ok(Approval { proposal, receipt })
    }
}

fn is_open(proposal: &v1::Proposal) -> bool {
    matches!(
        ProposalState::try_from(proposal.state),
        Ok(ProposalState::Pending | ProposalState::Reviewing | ProposalState::Escalated)
    )
}

/// A rejection people's escalation ended in by expiring: the `human` gate
/// failed as "expired: …" (absent from an agent's view).
fn expired_escalation(proposal: &v1::Proposal) -> bool {
    proposal.decision.as_ref().is_some_and(|d| {
        d.gates
            .iter()
            .any(|g| g.gate == "human" && !g.passed && g.detail.starts_with("expired"))
    })
}

/// A refusal about `proposal` as it stands, with its decision's messages.
fn decided(denial: Denial, proposal: &v1::Proposal) -> Box<NotApproved> {
    let decision = proposal.decision.as_ref();
    let mut agent_message = decision
        .map(|d| d.agent_message.clone())
        .unwrap_or_default();
    let mut detail = decision.map(|d| d.reason.clone()).unwrap_or_default();
    if agent_message.is_empty() {
        agent_message = match &denial {
            Denial::Cancelled => "The proposal was cancelled.".to_owned(),
            Denial::DeadlineExceeded => "No decision before the deadline.".to_owned(),
            _ => "Not approved.".to_owned(),
        };
    }
    if detail.is_empty() {
        detail = match &denial {
            Denial::Cancelled => proposal.cancel_reason.clone(),
            Denial::InvalidReceipt(error) => error.to_string(),
            _ => String::new(),
        };
    }
    if let Denial::InvalidReceipt(error) = &denial {
        detail = error.to_string();
    }
    Box::new(NotApproved {
        denial,
        proposal_id: Some(proposal.id.clone()),
        agent_message,
        detail,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate() -> Gate {
        Gate {
            client: Client::connect_lazy("http://127.0.0.1:1", "cs_x").unwrap(),
            public_key: String::new(),
            tenant: None,
            deadline: DEFAULT_DEADLINE,
            identity: None,
            key_window: DEFAULT_KEY_WINDOW,
        }
    }

    #[tokio::test]
    async fn derived_keys_hold_within_a_window_and_change_with_the_spec_or_the_window() {
        let gate = gate();
        let t = UNIX_EPOCH + Duration::from_secs(10 * 900 + 5);
        let later_same_window = t + Duration::from_secs(100);
        let next_window = t + Duration::from_secs(900);
        let key = gate.derive_key::<u8>("d1", t);
        assert_eq!(key, gate.derive_key::<u8>("d1", later_same_window));
        assert_ne!(key, gate.derive_key::<u8>("d2", t));
        assert_ne!(key, gate.derive_key::<u16>("d1", t));
        assert_ne!(key, gate.derive_key::<u8>("d1", next_window));
        assert!(key.starts_with("rs-") && key.len() <= 128);
    }
}
