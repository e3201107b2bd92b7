//! `countersign.v1.ProposalService`.

use countersign_domain::{Permission, ProposalSpec, validate_spec};
use countersign_proto::{
    OrStatus,
    convert::{proposal_to_proto, spec_from_proto, wait_from_proto},
    to_status,
    v1::{
        AwaitDecisionRequest, CancelProposalRequest, GetProposalRequest, Proposal, SubmitRequest,
        SubmitResponse, proposal_service_server::ProposalService,
    },
};
use countersign_store::{NewProposal, Proposals, SubmitOutcome, SubmitReview};
use tokio::time::Instant;
use tonic::{Request, Response, Status};

use std::sync::Arc;

use countersign_domain::now_ms;

use super::view::{Viewer, Views};
use crate::{
    context::{Caller, require_id},
    fanout::{Fanout, Waiter},
    layers::timeout::CallDeadline,
    suppression::{Entry, Refusal, Suppression},
    trace_context,
};

pub const MAX_CANCEL_REASON: usize = 4 * 1024;

/// How often an await re-reads the proposal anyway: belt and braces, since the
/// fan-out's pump reads every event in order and wakes the await with its end.
/// Long and spread out: during a backlog thousands of calls wait at once, and
/// a short poll made them read the store faster than it could decide (at 2 s,
/// 15,000 waiting calls cut the decision rate from ~600/s to 35/s).
fn await_poll() -> std::time::Duration {
    use rand::Rng;
    std::time::Duration::from_millis(rand::rng().random_range(30_000..40_000))
}

pub struct ProposalApi {
    store: Arc<dyn Proposals>,
    views: Views,
    fanout: Fanout,
    suppression: Arc<Suppression>,
    /// The review a waiting submission gets in its own transaction.
    at_submission: Option<Arc<dyn SubmitReview>>,
}

impl ProposalApi {
    pub fn new(
        store: Arc<dyn Proposals>,
        views: Views,
        fanout: Fanout,
        suppression: Arc<Suppression>,
        at_submission: Option<Arc<dyn SubmitReview>>,
    ) -> Self {
        ProposalApi {
            store,
            views,
            fanout,
            suppression,
            at_submission,
        }
    }
}

/// The answer to an identical retry of a cached rejection, as the caller
/// may see it (an agent, the terse decision).
fn suppressed(entry: &Entry, retry: &ProposalSpec, caller: &Caller) -> Response<SubmitResponse> {
    tracing::debug!(earlier = %entry.proposal.id, "identical retry suppressed");
    Response::new(SubmitResponse {
        proposal: Some(entry.answer(retry, caller.principal.agent)),
        deduplicated: false,
        suppressed: true,
    })
}

/// The answer to a submission whose idempotency key names `earlier` (its
/// wire form), with the same spec.
fn deduplicated(earlier: Proposal) -> Response<SubmitResponse> {
    tracing::info!(proposal = %earlier.id, deduplicated = true, "proposal accepted");
    Response::new(SubmitResponse {
        proposal: Some(earlier),
        deduplicated: true,
        suppressed: false,
    })
}

fn not_found(id: &str) -> Status {
    Status::not_found(format!("proposal `{id}` not found"))
}

/// How a wait for a proposal's decision ended.
enum Waited {
    /// It is terminal: as the caller may see it.
    Decided(Box<Proposal>),
    /// The wait's end came first.
    Open,
    /// The server is shutting down.
    Closing,
}

/// A `Submit` that waits for its decision: until `until`, the sooner of the
/// wait it asked for and its deadline (none: no end but the call's).
#[derive(Clone, Copy)]
struct Wait {
    until: Option<Instant>,
}

impl Wait {
    /// The wait `request` asks for (`wait_for_decision`; absent or zero:
    /// none), ending in time to answer before the call's `deadline`.
    fn asked(
        wait_for_decision: Option<&prost_types::Duration>,
        deadline: Option<CallDeadline>,
    ) -> Result<Option<Wait>, Status> {
        let Some(asked) = wait_for_decision else {
            return Ok(None);
        };
        let asked = wait_from_proto("wait_for_decision", asked).or_status()?;
        if asked.is_zero() {
            return Ok(None);
        }
        let until = Instant::now()
            .checked_add(asked)
            .into_iter()
            .chain(deadline.map(CallDeadline::wait_until))
            .min();
        Ok(Some(Wait { until }))
    }
}

