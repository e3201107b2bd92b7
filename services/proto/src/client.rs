//! Client plumbing shared by the CLI, the load generator and the tests.

use tonic::{
    metadata::{Ascii, MetadataValue},
    service::Interceptor,
};

/// Adds `authorization: Bearer <key>` to every call.
#[derive(Clone)]
pub struct BearerAuth {
    header: MetadataValue<Ascii>,
    send: bool,
}

#[derive(Debug, thiserror::Error)]
#[error("the API key contains characters not allowed in a header")]
pub struct BadKey;

impl BearerAuth {
    pub fn new(key: &str) -> Result<Self, BadKey> {
        let header = format!("Bearer {key}").parse().map_err(|_| BadKey)?;
        Ok(BearerAuth { header, send: true })
    }

    /// Sends `header` verbatim as `authorization`, or nothing when `send` is
    /// false (for tests of refused credentials).
    pub fn raw(header: MetadataValue<Ascii>, send: bool) -> Self {
        BearerAuth { header, send }
    }
}

impl Interceptor for BearerAuth {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if self.send {
            req.metadata_mut()
                .insert("authorization", self.header.clone());
        }
        Ok(req)
    }
}
