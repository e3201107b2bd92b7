//! `auth`: resolves `authorization: Bearer <key>` to a [`Principal`] and
//! binds the request to the principal's tenant: the tenant comes from the
//! credential and nowhere else. Both go into the request's extensions (the
//! tenant with its policy) and onto the RPC's span. Public RPCs, as `trace`
//! resolved them, pass untouched; every other path needs a credential. No,
//! unknown, revoked and malformed keys, and more than one `authorization`
//! header, all get the same `UNAUTHENTICATED`. An unknown id costs what a
//! known one with a wrong secret does: both are looked up through the
//! directory's cache and checked against a hash (a stand-in for the unknown
//! id). Refused credentials are limited per client address: past the limit
//! they are answered `RESOURCE_EXHAUSTED`. Accepted ones are never limited
//! here (the tenant's limit is `rate_limit`'s), so a client behind the same
//! address as a prober keeps working.

use std::{
    net::{IpAddr, Ipv4Addr},
    num::NonZeroU32,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use countersign_domain::{Principal, api_key};
use countersign_store::ApiKeyRecord;
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use tonic::{Status, transport::server::TcpConnectInfo};

use crate::{RateLimit, directory::Directory};

use super::{Answer, Middleware, Next, Request, Resolved, middleware_layer, reply};

pub const UNAUTHENTICATED: &str = "missing or invalid API key";
pub const TOO_MANY_REFUSED: &str =
    "too many refused credentials from this address; check the API key and retry later";

/// What a presented key with an unknown id is checked against: no key hashes
/// to it, and checking costs what checking a known key does.
const NO_KEY_HASH: [u8; 32] = [0; 32];

/// Refused credentials per client address: 10 a second, 100 at once.
pub fn default_refusal_limit() -> RateLimit {
    RateLimit {
        per_second: NonZeroU32::new(10).expect("non-zero"),
        burst: NonZeroU32::new(100).expect("non-zero"),
    }
}

/// The refusals of each client address, as a token bucket per address.
pub(crate) struct Refusals {
    limiter: DefaultKeyedRateLimiter<IpAddr>,
    counted: AtomicU64,
}

impl Refusals {
    /// Addresses whose buckets are full again are forgotten every so many
    /// refusals, so that many addresses cannot grow the table for good.
    const SWEEP_EVERY: u64 = 4096;

    pub(crate) fn new(limit: RateLimit) -> Self {
        Refusals {
            limiter: RateLimiter::keyed(
                Quota::per_second(limit.per_second).allow_burst(limit.burst),
            ),
            counted: AtomicU64::new(0),
        }
    }

    /// Counts one refusal from `peer`: false once it is over its limit.
    pub(crate) fn allow(&self, peer: IpAddr) -> bool {
        if self.counted.fetch_add(1, Ordering::Relaxed) % Self::SWEEP_EVERY == Self::SWEEP_EVERY - 1
        {
            self.limiter.retain_recent();
        }
        self.limiter.check_key(&peer).is_ok()
    }
}

#[derive(Clone)]
pub struct AuthLayer {
    directory: Arc<Directory>,
    refusals: Arc<Refusals>,
}

impl AuthLayer {
    /// `refusal_limit`: how many refused credentials one client address may
    /// present (see [`default_refusal_limit`]).
    pub fn new(directory: Arc<Directory>, refusal_limit: RateLimit) -> Self {
        AuthLayer {
            directory,
            refusals: Arc::new(Refusals::new(refusal_limit)),
        }
    }
}

middleware_layer!(AuthLayer, Auth);

/// Why a credential was refused. Callers all see one answer; logs see which.
#[derive(Debug)]
pub(crate) enum Refusal {
    Unauthenticated(&'static str),
    StoreDown(String),
}

async fn authenticate(
    directory: &Directory,
    headers: &http::HeaderMap,
) -> Result<Principal, Refusal> {
    let mut all = headers.get_all(http::header::AUTHORIZATION).iter();
    let header = all
        .next()
        .ok_or(Refusal::Unauthenticated("no authorization header"))?;
    // Two credentials are no credential: which one a proxy or a server would
    // pick is not something to rely on.
    if all.next().is_some() {
        return Err(Refusal::Unauthenticated(
            "more than one authorization header",
        ));
    }
    let text = header
        .to_str()
        .map_err(|_| Refusal::Unauthenticated("header is not text"))?;
    let key = text
        .strip_prefix("Bearer ")
        .ok_or(Refusal::Unauthenticated("not a bearer credential"))?
        .trim();
    principal_for_key(directory, key).await
}

/// The principal an API key's text stands for: the one check of a presented
/// key (the gRPC header's, and the console's sign-in).
pub(crate) async fn principal_for_key(
    directory: &Directory,
    key: &str,
) -> Result<Principal, Refusal> {
    let parsed = api_key::parse(key).map_err(|_| Refusal::Unauthenticated("malformed key"))?;
    let record = directory
        .api_key(&parsed.id)
        .await
        .map_err(|e| Refusal::StoreDown(e.to_string()))?;
    // Verify before looking at existence or revocation, so timing says
    // nothing about either.
    let matches = api_key::verify(
        key,
        record.as_ref().map_or(&NO_KEY_HASH[..], |r| &r.key_hash),
    );
    let record = record.ok_or(Refusal::Unauthenticated("unknown key"))?;
    if !matches {
        return Err(Refusal::Unauthenticated("wrong secret"));
    }
    principal_of(record)
}

/// The principal of a key's record, unless the key is revoked.
pub(crate) fn principal_of(record: ApiKeyRecord) -> Result<Principal, Refusal> {
    if record.revoked_at.is_some() {
        return Err(Refusal::Unauthenticated("revoked key"));
    }
    Ok(Principal {
        tenant: record.tenant,
        key_id: record.id,
        name: record.name,
        role: record.role,
        agent: record.agent,
        person: record.person,
    })
}

impl Middleware for AuthLayer {
    fn call<S: Next>(&self, mut inner: S, mut req: Request) -> Answer<S::Error> {
        if Resolved::is_public(&req) {
            return Box::pin(inner.call(req));
        }
        let AuthLayer {
            directory,
            refusals,
        } = self.clone();
        Box::pin(async move {
            let principal = match authenticate(&directory, req.headers()).await {
                Ok(principal) => principal,
                Err(Refusal::Unauthenticated(why)) => {
                    let peer = peer_ip(&req);
                    tracing::debug!(path = req.uri().path(), %peer, why, "credential refused");
                    return Ok(if refusals.allow(peer) {
                        reply(Status::unauthenticated(UNAUTHENTICATED))
                    } else {
                        reply(Status::resource_exhausted(TOO_MANY_REFUSED))
                    });
                }
                Err(Refusal::StoreDown(error)) => {
                    tracing::error!(%error, "credential store unavailable");
                    return Ok(reply(Status::unavailable("credential store unavailable")));
                }
            };
            let tenant = match directory.tenant(&principal.tenant).await {
                Ok(Some(tenant)) => tenant,
                Ok(None) => return Ok(reply(Status::unauthenticated(UNAUTHENTICATED))),
                Err(error) => {
                    tracing::error!(%error, "tenant lookup failed");
                    return Ok(reply(Status::unavailable("tenant store unavailable")));
                }
            };
            // On the RPC's span (the trace layer's).
            let span = tracing::Span::current();
            span.record("tenant", tenant.name.as_str());
            span.record("principal", principal.name.as_str());
            req.extensions_mut().insert(principal);
            req.extensions_mut().insert(tenant);
            inner.call(req).await
        })
    }
}

/// The client's address as refusals are counted: the TCP peer's, an IPv6
/// peer's /64 (one host can hold a whole /64), and one bucket for a request
/// without an address.
fn peer_ip<B>(req: &http::Request<B>) -> IpAddr {
    let ip = req
        .extensions()
        .get::<TcpConnectInfo>()
        .and_then(TcpConnectInfo::remote_addr)
        .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |addr| addr.ip());
    client_address(ip)
}

/// The address refusals are counted by for a peer at `ip`: an IPv6 peer's
/// /64, an IPv4-mapped one's IPv4 address.
pub(crate) fn client_address(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) if v6.to_ipv4_mapped().is_none() => {
            IpAddr::V6((u128::from(v6) & !u128::from(u64::MAX)).into())
        }
        IpAddr::V6(v6) => IpAddr::V4(v6.to_ipv4_mapped().expect("mapped")),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(addr: &str) -> http::Request<()> {
        let mut req = http::Request::new(());
        let info = TcpConnectInfo {
            local_addr: None,
            remote_addr: Some(addr.parse().unwrap()),
        };
        req.extensions_mut().insert(info);
        req
    }

    #[test]
    fn refusals_are_counted_per_address_and_per_ipv6_prefix() {
        assert_eq!(
            peer_ip(&from("10.1.2.3:4000")),
            "10.1.2.3".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            peer_ip(&from("[2001:db8:1:2:aaaa::1]:4000")),
            peer_ip(&from("[2001:db8:1:2:bbbb::9]:5000")),
        );
        assert_ne!(
            peer_ip(&from("[2001:db8:1:2::1]:4000")),
            peer_ip(&from("[2001:db8:1:3::1]:4000")),
        );
        assert_eq!(
            peer_ip(&from("[::ffff:10.1.2.3]:4000")),
            "10.1.2.3".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            peer_ip(&http::Request::new(())),
            IpAddr::V4(Ipv4Addr::UNSPECIFIED)
        );
    }

    #[test]
    fn each_address_has_its_own_budget_of_refusals() {
        let refusals = Refusals::new(RateLimit {
            per_second: NonZeroU32::new(1).unwrap(),
            burst: NonZeroU32::new(3).unwrap(),
        });
        let (a, b) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        assert!((0..3).all(|_| refusals.allow(a)));
        assert!(!refusals.allow(a), "over the burst");
        assert!(
            refusals.allow(b),
            "another address is not held to a's count"
        );
    }
}
