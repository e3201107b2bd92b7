//! [`Directory`]: credentials and tenants as the API sees them, read through a
//! short-lived cache so that a call does not cost two database reads before it
//! starts. Found and missing records are both cached: an unknown key id is
//! looked up once per TTL however often it is presented, so refused
//! credentials cost what accepted ones do. A revoked key or a changed tenant
//! takes effect within the TTL (`--credential-cache-ttl`, default 1 s; 0 turns
//! the cache off).

use std::{
    collections::HashMap,
    sync::{Arc, RwLock},
    time::{Duration, Instant},
};

use countersign_store::{ApiKeyRecord, StoreError, Tenant};

pub const DEFAULT_TTL: Duration = Duration::from_secs(1);
const CAPACITY: usize = 10_000;

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
    found: Option<Expiring<V>>,
    missing: Option<Expiring<()>>,
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

fn cache<V: Clone>(ttl: Duration) -> Option<Expiring<V>> {
    (!ttl.is_zero()).then(|| Expiring {
        ttl,
        entries: RwLock::default(),
    })
}

/// Values kept for `ttl` from when they were put, at most [`CAPACITY`] of
/// them: a put into a full map first drops what has expired, and if nothing
/// has, the value is not kept (it is loaded again the next time). A lookup
/// is a read lock and one hash; the directory is read on every call.
struct Expiring<V> {
    ttl: Duration,
    entries: RwLock<HashMap<String, (Instant, V)>>,
}

impl<V: Clone> Expiring<V> {
    fn get(&self, key: &str) -> Option<V> {
        let entries = self.entries.read().expect("directory cache");
        let (put_at, value) = entries.get(key)?;
        (put_at.elapsed() < self.ttl).then(|| value.clone())
    }

    fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    fn insert(&self, key: String, value: V) {
        let mut entries = self.entries.write().expect("directory cache");
        let now = Instant::now();
        if entries.len() >= CAPACITY && !entries.contains_key(&key) {
            entries.retain(|_, (put_at, _)| now.duration_since(*put_at) < self.ttl);
            if entries.len() >= CAPACITY {
                return;
            }
        }
        entries.insert(key, (now, value));
    }
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

    #[test]
    fn a_value_lives_for_the_ttl_and_a_full_cache_makes_room_only_from_the_expired() {
        let ttl = Duration::from_millis(200);
        let cache = cache::<u32>(ttl).unwrap();
        for n in 0..CAPACITY {
            cache.insert(format!("k{n}"), 1);
        }
        cache.insert("late".into(), 2);
        assert_eq!(cache.get("late"), None, "full: not kept");
        assert_eq!(cache.get("k0"), Some(1), "what it has stays");
        cache.insert("k0".into(), 3);
        assert_eq!(cache.get("k0"), Some(3), "a key it has is replaced");
        std::thread::sleep(ttl);
        assert_eq!(cache.get("k1"), None, "expired");
        cache.insert("late".into(), 2);
        assert_eq!(cache.get("late"), Some(2));
        assert_eq!(cache.entries.read().unwrap().len(), 1, "the expired went");
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
