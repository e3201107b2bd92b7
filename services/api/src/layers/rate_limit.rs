//! `rate_limit`: a token bucket per tenant. A tenant that floods is refused
//! with `RESOURCE_EXHAUSTED`; the others never notice.

use std::{num::NonZeroU32, sync::Arc};

use countersign_store::Tenant;
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use tonic::Status;

use super::{
    Answer, Middleware, Next, Request, Resolved, auth::UNAUTHENTICATED, middleware_layer, reply,
};

/// Sustained requests per second per tenant, and the burst above that.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    pub per_second: NonZeroU32,
    pub burst: NonZeroU32,
}

impl Default for RateLimit {
    fn default() -> Self {
        RateLimit {
            per_second: NonZeroU32::new(5_000).expect("non-zero"),
            burst: NonZeroU32::new(10_000).expect("non-zero"),
        }
    }
}

#[derive(Clone)]
pub struct RateLimitLayer {
    limiter: Arc<DefaultKeyedRateLimiter<String>>,
}

impl RateLimitLayer {
    pub fn new(limit: RateLimit) -> Self {
        let quota = Quota::per_second(limit.per_second).allow_burst(limit.burst);
        RateLimitLayer {
            limiter: Arc::new(RateLimiter::keyed(quota)),
        }
    }
}

middleware_layer!(RateLimitLayer, RateLimited);

impl Middleware for RateLimitLayer {
    fn call<S: Next>(&self, mut inner: S, req: Request) -> Answer<S::Error> {
        if Resolved::is_public(&req) {
            return Box::pin(inner.call(req));
        }
        // Fail closed: every other request has the tenant `auth` bound.
        let Some(tenant) = req.extensions().get::<Tenant>() else {
            return Box::pin(async { Ok(reply(Status::unauthenticated(UNAUTHENTICATED))) });
        };
        if self.limiter.check_key(&tenant.name).is_ok() {
            return Box::pin(inner.call(req));
        }
        let tenant = tenant.name.clone();
        Box::pin(async move {
            metrics::counter!("countersign_rate_limited_total", "tenant" => tenant.clone())
                .increment(1);
            Ok(reply(Status::resource_exhausted(format!(
                "rate limit exceeded for tenant `{tenant}`; slow down and retry"
            ))))
        })
    }
}
