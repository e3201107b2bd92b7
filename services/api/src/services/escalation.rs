//! `countersign.v1.EscalationService`: the human inbox. Every rule of a vote
//! is `domain::escalation::resolve`, applied by the store in the vote's own
//! transaction (`Escalations::cast_vote`); this service names the caller from
//! the credential and shows the result as the caller may see it.

use std::sync::Arc;

use countersign_domain::{
    Decision, Millis, Permission,
    escalation::{self, Ballot, Resolution},
    now_ms,
};
use countersign_proto::{
    OrStatus,
    convert::{
        escalation::{
            escalation_to_proto, inbox_filter, page_after, page_token, verdict_from_proto,
        },
        page_size,
    },
    v1::{
        ListEscalationsRequest, ListEscalationsResponse, ResolveRequest,
        escalation_service_server::EscalationService,
    },
};
use countersign_store::{EscalationRecord, Escalations};
use tonic::{Request, Response, Status};

use super::{
    page,
    view::{Viewer, Views},
};
use crate::context::{Caller, require_id};

pub struct EscalationApi {
    store: Arc<dyn Escalations>,
    views: Views,
}

impl EscalationApi {
    pub fn new(store: Arc<dyn Escalations>, views: Views) -> Self {
        EscalationApi { store, views }
    }
}

/// How long people took over a decision they made, by its outcome.
fn record_resolution(opened_at: Millis, decision: &Decision) {
    let verdict = decision.outcome.as_str();
    metrics::counter!("countersign_escalations_resolved_total", "verdict" => verdict).increment(1);
    let seconds = decision.decided_at.saturating_sub(opened_at).max(0) as f64 / 1000.0;
    metrics::histogram!("countersign_escalation_resolution_seconds", "verdict" => verdict)
        .record(seconds);
}

/// The caller as a voter: who they are comes from the credential, never
/// from the request.
fn voter<'a>(caller: &'a Caller) -> escalation::Caller<'a> {
    let principal = &caller.principal;
    escalation::Caller {
        tenant: &caller.tenant.name,
        key_id: &principal.key_id,
        person: principal.person.as_deref(),
        role: principal.role,
        agent: principal.agent,
    }
}

#[tonic::async_trait]
impl EscalationService for EscalationApi {
    async fn list_escalations(
        &self,
        request: Request<ListEscalationsRequest>,
    ) -> Result<Response<ListEscalationsResponse>, Status> {
        let caller = Caller::authorize(&request, Permission::ReadProposal)?;
        let request = request.into_inner();
        let size = page_size(request.page_size).or_status()?;
        let after = page_after(&request.page_token).or_status()?;
        let filter = inbox_filter(&request, &voter(&caller), now_ms()).or_status()?;
        // One more than a page tells whether another page follows.
        let rows = self
            .store
            .list_escalations(&caller.tenant.name, &filter, after, size + 1)
            .await
            .or_status()?;
        let agent = caller.principal.agent;
        let (escalations, next_page_token) = page(
            rows,
            size,
            |r: &EscalationRecord| page_token(r.escalation.opened_at, &r.proposal.id),
            |r| escalation_to_proto(&r.proposal, &r.escalation, &r.votes, agent),
        );
        Ok(Response::new(ListEscalationsResponse {
            escalations,
            next_page_token,
        }))
    }

    async fn resolve(
        &self,
        request: Request<ResolveRequest>,
    ) -> Result<Response<countersign_proto::v1::Proposal>, Status> {
        // Who may vote is the route's rule (role, person, four eyes), checked
        // by `resolve` in the vote's transaction; any key may ask.
        let caller = Caller::authorize(&request, Permission::ReadProposal)?;
        let ResolveRequest {
            proposal_id,
            verdict,
            comment,
        } = request.into_inner();
        require_id("proposal_id", &proposal_id)?;
        tracing::Span::current().record("proposal_id", proposal_id.as_str());
        let voter = voter(&caller);
        let ballot = Ballot {
            verdict: verdict_from_proto(verdict),
            comment: &comment,
        };
        let voted = self
            .store
            .cast_vote(voter, &proposal_id, ballot, now_ms())
            .await
            .or_status()?
            .or_status()?;
        match &voted.resolution {
            Resolution::Repeat => {
                tracing::info!(proposal = %proposal_id, "vote repeated");
            }
            Resolution::Recorded {
                vote,
                approvals,
                required,
            } => {
                tracing::info!(proposal = %proposal_id, verdict = %vote.verdict, approvals, required, "vote recorded");
            }
            Resolution::Decided { vote, .. } => {
                let decided = voted.proposal.decision.as_ref();
                tracing::info!(proposal = %proposal_id, verdict = %vote.verdict, outcome = ?decided.map(|d| d.outcome), "escalation decided");
                // When it opened, for the time people took.
                let opened = self
                    .store
                    .get_escalation(&caller.tenant.name, &proposal_id)
                    .await
                    .or_status()?;
                if let (Some(record), Some(decision)) = (opened, decided) {
                    record_resolution(record.escalation.opened_at, decision);
                }
            }
        }
        let view = self
            .views
            .proposal(&voted.proposal, Viewer::of(&caller))
            .await?;
        Ok(Response::new(view))
    }
}
