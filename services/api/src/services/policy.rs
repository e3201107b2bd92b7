//! `countersign.v1.PolicyService`: the tenant's escalation routes and model
//! profiles, admins only, always within the caller's tenant. Both are policy
//! documents kept by id ([`Document`]): one put, one list and one delete
//! serve the RPCs of each.

use std::sync::Arc;

use countersign_domain::{FieldError, Permission, escalation::Route, model::ModelProfile, now_ms};
use countersign_proto::{
    OrStatus,
    convert::{
        escalation::{route_from_proto, route_to_proto},
        model::{profile_from_proto, profile_to_proto},
    },
    v1::{
        self, DeleteModelProfileRequest, DeleteRouteRequest, ListModelProfilesRequest,
        ListModelProfilesResponse, ListRoutesRequest, ListRoutesResponse, PutModelProfileRequest,
        PutRouteRequest, policy_service_server::PolicyService,
    },
};
use countersign_store::{ModelProfiles, Routes};
use tonic::{Request, Response, Status};

use crate::{
    context::{Caller, require_id},
    suppression::{Scope, Suppression},
};

pub struct PolicyApi {
    routes: Arc<dyn Routes>,
    profiles: Arc<dyn ModelProfiles>,
    suppression: Arc<Suppression>,
    /// The configured model endpoints' names: the only ones a profile may
    /// name.
    endpoints: Vec<String>,
}

impl PolicyApi {
    pub fn new(
        routes: Arc<dyn Routes>,
        profiles: Arc<dyn ModelProfiles>,
        suppression: Arc<Suppression>,
        endpoints: Vec<String>,
    ) -> Self {
        PolicyApi {
            routes,
            profiles,
            suppression,
            endpoints,
        }
    }

    /// A route decides whether a rejection would now go to people instead, a
    /// model profile whether a model reviews what the gates approve: the
    /// tenant's cached rejections go, as on any policy change.
    fn changed(&self, tenant: &str) {
        self.suppression.invalidate(tenant, Scope::Policy, now_ms());
    }

    /// Creates or replaces the document a put request carries (`document`
    /// takes it out of the request).
    async fn put<D: Document, R>(
        &self,
        request: Request<R>,
        document: impl FnOnce(R) -> Option<D::Wire>,
    ) -> Result<Response<D::Wire>, Status> {
        let caller = Caller::authorize(&request, Permission::ManagePolicy)?;
        let wire = document(request.into_inner())
            .ok_or_else(|| Status::invalid_argument(format!("{}: must be set", D::FIELD)))?;
        let doc = D::from_wire(self, wire).or_status()?;
        let stored = D::put(self, &caller.tenant.name, &doc).await.or_status()?;
        self.changed(&caller.tenant.name);
        tracing::info!(kind = D::KIND, id = stored.id(), "policy put");
        Ok(Response::new(stored.to_wire()))
    }

    /// The tenant's documents of a kind, by id.
    async fn list<D: Document, R>(&self, request: Request<R>) -> Result<Vec<D::Wire>, Status> {
        let caller = Caller::authorize(&request, Permission::ManagePolicy)?;
        let docs = D::list(self, &caller.tenant.name).await.or_status()?;
        Ok(docs.iter().map(D::to_wire).collect())
    }

    /// Removes the document a delete request names (`id` takes its id out of
    /// the request); NOT_FOUND, naming it, when the tenant has none.
    async fn delete<D: Document, R>(
        &self,
        request: Request<R>,
        id: impl FnOnce(R) -> String,
    ) -> Result<Response<D::Wire>, Status> {
        let caller = Caller::authorize(&request, Permission::ManagePolicy)?;
        let id = id(request.into_inner());
        require_id("id", &id)?;
        let doc = D::delete(self, &caller.tenant.name, &id)
            .await
            .or_status()?;
        self.changed(&caller.tenant.name);
        tracing::info!(kind = D::KIND, id = doc.id(), "policy deleted");
        Ok(Response::new(doc.to_wire()))
    }
}

