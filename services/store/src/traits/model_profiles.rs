use async_trait::async_trait;
use countersign_domain::model::ModelProfile;

use crate::Result;

/// The tenant's model profiles: admins write them, reviewers read them (with
/// the routes, in `Reviews::review_facts_many`).
#[async_trait]
pub trait ModelProfiles: Send + Sync + 'static {
    /// Creates or replaces `profile.id` of `tenant`; returns it as stored.
    async fn put_model_profile(&self, tenant: &str, profile: &ModelProfile)
    -> Result<ModelProfile>;
    /// The tenant's model profiles, by id (byte order).
    async fn list_model_profiles(&self, tenant: &str) -> Result<Vec<ModelProfile>>;
    /// Removes one and returns it; `NotFound` when absent. Decisions it
    /// shaped keep their model review.
    async fn delete_model_profile(&self, tenant: &str, id: &str) -> Result<ModelProfile>;
}
