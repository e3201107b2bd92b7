//! Tenant policy kept as documents by id — routes and model profiles: what
//! both backends share of keeping them. Each kind names its table and maps
//! its columns both ways (routes in `escalation.rs`, model profiles in
//! `model.rs`, their match columns once, in `escalation.rs`); each backend
//! puts, lists and deletes any kind with the same three statements
//! ([`PolicyDocuments`], in its `routes.rs`), and [`Routes`] and
//! [`ModelProfiles`] are those three for each kind, here.

use async_trait::async_trait;
use countersign_domain::{escalation::Route, model::ModelProfile};

use crate::{ModelProfiles, Result, Routes, rows::Columns};

/// A column's value as a statement binds it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Param {
    Text(String),
    Int(i64),
}

/// One kind of tenant policy document.
pub(crate) trait PolicyDocument: Sized + Clone + Send + Sync + 'static {
    /// What errors call it: `route`.
    const KIND: &'static str;
    /// Its table: the primary key is (tenant, id).
    const TABLE: &'static str;
    /// Creates or replaces one: `$1` its tenant, `$2` its id, then
    /// [`PolicyDocument::params`] in order, then now; `RETURNING *`. One text
    /// for both backends: SQLite numbers `$N` parameters in the order they
    /// first appear, which is N.
    const PUT: &'static str;

    fn id(&self) -> &str;
    /// The columns after the id, in the order of [`PolicyDocument::PUT`].
    fn params(&self) -> Vec<Param>;
    /// One row of its table.
    fn from_row(row: &impl Columns) -> Result<Self>;
}

/// A backend's keeping of policy documents, any kind.
#[async_trait]
pub(crate) trait PolicyDocuments: Send + Sync + 'static {
    /// Creates or replaces `doc` of `tenant`; returns it as stored.
    async fn put_document<D: PolicyDocument>(&self, tenant: &str, doc: &D) -> Result<D>;
    /// The tenant's documents of a kind, by id (byte order).
    async fn list_documents<D: PolicyDocument>(&self, tenant: &str) -> Result<Vec<D>>;
    /// Removes one and returns it; `NotFound` naming the kind when absent.
    async fn delete_document<D: PolicyDocument>(&self, tenant: &str, id: &str) -> Result<D>;
}

#[async_trait]
impl<S: PolicyDocuments> Routes for S {
    async fn put_route(&self, tenant: &str, route: &Route) -> Result<Route> {
        self.put_document(tenant, route).await
    }

    async fn list_routes(&self, tenant: &str) -> Result<Vec<Route>> {
        self.list_documents(tenant).await
    }

    async fn delete_route(&self, tenant: &str, id: &str) -> Result<Route> {
        self.delete_document(tenant, id).await
    }
}

#[async_trait]
impl<S: PolicyDocuments> ModelProfiles for S {
    async fn put_model_profile(
        &self,
        tenant: &str,
        profile: &ModelProfile,
    ) -> Result<ModelProfile> {
        self.put_document(tenant, profile).await
    }

    async fn list_model_profiles(&self, tenant: &str) -> Result<Vec<ModelProfile>> {
        self.list_documents(tenant).await
    }

    async fn delete_model_profile(&self, tenant: &str, id: &str) -> Result<ModelProfile> {
        self.delete_document(tenant, id).await
    }
}
