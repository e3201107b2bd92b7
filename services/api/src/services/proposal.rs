//! `countersign.v1.ProposalService`.

use countersign_domain::{Permission, ProposalSpec, validate_spec};
use countersign_proto::{
    OrStatus,
    convert::{proposal_to_proto, spec_from_proto},
    to_status,
    v1::{
        AwaitDecisionRequest, CancelProposalRequest, GetProposalRequest, Proposal, SubmitRequest,
        SubmitResponse, proposal_service_server::ProposalService,
    },
};
use countersign_store::{NewProposal, Proposals, SubmitOutcome};
use tonic::{Request, Response, Status};

use std::sync::Arc;

use countersign_domain::now_ms;

use super::view::Views;
use crate::{
    context::{Caller, require_id},
    fanout::Fanout,
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
}

impl ProposalApi {
    pub fn new(
        store: Arc<dyn Proposals>,
        views: Views,
        fanout: Fanout,
        suppression: Arc<Suppression>,
    ) -> Self {
        ProposalApi {
            store,
            views,
            fanout,
            suppression,
        }
    }
}

/// The answer to an identical retry of a cached rejection.
fn suppressed(entry: &Entry, retry: ProposalSpec, caller: &Caller) -> Response<SubmitResponse> {
    tracing::debug!(earlier = %entry.proposal.id, "identical retry suppressed");
    Response::new(SubmitResponse {
        proposal: Some(proposal_to_proto(
            &entry.answer(retry),
            caller.principal.agent,
        )),
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

#[tonic::async_trait]
impl ProposalService for ProposalApi {
    async fn submit(
        &self,
        request: Request<SubmitRequest>,
    ) -> Result<Response<SubmitResponse>, Status> {
        let caller = Caller::authorize(&request, Permission::SubmitProposal)?;
        let wire = request
            .into_inner()
            .spec
            .ok_or_else(|| Status::invalid_argument("spec: must be set"))?;
        let spec = spec_from_proto(wire).or_status()?;
        validate_spec(&spec).or_status()?;
        let tenant = &caller.tenant;
        let refusal = match self
            .suppression
            .check(&tenant.name, &tenant.policy, &spec, now_ms())
        {
            Some(refusal) => Some(refusal),
            None => self
                .suppression
                .check_shared(&tenant.name, &spec, now_ms())
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
                let view = self
                    .views
                    .proposal(&earlier, caller.principal.agent)
                    .await?;
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
                    return Ok(suppressed(&entry, spec, &caller));
                }
            }
        }
        let outcome = self
            .store
            .insert_proposal(NewProposal {
                tenant: caller.tenant.name.clone(),
                spec,
                submitted_by: caller.principal.name.clone(),
                submitted_by_person: caller.principal.person.clone(),
                submitted_key: Some(caller.principal.key_id.clone()),
                // The review continues this call's trace.
                trace_parent: trace_context::current_traceparent(),
            })
            .await
            .or_status()?;
        let deduplicated = matches!(outcome, SubmitOutcome::Deduplicated(_));
        let proposal = outcome.proposal();
        tracing::Span::current().record("proposal_id", proposal.id.as_str());
        tracing::info!(proposal = %proposal.id, deduplicated, "proposal accepted");
        // A deduplicated one may be waiting for people.
        let view = self
            .views
            .proposal(proposal, caller.principal.agent)
            .await?;
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
        let view = self
            .views
            .proposal(&proposal, caller.principal.agent)
            .await?;
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
        let mut closing = self.fanout.closing();
        // Register before the first read, so a decision in between is not missed.
        let mut ended = self.fanout.await_end(&caller.tenant.name, &id);
        loop {
            let proposal = self
                .store
                .get_proposal(&caller.tenant.name, &id)
                .await
                .or_status()?
                .ok_or_else(|| not_found(&id))?;
            if proposal.state.is_terminal() {
                return Ok(Response::new(
                    self.views.decided(&proposal, caller.principal.agent),
                ));
            }
            // The call's deadline (the timeout layer) ends the wait with
            // DEADLINE_EXCEEDED.
            tokio::select! {
                published = &mut ended => match published {
                    Some(published) => {
                        return Ok(Response::new(
                            self.views.decided(&published.event.proposal, caller.principal.agent),
                        ));
                    }
                    None => ended = self.fanout.await_end(&caller.tenant.name, &id),
                },
                _ = tokio::time::sleep(await_poll()) => {}
                // A wait must not hold the server's drain open: the caller
                // awaits again (on another replica, or after the restart).
                _ = closing.closed() => {
                    return Err(Status::unavailable(format!(
                        "server shutting down; await proposal `{id}` again"
                    )));
                }
            }
        }
    }
}