impl ProposalApi {
    /// The one wait for a decision (`AwaitDecision`, and a `Submit` that
    /// waits): until proposal `id` is terminal, `until` passes (none: only
    /// the call's deadline ends it) or the server begins to shut down.
    /// `registered` is a waiter for `id` made before the proposal was
    /// committed, PENDING: no decision can have been published before it, so
    /// the first read of the store is not needed.
    async fn wait_for_end(
        &self,
        caller: &Caller,
        id: &str,
        until: Option<Instant>,
        registered: Option<Waiter>,
    ) -> Result<Waited, Status> {
        let tenant = caller.tenant.name.as_str();
        let mut closing = self.fanout.closing();
        // Register before the first read, so a decision in between is not missed.
        let mut read = registered.is_none();
        let mut ended = registered.unwrap_or_else(|| self.fanout.await_end(tenant, id));
        let end = async {
            match until {
                Some(until) => tokio::time::sleep_until(until).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(end);
        loop {
            if read {
                let proposal = self
                    .store
                    .get_proposal(tenant, id)
                    .await
                    .or_status()?
                    .ok_or_else(|| not_found(id))?;
                if proposal.state.is_terminal() {
                    return Ok(Waited::Decided(Box::new(
                        self.views.decided(&proposal, Viewer::of(caller)),
                    )));
                }
            }
            read = true;
            tokio::select! {
                published = &mut ended => match published {
                    Some(published) => {
                        return Ok(Waited::Decided(Box::new(
                            self.views.decided(&published.event.proposal, Viewer::of(caller)),
                        )));
                    }
                    None => ended = self.fanout.await_end(tenant, id),
                },
                _ = tokio::time::sleep(await_poll()) => {}
                _ = &mut end => return Ok(Waited::Open),
                _ = closing.closed() => return Ok(Waited::Closing),
            }
        }
    }

    /// `proposal` as the caller may see it; with a `wait`, once it is decided
    /// or the wait ends, as it stands then (an open proposal keeps its id in
    /// the answer, so nothing accepted is lost to the wait).
    async fn shown(
        &self,
        caller: &Caller,
        proposal: &countersign_domain::Proposal,
        wait: Option<Wait>,
        registered: Option<Waiter>,
    ) -> Result<Proposal, Status> {
        let viewer = Viewer::of(caller);
        let Some(wait) = wait.filter(|_| !proposal.state.is_terminal()) else {
            return self.views.proposal(proposal, viewer).await;
        };
        match self
            .wait_for_end(caller, &proposal.id, wait.until, registered)
            .await?
        {
            Waited::Decided(view) => Ok(*view),
            Waited::Open | Waited::Closing => {
                let now = self
                    .store
                    .get_proposal(&caller.tenant.name, &proposal.id)
                    .await
                    .or_status()?
                    .ok_or_else(|| not_found(&proposal.id))?;
                self.views.proposal(&now, viewer).await
            }
        }
    }
}

#[tonic::async_trait]
impl ProposalService for ProposalApi {
    async fn submit(
        &self,
        request: Request<SubmitRequest>,
    ) -> Result<Response<SubmitResponse>, Status> {
        let caller = Caller::authorize(&request, Permission::SubmitProposal)?;
        let deadline = CallDeadline::of(&request);
        let SubmitRequest {
            spec,
            wait_for_decision,
        } = request.into_inner();
        let wire = spec.ok_or_else(|| Status::invalid_argument("spec: must be set"))?;
        let spec = spec_from_proto(wire).or_status()?;
        let wait = Wait::asked(wait_for_decision.as_ref(), deadline)?;
        validate_spec(&spec).or_status()?;
        let tenant = &caller.tenant;
        // The awaits past the in-process cache are boxed, here and below:
        // their state, held in this future, would be carried (and moved) by
        // every call, the ones the cache answers at once too.
        let refusal = match self
            .suppression
            .check(&tenant.name, &tenant.policy, &spec, now_ms())
        {
            Some(refusal) => Some(refusal),
            None => Box::pin(self.suppression.check_shared(&tenant.name, &spec, now_ms()))
                .await
                .map(Refusal::Suppressed),
        };
        if let Some(refusal) = refusal {
            // The idempotency key comes first, as the insert would honour it:
            // the same spec is the earlier proposal, another is ALREADY_EXISTS.
            let earlier = self
                .store
                .find_idempotent(&tenant.name, &spec)
                .await
                .or_status()?;
            if let Some(earlier) = earlier {
                tracing::Span::current().record("proposal_id", earlier.id.as_str());
                let view = Box::pin(self.shown(&caller, &earlier, wait, None)).await?;
                return Ok(deduplicated(view));
            }
            match refusal {
                Refusal::BreakerOpen { window } => {
                    let whose = if spec.operator.is_empty() {
                        "without an operator".to_owned()
                    } else {
                        format!("from operator `{}`", spec.operator)
                    };
                    return Err(Status::failed_precondition(format!(
                        "too many rejected proposals {whose}; a human must look \
                         (the breaker closes {} after the last of them, or when an admin resets it)",
                        humantime::format_duration(window)
                    )));
                }
                Refusal::Suppressed(entry) => {
                    self.suppression.count_retry(&tenant.name, &entry);
                    return Ok(suppressed(&entry, &spec, &caller));
                }
            }
        }
        let id = NewProposal::new_id();
        // A waiting call listens for the proposal's end from before it is
        // committed: it then learns of a decision without reading the store
        // (one the store decides as it stores it needs no listening).
        let waiter = wait.map(|_| self.fanout.await_end(&caller.tenant.name, &id));
        let new = NewProposal {
            id: id.clone(),
            tenant: caller.tenant.name.clone(),
            spec,
            submitted_by: caller.principal.name.clone(),
            submitted_by_person: caller.principal.person.clone(),
            submitted_key: Some(caller.principal.key_id.clone()),
            // The review continues this call's trace.
            trace_parent: trace_context::current_traceparent(),
        };
        // A call that waits is reviewed as it is stored, where the store
        // can: the decision is in the answer without a trip through the
        // queue. One that does not wait is queued for the reviewers.
        let outcome = match (&wait, &self.at_submission) {
            (Some(_), Some(review)) => self.store.submit_reviewed(new, review.clone()).await,
            _ => self.store.insert_proposal(new).await,
        }
        .or_status()?;
        let deduplicated = matches!(outcome, SubmitOutcome::Deduplicated(_));
        let proposal = outcome.proposal();
        if !deduplicated && proposal.state.is_terminal() {
            // Decided as it was stored: an identical retry that follows
            // this answer at once finds the rejection cached.
            self.suppression.remember(proposal);
        }
        tracing::Span::current().record("proposal_id", proposal.id.as_str());
        tracing::info!(proposal = %proposal.id, deduplicated, "proposal accepted");
        // An earlier proposal (its idempotency key) is waited for as it is
        // now: it may be decided already, or waiting for people.
        let registered = waiter.filter(|_| proposal.id == id);
        let view = Box::pin(self.shown(&caller, proposal, wait, registered)).await?;
        Ok(Response::new(SubmitResponse {
            proposal: Some(view),
            deduplicated,
            suppressed: false,
        }))
    }

    async fn get_proposal(
        &self,
        request: Request<GetProposalRequest>,
    ) -> Result<Response<Proposal>, Status> {
        let caller = Caller::authorize(&request, Permission::ReadProposal)?;
        let id = request.into_inner().id;
        require_id("id", &id)?;
        tracing::Span::current().record("proposal_id", id.as_str());
        let proposal = self
            .store
            .get_proposal(&caller.tenant.name, &id)
            .await
            .or_status()?
            .ok_or_else(|| not_found(&id))?;
        let view = self.views.proposal(&proposal, Viewer::of(&caller)).await?;
        Ok(Response::new(view))
    }

    async fn cancel_proposal(
        &self,
        request: Request<CancelProposalRequest>,
    ) -> Result<Response<Proposal>, Status> {
        let caller = Caller::authorize(&request, Permission::CancelProposal)?;
        let CancelProposalRequest { id, reason } = request.into_inner();
        require_id("id", &id)?;
        tracing::Span::current().record("proposal_id", id.as_str());
        if reason.len() > MAX_CANCEL_REASON {
            return Err(Status::invalid_argument(format!(
                "reason: must be at most {MAX_CANCEL_REASON} bytes"
            )));
        }
        // A coordinator cancels what its own key submitted; on-call and admin
        // any proposal of the tenant.
        let only_key = (!caller.principal.may(Permission::CancelAnyProposal))
            .then_some(caller.principal.key_id.as_str());
        let proposal = self
            .store
            .cancel_proposal(&caller.tenant.name, &id, &reason, only_key)
            .await
            .map_err(|e| match e {
                countersign_store::StoreError::NotFound(_) => not_found(&id),
                other => to_status(&other),
            })?;
        tracing::info!(proposal = %proposal.id, "proposal cancelled");
        Ok(Response::new(proposal_to_proto(
            &proposal,
            caller.principal.agent,
        )))
    }

    async fn await_decision(
        &self,
        request: Request<AwaitDecisionRequest>,
    ) -> Result<Response<Proposal>, Status> {
        let caller = Caller::authorize(&request, Permission::ReadProposal)?;
        let id = request.into_inner().id;
        require_id("id", &id)?;
        tracing::Span::current().record("proposal_id", id.as_str());
        // The call's deadline (the timeout layer) ends the wait with
        // DEADLINE_EXCEEDED.
        match self.wait_for_end(&caller, &id, None, None).await? {
            Waited::Decided(view) => Ok(Response::new(*view)),
            Waited::Open => Err(Status::deadline_exceeded(format!(
                "proposal `{id}` is not decided yet"
            ))),
            // A wait must not hold the server's drain open: the caller
            // awaits again (on another replica, or after the restart).
            Waited::Closing => Err(Status::unavailable(format!(
                "server shutting down; await proposal `{id}` again"
            ))),
        }
    }
}
