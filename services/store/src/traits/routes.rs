use async_trait::async_trait;
use countersign_domain::escalation::Route;

use crate::Result;

/// The tenant's routes: admins write them, reviewers read them.
#[async_trait]
pub trait Routes: Send + Sync + 'static {
    /// Creates or replaces `route.id` of `tenant`; returns it as stored.
    async fn put_route(&self, tenant: &str, route: &Route) -> Result<Route>;
    /// The tenant's routes, by id (byte order).
    async fn list_routes(&self, tenant: &str) -> Result<Vec<Route>>;
    /// Removes one and returns it; `NotFound` when absent. Proposals it
    /// already escalated keep its terms (their escalation rows copy them).
    async fn delete_route(&self, tenant: &str, id: &str) -> Result<Route>;
}
