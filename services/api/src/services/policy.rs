//! `countersign.v1.PolicyService`: the tenant's escalation routes, admins
//! only, always within the caller's tenant.

use std::sync::Arc;

use countersign_domain::{Permission, now_ms};
use countersign_proto::{
    OrStatus,
    convert::escalation::{route_from_proto, route_to_proto},
    to_status,
    v1::{
        DeleteRouteRequest, ListRoutesRequest, ListRoutesResponse, PutRouteRequest, Route,
        policy_service_server::PolicyService,
    },
};
use countersign_store::{Routes, StoreError};
use tonic::{Request, Response, Status};

use crate::{
    context::{Caller, require_id},
    suppression::{Scope, Suppression},
};

pub struct PolicyApi {
    store: Arc<dyn Routes>,
    suppression: Arc<Suppression>,
}

impl PolicyApi {
    pub fn new(store: Arc<dyn Routes>, suppression: Arc<Suppression>) -> Self {
        PolicyApi { store, suppression }
    }

    /// A route decides whether a rejection would now go to people instead:
    /// the tenant's cached rejections go, as on any policy change.
    fn changed(&self, tenant: &str) {
        self.suppression.invalidate(tenant, Scope::Policy, now_ms());
    }
}

#[tonic::async_trait]
impl PolicyService for PolicyApi {
    async fn put_route(
        &self,
        request: Request<PutRouteRequest>,
    ) -> Result<Response<Route>, Status> {
        let caller = Caller::authorize(&request, Permission::ManagePolicy)?;
        let wire = request
            .into_inner()
            .route
            .ok_or_else(|| Status::invalid_argument("route: must be set"))?;
        let route = route_from_proto(wire).or_status()?;
        let stored = self
            .store
            .put_route(&caller.tenant.name, &route)
            .await
            .or_status()?;
        self.changed(&caller.tenant.name);
        tracing::info!(route = ?stored.id, approvals_required = stored.approvals_required, "route put");
        Ok(Response::new(route_to_proto(&stored)))
    }

    async fn list_routes(
        &self,
        request: Request<ListRoutesRequest>,
    ) -> Result<Response<ListRoutesResponse>, Status> {
        let caller = Caller::authorize(&request, Permission::ManagePolicy)?;
        let routes = self
            .store
            .list_routes(&caller.tenant.name)
            .await
            .or_status()?;
        Ok(Response::new(ListRoutesResponse {
            routes: routes.iter().map(route_to_proto).collect(),
        }))
    }

    async fn delete_route(
        &self,
        request: Request<DeleteRouteRequest>,
    ) -> Result<Response<Route>, Status> {
        let caller = Caller::authorize(&request, Permission::ManagePolicy)?;
        let id = request.into_inner().id;
        require_id("id", &id)?;
        let route = self
            .store
            .delete_route(&caller.tenant.name, &id)
            .await
            .map_err(|e| match e {
                StoreError::NotFound(_) => Status::not_found(format!("route `{id}` not found")),
                other => to_status(&other),
            })?;
        self.changed(&caller.tenant.name);
        tracing::info!(route = ?route.id, "route deleted");
        Ok(Response::new(route_to_proto(&route)))
    }
}
