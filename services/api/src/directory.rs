//! [`Directory`]: credentials and tenants as the API sees them, read through a
//! short-lived cache so that a call does not cost two database reads before it
//! starts. Found and missing records are both cached: an unknown key id is
//! looked up once per TTL however often it is presented, so refused
//! credentials cost what accepted ones do. A revoked key or a changed tenant
//! takes effect within the TTL (`--credential-cache-ttl`, default 1 s; 0 turns
//! the cache off).

use std::{sync::Arc, time::Duration};

use countersign_store::{ApiKeyRecord, StoreError, Tenant};
use moka::sync::Cache;

pub const DEFAULT_TTL: Duration = Duration::from_secs(1);
const CAPACITY: u64 = 10_000;

pub struct Directory {
    store: Arc<dyn countersign_store::Directory>,
    keys: Lookups<ApiKeyRecord>,
    tenants: Lookups<Tenant>,
}

impl Directory {
    pub fn new(store: Arc<dyn countersign_store::Directory>, ttl: Duration) -> Self {
        Directory {
            store,
            keys: Lookups::new(ttl),
            tenants: Lookups::new(ttl),
        }
    }

    /// The key record with this id, revoked or not (the caller decides).
    pub async fn api_key(&self, id: &str) -> Result<Option<ApiKeyRecord>, StoreError> {
        self.keys.get(id, self.store.find_api_key(id)).await
    }

    pub async fn tenant(&self, name: &str) -> Result<Option<Tenant>, StoreError> {
        self.tenants.get(name, self.store.get_tenant(name)).await
    }
}

/// One kind of record, read through two caches: what was found, and what
/// was not. Missing records have a cache of their own, so that a flood of
/// made-up ids cannot evict the credentials in use.
struct Lookups<V> {
    found: Option<Cache<String, V>>,
    missing: Option<Cache<String, ()>>,
}

impl<V: Clone + Send + Sync + 'static> Lookups<V> {
    fn new(ttl: Duration) -> Self {
        Lookups {
            found: cache(ttl),
            missing: cache(ttl),
        }
    }

    /// The cached answer for `key`, or `load`'s (awaited only on a miss).
    async fn get(
        &self,
        key: &str,
        load: impl std::future::Future<Output = Result<Option<V>, StoreError>>,
    ) -> Result<Option<V>, StoreError> {
        if let Some(hit) = self.found.as_ref().and_then(|c| c.get(key)) {
            return Ok(Some(hit));
        }
        if self.missing.as_ref().is_some_and(|c| c.contains_key(key)) {
            return Ok(None);
        }
        let loaded = load.await?;
        match &loaded {
            Some(value) => {
                if let Some(found) = &self.found {
                    found.insert(key.to_owned(), value.clone());
                }
            }
            None => {
                if let Some(missing) = &self.missing {
                    missing.insert(key.to_owned(), ());
                }
            }
        }
        Ok(loaded)
    }
}

fn cache<V: Clone + Send + Sync + 'static>(ttl: Duration) -> Option<Cache<String, V>> {
    (!ttl.is_zero()).then(|| {
        Cache::builder()
            .max_capacity(CAPACITY)
            .time_to_live(ttl)
            .build()
    })
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// Looks `key` up through `lookups`, counting the loads that reach the
    /// "store" (which holds only `known`).
    async fn look(lookups: &Lookups<u32>, loads: &AtomicUsize, key: &str) -> Option<u32> {
        let load = async {
            loads.fetch_add(1, Ordering::SeqCst);
            Ok((key == "known").then_some(7))
        };
        lookups.get(key, load).await.unwrap()
    }

    #[tokio::test]
    async fn an_unknown_id_reaches_the_store_once_per_ttl() {
        let lookups = Lookups::new(Duration::from_secs(3600));
        let loads = AtomicUsize::new(0);
        for _ in 0..100 {
            assert_eq!(look(&lookups, &loads, "made-up").await, None);
        }
        assert_eq!(loads.load(Ordering::SeqCst), 1, "the miss is cached");
        for _ in 0..100 {
            assert_eq!(look(&lookups, &loads, "known").await, Some(7));
        }
        assert_eq!(loads.load(Ordering::SeqCst), 2, "and so is the hit");
    }

    #[tokio::test]
    async fn without_a_ttl_every_lookup_reaches_the_store() {
        let lookups = Lookups::new(Duration::ZERO);
        let loads = AtomicUsize::new(0);
        for _ in 0..3 {
            assert_eq!(look(&lookups, &loads, "made-up").await, None);
            assert_eq!(look(&lookups, &loads, "known").await, Some(7));
        }
        assert_eq!(loads.load(Ordering::SeqCst), 6);
    }
}
