//! `tenant_bind`: the tenant comes from the credential and nowhere else. Loads
//! the principal's tenant (with its policy) into the request's extensions and
//! opens the request span that carries it.

use std::{
    sync::Arc,
    task::{Context, Poll},
};

use countersign_domain::Principal;
use tonic::Status;
use tower::{Layer, Service};

use crate::directory::Directory;

use super::{BoxFuture, auth::UNAUTHENTICATED, is_public, reply, take_ready};

#[derive(Clone)]
pub struct TenantBindLayer {
    store: Arc<Directory>,
}

impl TenantBindLayer {
    pub fn new(store: Arc<Directory>) -> Self {
        TenantBindLayer { store }
    }
}

impl<S> Layer<S> for TenantBindLayer {
    type Service = TenantBind<S>;

    fn layer(&self, inner: S) -> Self::Service {
        TenantBind {
            inner,
            store: self.store.clone(),
        }
    }
}

#[derive(Clone)]
pub struct TenantBind<S> {
    inner: S,
    store: Arc<Directory>,
}

impl<S, ReqBody, ResBody> Service<http::Request<ReqBody>> for TenantBind<S>
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

    fn call(&mut self, mut req: http::Request<ReqBody>) -> Self::Future {
        let mut inner = take_ready(&mut self.inner);
        let store = self.store.clone();
        Box::pin(async move {
            if is_public(req.uri().path()) {
                return inner.call(req).await;
            }
            // Fail closed: a request that reached here without a principal is refused.
            let Some(principal) = req.extensions().get::<Principal>().cloned() else {
                return Ok(reply(Status::unauthenticated(UNAUTHENTICATED)));
            };
            let tenant = match store.tenant(&principal.tenant).await {
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
            req.extensions_mut().insert(tenant);
            inner.call(req).await
        })
    }
}
