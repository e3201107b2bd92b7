//! [`Directory`]: credentials and tenants as the API sees them, read through a
//! short-lived cache so that a call does not cost two database reads before it
//! starts. Only found records are cached; an unknown key or tenant is looked up
//! every time. A revoked key or a changed tenant takes effect within the TTL
//! (`--credential-cache-ttl`, default 1 s; 0 turns the cache off).

use std::time::Duration;

use countersign_store::{ApiKeyRecord, DynStore, StoreError, Tenant};
use moka::sync::Cache;

pub const DEFAULT_TTL: Duration = Duration::from_secs(1);
const CAPACITY: u64 = 10_000;

pub struct Directory {
    store: DynStore,
    keys: Option<Cache<String, ApiKeyRecord>>,
    tenants: Option<Cache<String, Tenant>>,
}

impl Directory {
    pub fn new(store: DynStore, ttl: Duration) -> Self {
        Directory {
            store,
            keys: cache(ttl),
            tenants: cache(ttl),
        }
    }

    /// The key record with this id, revoked or not (the caller decides).
    pub async fn api_key(&self, id: &str) -> Result<Option<ApiKeyRecord>, StoreError> {
        read_through(&self.keys, id, self.store.find_api_key(id)).await
    }

    pub async fn tenant(&self, name: &str) -> Result<Option<Tenant>, StoreError> {
        read_through(&self.tenants, name, self.store.get_tenant(name)).await
    }
}

/// A cached value, or `load`'s; only found values are kept.
async fn read_through<V: Clone + Send + Sync + 'static>(
    cache: &Option<Cache<String, V>>,
    key: &str,
    load: impl std::future::Future<Output = Result<Option<V>, StoreError>>,
) -> Result<Option<V>, StoreError> {
    if let Some(hit) = cache.as_ref().and_then(|c| c.get(key)) {
        return Ok(Some(hit));
    }
    let found = load.await?;
    if let (Some(cache), Some(value)) = (cache, &found) {
        cache.insert(key.to_owned(), value.clone());
    }
    Ok(found)
}

fn cache<V: Clone + Send + Sync + 'static>(ttl: Duration) -> Option<Cache<String, V>> {
    (!ttl.is_zero()).then(|| {
        Cache::builder()
            .max_capacity(CAPACITY)
            .time_to_live(ttl)
            .build()
    })
}
