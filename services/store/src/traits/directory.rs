use async_trait::async_trait;

use crate::{ApiKeyRecord, BootstrapKey, NewApiKey, Result, Tenant, TenantPolicy};

/// Tenants and their policies.
#[async_trait]
pub trait Tenants: Send + Sync + 'static {
    /// On an empty database: creates tenant `default` and an admin key for it,
    /// in one transaction, and returns the key. Otherwise `None`.
    async fn bootstrap(&self) -> Result<Option<BootstrapKey>>;

    async fn create_tenant(&self, name: &str) -> Result<Tenant>;
    async fn get_tenant(&self, name: &str) -> Result<Option<Tenant>>;
    async fn list_tenants(&self) -> Result<Vec<Tenant>>;
    async fn set_tenant_policy(&self, name: &str, policy: TenantPolicy) -> Result<Tenant>;
}

/// API keys, found by id (authentication) and kept by the admin commands.
#[async_trait]
pub trait ApiKeys: Send + Sync + 'static {
    /// Mints a key; the returned text is the only time it exists unhashed.
    async fn create_api_key(&self, new: NewApiKey) -> Result<(ApiKeyRecord, String)>;
    async fn find_api_key(&self, id: &str) -> Result<Option<ApiKeyRecord>>;
    async fn list_api_keys(&self, tenant: Option<&str>) -> Result<Vec<ApiKeyRecord>>;
    async fn revoke_api_key(&self, id: &str) -> Result<ApiKeyRecord>;
}

/// The directory: tenants and API keys, what authentication reads and the
/// admin commands write.
pub trait Directory: Tenants + ApiKeys {}

impl<T: Tenants + ApiKeys> Directory for T {}