/// A kind of tenant policy document, as its RPCs keep it.
#[tonic::async_trait]
trait Document: Sized + Send + Sync + 'static {
    type Wire: Send + 'static;
    /// What logs call it.
    const KIND: &'static str;
    /// Its field in a put request (and in the errors that name its fields).
    const FIELD: &'static str;

    fn id(&self) -> &str;
    fn to_wire(&self) -> Self::Wire;
    /// Checked, with its defaults applied, or the first field that breaks a
    /// rule.
    fn from_wire(api: &PolicyApi, wire: Self::Wire) -> Result<Self, FieldError>;
    async fn put(api: &PolicyApi, tenant: &str, doc: &Self) -> countersign_store::Result<Self>;
    async fn list(api: &PolicyApi, tenant: &str) -> countersign_store::Result<Vec<Self>>;
    async fn delete(api: &PolicyApi, tenant: &str, id: &str) -> countersign_store::Result<Self>;
}

#[tonic::async_trait]
impl Document for Route {
    type Wire = v1::Route;
    const KIND: &'static str = "route";
    const FIELD: &'static str = "route";

    fn id(&self) -> &str {
        &self.id
    }

    fn to_wire(&self) -> v1::Route {
        route_to_proto(self)
    }

    fn from_wire(_: &PolicyApi, wire: v1::Route) -> Result<Route, FieldError> {
        route_from_proto(wire)
    }

    async fn put(api: &PolicyApi, tenant: &str, route: &Route) -> countersign_store::Result<Route> {
        api.routes.put_route(tenant, route).await
    }

    async fn list(api: &PolicyApi, tenant: &str) -> countersign_store::Result<Vec<Route>> {
        api.routes.list_routes(tenant).await
    }

    async fn delete(api: &PolicyApi, tenant: &str, id: &str) -> countersign_store::Result<Route> {
        api.routes.delete_route(tenant, id).await
    }
}

#[tonic::async_trait]
impl Document for ModelProfile {
    type Wire = v1::ModelProfile;
    const KIND: &'static str = "model profile";
    const FIELD: &'static str = "profile";

    fn id(&self) -> &str {
        &self.id
    }

    fn to_wire(&self) -> v1::ModelProfile {
        profile_to_proto(self)
    }

    /// Its endpoint must be one of the configured endpoints' names.
    fn from_wire(api: &PolicyApi, wire: v1::ModelProfile) -> Result<ModelProfile, FieldError> {
        let endpoints: Vec<&str> = api.endpoints.iter().map(String::as_str).collect();
        profile_from_proto(wire, &endpoints)
    }

    async fn put(
        api: &PolicyApi,
        tenant: &str,
        profile: &ModelProfile,
    ) -> countersign_store::Result<ModelProfile> {
        api.profiles.put_model_profile(tenant, profile).await
    }

    async fn list(api: &PolicyApi, tenant: &str) -> countersign_store::Result<Vec<ModelProfile>> {
        api.profiles.list_model_profiles(tenant).await
    }

    async fn delete(
        api: &PolicyApi,
        tenant: &str,
        id: &str,
    ) -> countersign_store::Result<ModelProfile> {
        api.profiles.delete_model_profile(tenant, id).await
    }
}

#[tonic::async_trait]
impl PolicyService for PolicyApi {
    async fn put_route(
        &self,
        request: Request<PutRouteRequest>,
    ) -> Result<Response<v1::Route>, Status> {
        self.put::<Route, _>(request, |r| r.route).await
    }

    async fn list_routes(
        &self,
        request: Request<ListRoutesRequest>,
    ) -> Result<Response<ListRoutesResponse>, Status> {
        let routes = self.list::<Route, _>(request).await?;
        Ok(Response::new(ListRoutesResponse { routes }))
    }

    async fn delete_route(
        &self,
        request: Request<DeleteRouteRequest>,
    ) -> Result<Response<v1::Route>, Status> {
        self.delete::<Route, _>(request, |r| r.id).await
    }

    async fn put_model_profile(
        &self,
        request: Request<PutModelProfileRequest>,
    ) -> Result<Response<v1::ModelProfile>, Status> {
        self.put::<ModelProfile, _>(request, |r| r.profile).await
    }

    async fn list_model_profiles(
        &self,
        request: Request<ListModelProfilesRequest>,
    ) -> Result<Response<ListModelProfilesResponse>, Status> {
        let profiles = self.list::<ModelProfile, _>(request).await?;
        Ok(Response::new(ListModelProfilesResponse { profiles }))
    }

    async fn delete_model_profile(
        &self,
        request: Request<DeleteModelProfileRequest>,
    ) -> Result<Response<v1::ModelProfile>, Status> {
        self.delete::<ModelProfile, _>(request, |r| r.id).await
    }
}
