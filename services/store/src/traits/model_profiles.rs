use async_trait::async_trait;
use countersign_domain::{Millis, model::ModelProfile};

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

/// The tenants' model calls per minute, one count per tenant for every
/// process of a deployment: the reviewers of every replica take their calls
/// here, so a tenant's cap holds however many of them review its proposals.
#[async_trait]
pub trait ModelCalls: Send + Sync + 'static {
    /// Takes one of `tenant`'s model calls at `now` if fewer than
    /// `per_minute` were taken in the minute before it (`now - 60 s`,
    /// exclusive, to `now`); `false` when the minute's calls are spent, and
    /// then nothing is taken. The check and the take are one step: two
    /// callers at once never both take the last call. 0 means no cap (always
    /// `true`, nothing is kept).
    async fn take_model_call(&self, tenant: &str, now: Millis, per_minute: u32) -> Result<bool>;
}
