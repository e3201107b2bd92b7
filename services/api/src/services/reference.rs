//! `countersign.v1.SopService` and `countersign.v1.TargetService`: admins
//! write, every role reads, always within the caller's tenant.

use countersign_domain::{Permission, validate_sop, validate_target};
use countersign_proto::{
    OrStatus,
    convert::{
        page_size,
        reference::{
            List, page_after, page_token, sop_input_from_proto, sop_to_proto, status_from_proto,
            target_to_proto,
        },
    },
    to_status,
    v1::{
        GetSopRequest, GetTargetRequest, ListSopsRequest, ListSopsResponse, ListTargetsRequest,
        ListTargetsResponse, PutSopRequest, PutTargetRequest, RetireSopRequest, Sop, Target,
        sop_service_server::SopService, target_service_server::TargetService,
    },
};
use countersign_store::{Reference, StoreError};
use tonic::{Request, Response, Status};

use std::sync::Arc;

use countersign_domain::now_ms;

use super::page;
use crate::{
    context::{Caller, require_id},
    suppression::{Scope, Suppression},
};

pub struct SopApi {
    store: Arc<dyn Reference>,
    suppression: Arc<Suppression>,
}

impl SopApi {
    pub fn new(store: Arc<dyn Reference>, suppression: Arc<Suppression>) -> Self {
        SopApi { store, suppression }
    }

    /// Rejections of this action may rest on the old SOP: they go.
    fn changed(&self, tenant: &str, action: &str) {
        self.suppression
            .invalidate(tenant, Scope::Action(action.to_owned()), now_ms());
    }
}

fn sop_not_found(id: &str) -> Status {
    Status::not_found(format!("SOP `{id}` not found"))
}

#[tonic::async_trait]
impl SopService for SopApi {
    async fn put_sop(&self, request: Request<PutSopRequest>) -> Result<Response<Sop>, Status> {
        let caller = Caller::authorize(&request, Permission::WriteReference)?;
        let wire = request
            .into_inner()
            .sop
            .ok_or_else(|| Status::invalid_argument("sop: must be set"))?;
        let input = sop_input_from_proto(wire).or_status()?;
        validate_sop(&input).or_status()?;
        let sop = self
            .store
            .put_sop(&caller.tenant.name, input)
            .await
            .or_status()?;
        self.changed(&caller.tenant.name, &sop.action);
        tracing::info!(sop = ?sop.id, version = sop.version, "SOP put");
        Ok(Response::new(sop_to_proto(&sop)))
    }

    async fn get_sop(&self, request: Request<GetSopRequest>) -> Result<Response<Sop>, Status> {
        let caller = Caller::authorize(&request, Permission::ReadReference)?;
        let id = request.into_inner().id;
        require_id("id", &id)?;
        let sop = self
            .store
            .get_sop(&caller.tenant.name, &id)
            .await
            .or_status()?
            .ok_or_else(|| sop_not_found(&id))?;
        Ok(Response::new(sop_to_proto(&sop)))
    }

    async fn list_sops(
        &self,
        request: Request<ListSopsRequest>,
    ) -> Result<Response<ListSopsResponse>, Status> {
        let caller = Caller::authorize(&request, Permission::ReadReference)?;
        let request = request.into_inner();
        let size = page_size(request.page_size).or_status()?;
        let after = page_after(List::Sops, &request.page_token).or_status()?;
        // One more than a page tells whether another page follows.
        let rows = self
            .store
            .list_sops(
                &caller.tenant.name,
                request.include_retired,
                after.as_deref(),
                size + 1,
            )
            .await
            .or_status()?;
        let (sops, next_page_token) =
            page(rows, size, |s| page_token(List::Sops, &s.id), sop_to_proto);
        Ok(Response::new(ListSopsResponse {
            sops,
            next_page_token,
        }))
    }

    async fn retire_sop(
        &self,
        request: Request<RetireSopRequest>,
    ) -> Result<Response<Sop>, Status> {
        let caller = Caller::authorize(&request, Permission::WriteReference)?;
        let id = request.into_inner().id;
        require_id("id", &id)?;
        let sop = self
            .store
            .retire_sop(&caller.tenant.name, &id)
            .await
            .map_err(|e| match e {
                StoreError::NotFound(_) => sop_not_found(&id),
                other => to_status(&other),
            })?;
        self.changed(&caller.tenant.name, &sop.action);
        tracing::info!(sop = ?sop.id, version = sop.version, "SOP retired");
        Ok(Response::new(sop_to_proto(&sop)))
    }
}

pub struct TargetApi {
    store: Arc<dyn Reference>,
    suppression: Arc<Suppression>,
}

impl TargetApi {
    pub fn new(store: Arc<dyn Reference>, suppression: Arc<Suppression>) -> Self {
        TargetApi { store, suppression }
    }
}

#[tonic::async_trait]
impl TargetService for TargetApi {
    async fn put_target(
        &self,
        request: Request<PutTargetRequest>,
    ) -> Result<Response<Target>, Status> {
        let caller = Caller::authorize(&request, Permission::WriteReference)?;
        let wire = request
            .into_inner()
            .target
            .ok_or_else(|| Status::invalid_argument("target: must be set"))?;
        let labels = wire.labels.into_iter().collect();
        validate_target(&wire.id, &labels).or_status()?;
        let status = status_from_proto(wire.status).or_status()?;
        let target = self
            .store
            .put_target(&caller.tenant.name, &wire.id, status, labels)
            .await
            .or_status()?;
        // Rejections that rested on its old status or labels go.
        self.suppression.invalidate(
            &caller.tenant.name,
            Scope::Target(target.id.clone()),
            now_ms(),
        );
        tracing::info!(target_id = ?target.id, status = %target.status, "target put");
        Ok(Response::new(target_to_proto(&target)))
    }

    async fn get_target(
        &self,
        request: Request<GetTargetRequest>,
    ) -> Result<Response<Target>, Status> {
        let caller = Caller::authorize(&request, Permission::ReadReference)?;
        let id = request.into_inner().id;
        require_id("id", &id)?;
        let target = self
            .store
            .get_target(&caller.tenant.name, &id)
            .await
            .or_status()?
            .ok_or_else(|| Status::not_found(format!("target `{id}` not found")))?;
        Ok(Response::new(target_to_proto(&target)))
    }

    async fn list_targets(
        &self,
        request: Request<ListTargetsRequest>,
    ) -> Result<Response<ListTargetsResponse>, Status> {
        let caller = Caller::authorize(&request, Permission::ReadReference)?;
        let request = request.into_inner();
        let size = page_size(request.page_size).or_status()?;
        let after = page_after(List::Targets, &request.page_token).or_status()?;
        // One more than a page tells whether another page follows.
        let rows = self
            .store
            .list_targets(&caller.tenant.name, after.as_deref(), size + 1)
            .await
            .or_status()?;
        let (targets, next_page_token) = page(
            rows,
            size,
            |t| page_token(List::Targets, &t.id),
            target_to_proto,
        );
        Ok(Response::new(ListTargetsResponse {
            targets,
            next_page_token,
        }))
    }
}
