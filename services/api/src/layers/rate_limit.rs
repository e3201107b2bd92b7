//! `rate_limit`: a token bucket per tenant. A tenant that floods is refused
//! with `RESOURCE_EXHAUSTED`; the others never notice.

use std::{
    num::NonZeroU32,
    sync::Arc,
    task::{Context, Poll},
};

use countersign_store::Tenant;
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use tonic::Status;
use tower::{Layer, Service};

use super::{BoxFuture, reply, take_ready};

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

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimited<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimited {
            inner,
            limiter: self.limiter.clone(),
        }
    }
}

#[derive(Clone)]
pub struct RateLimited<S> {
    inner: S,
    limiter: Arc<DefaultKeyedRateLimiter<String>>,
}

impl<S, ReqBody, ResBody> Service<http::Request<ReqBody>> for RateLimited<S>
where
    S: Service<http::Request<ReqBody>, Response = http::Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    ReqBody: Send + 'static,
    ResBody: Default,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<ReqBody>) -> Self::Future {
        let mut inner = take_ready(&mut self.inner);
        let verdict = req
            .extensions()
            .get::<Tenant>()
            .map(|tenant| (tenant.name.clone(), self.limiter.check_key(&tenant.name)));
        Box::pin(async move {
            match verdict {
                Some((tenant, Err(_))) => {
                    metrics::counter!("countersign_rate_limited_total", "tenant" => tenant.clone())
                        .increment(1);
                    Ok(reply(Status::resource_exhausted(format!(
                        "rate limit exceeded for tenant `{tenant}`; slow down and retry"
                    ))))
                }
                // Allowed, or a public path (no tenant bound).
                _ => inner.call(req).await,
            }
        })
    }
}
