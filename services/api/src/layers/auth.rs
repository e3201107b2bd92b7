//! `auth`: resolves `authorization: Bearer <key>` to a [`Principal`] and puts
//! it in the request's extensions. No, unknown, revoked and malformed keys all
//! get the same `UNAUTHENTICATED`.

use std::{
    sync::Arc,
    task::{Context, Poll},
};

use countersign_domain::{Principal, api_key};
use tonic::Status;
use tower::{Layer, Service};

use crate::directory::Directory;

use super::{BoxFuture, is_public, reply, take_ready};

pub const UNAUTHENTICATED: &str = "missing or invalid API key";

#[derive(Clone)]
pub struct AuthLayer {
    store: Arc<Directory>,
}

impl AuthLayer {
    pub fn new(store: Arc<Directory>) -> Self {
        AuthLayer { store }
    }
}

impl<S> Layer<S> for AuthLayer {
    type Service = Auth<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Auth {
            inner,
            store: self.store.clone(),
        }
    }
}

#[derive(Clone)]
pub struct Auth<S> {
    inner: S,
    store: Arc<Directory>,
}

/// Why a credential was refused. Callers all see one answer; logs see which.
#[derive(Debug)]
enum Refusal {
    Unauthenticated(&'static str),
    StoreDown(String),
}

async fn authenticate(
    store: &Directory,
    header: Option<&http::HeaderValue>,
) -> Result<Principal, Refusal> {
    let header = header.ok_or(Refusal::Unauthenticated("no authorization header"))?;
    let text = header
        .to_str()
        .map_err(|_| Refusal::Unauthenticated("header is not text"))?;
    let key = text
        .strip_prefix("Bearer ")
        .ok_or(Refusal::Unauthenticated("not a bearer credential"))?
        .trim();
    let parsed = api_key::parse(key).map_err(|_| Refusal::Unauthenticated("malformed key"))?;
    let record = store
        .api_key(&parsed.id)
        .await
        .map_err(|e| Refusal::StoreDown(e.to_string()))?
        .ok_or(Refusal::Unauthenticated("unknown key"))?;
    // Verify before looking at revocation, so timing says nothing either way.
    let matches = api_key::verify(key, &record.key_hash);
    if !matches {
        return Err(Refusal::Unauthenticated("wrong secret"));
    }
    if record.revoked_at.is_some() {
        return Err(Refusal::Unauthenticated("revoked key"));
    }
    Ok(Principal {
        tenant: record.tenant,
        key_id: record.id,
        name: record.name,
        role: record.role,
        agent: record.agent,
    })
}

impl<S, ReqBody, ResBody> Service<http::Request<ReqBody>> for Auth<S>
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
            let header = req.headers().get(http::header::AUTHORIZATION);
            match authenticate(&store, header).await {
                Ok(principal) => {
                    req.extensions_mut().insert(principal);
                    inner.call(req).await
                }
                Err(Refusal::Unauthenticated(why)) => {
                    tracing::debug!(path = req.uri().path(), why, "credential refused");
                    Ok(reply(Status::unauthenticated(UNAUTHENTICATED)))
                }
                Err(Refusal::StoreDown(error)) => {
                    tracing::error!(%error, "credential store unavailable");
                    Ok(reply(Status::unavailable("credential store unavailable")))
                }
            }
        })
    }
}
