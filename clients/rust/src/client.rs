//! [`Client`]: typed calls to a Countersign server.

use std::time::Duration;

use countersign_proto::{
    client::BearerAuth,
    v1::{
        self, AwaitDecisionRequest, CancelProposalRequest, GetProposalRequest, SubmitRequest,
        notification_service_client::NotificationServiceClient,
        proposal_service_client::ProposalServiceClient,
    },
};
use tonic::{
    service::interceptor::InterceptedService,
    transport::{Channel, Endpoint},
};

use crate::watch::Watch;

type Authenticated = InterceptedService<Channel, BearerAuth>;

/// How long past a wait a call's deadline runs, so the server's answer (the
/// decision, or the proposal still open when the wait ended) arrives.
const ANSWER_SLACK: Duration = Duration::from_secs(1);

/// What a call to Countersign can end in other than its answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The endpoint is not a URL this client can call.
    #[error("bad endpoint `{endpoint}`: {reason}")]
    Endpoint {
        /// The endpoint as given.
        endpoint: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The API key cannot be sent in a header.
    #[error("the API key contains characters not allowed in a header")]
    Key,
    /// The server could not be reached when connecting.
    #[error("cannot reach {endpoint}: {source}")]
    Connect {
        /// The endpoint as given.
        endpoint: String,
        /// The transport's error.
        #[source]
        source: tonic::transport::Error,
    },
    /// The call ended in a gRPC status other than OK.
    #[error("{}: {}", .0.code(), .0.message())]
    Status(#[from] tonic::Status),
    /// The server's answer lacks a part it always sends.
    #[error("malformed answer: {0}")]
    Malformed(&'static str),
}

impl Error {
    /// The gRPC code of a call that ended in a status; `Unavailable` for a
    /// server that could not be reached.
    pub fn code(&self) -> Option<tonic::Code> {
        match self {
            Error::Status(status) => Some(status.code()),
            Error::Connect { .. } => Some(tonic::Code::Unavailable),
            _ => None,
        }
    }
}

/// The answer to a submission.
#[derive(Debug, Clone, PartialEq)]
pub struct Submitted {
    /// The proposal: just accepted, decided, or (after a wait) still open.
    pub proposal: v1::Proposal,
    /// The idempotency key matched an earlier proposal with the same spec:
    /// this is that proposal.
    pub deduplicated: bool,
    /// An identical proposal was rejected moments ago: this is its
    /// rejection, answered without a new review.
    pub suppressed: bool,
}

/// A connection to a Countersign server, authenticated with one API key.
/// Cheap to clone: clones share the connection.
#[derive(Clone)]
pub struct Client {
    proposals: ProposalServiceClient<Authenticated>,
    notifications: NotificationServiceClient<Authenticated>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").finish_non_exhaustive()
    }
}

fn endpoint(url: &str) -> Result<Endpoint, Error> {
    let bad = |reason: String| Error::Endpoint {
        endpoint: url.to_owned(),
        reason,
    };
    let endpoint = Endpoint::from_shared(url.to_owned()).map_err(|e| bad(e.to_string()))?;
    if url.starts_with("https://") {
        return tls(endpoint).map_err(bad);
    }
    if !url.starts_with("http://") {
        return Err(bad("must start with http:// or https://".into()));
    }
    Ok(endpoint)
}

#[cfg(feature = "tls")]
fn tls(endpoint: Endpoint) -> Result<Endpoint, String> {
    let config = tonic::transport::ClientTlsConfig::new().with_native_roots();
    endpoint.tls_config(config).map_err(|e| e.to_string())
}

#[cfg(not(feature = "tls"))]
fn tls(_: Endpoint) -> Result<Endpoint, String> {
    Err("https needs this crate's `tls` feature".into())
}

impl Client {
    /// Connects to `url` (`http://host:port`, or `https://…` for TLS) and
    /// calls with `api_key`; fails if the server cannot be reached now.
    pub async fn connect(url: &str, api_key: &str) -> Result<Client, Error> {
        let channel = endpoint(url)?
            .connect()
            .await
            .map_err(|source| Error::Connect {
                endpoint: url.to_owned(),
                source,
            })?;
        Client::with_channel(channel, api_key)
    }

    /// As [`Client::connect`], but connects on the first call (and again
    /// after the connection drops): a server that cannot be reached fails
    /// each call with `UNAVAILABLE` instead.
    pub fn connect_lazy(url: &str, api_key: &str) -> Result<Client, Error> {
        Client::with_channel(endpoint(url)?.connect_lazy(), api_key)
    }

    /// Calls over `channel`, built as the caller needs it (its own TLS
    /// settings, timeouts or load balancing), with `api_key`.
    pub fn with_channel(channel: Channel, api_key: &str) -> Result<Client, Error> {
        let auth = BearerAuth::new(api_key).map_err(|_| Error::Key)?;
        Ok(Client {
            proposals: ProposalServiceClient::with_interceptor(channel.clone(), auth.clone()),
            notifications: NotificationServiceClient::with_interceptor(channel, auth),
        })
    }

    /// Submits `spec` for review and answers once it is accepted (or
    /// deduplicated, or suppressed). OK means it will reach exactly one
    /// terminal state.
    pub async fn submit(&self, spec: v1::ProposalSpec) -> Result<Submitted, Error> {
        self.submit_request(spec, None).await
    }

    /// Submits `spec` and waits up to `wait` for its decision, in one call
    /// (`SubmitRequest.wait_for_decision`): the decided proposal, or the
    /// proposal still open (PENDING, REVIEWING, ESCALATED) when the wait
    /// ends.
    pub async fn submit_and_wait(
        &self,
        spec: v1::ProposalSpec,
        wait: Duration,
    ) -> Result<Submitted, Error> {
        self.submit_request(spec, Some(wait)).await
    }

    async fn submit_request(
        &self,
        spec: v1::ProposalSpec,
        wait: Option<Duration>,
    ) -> Result<Submitted, Error> {
        let mut request = tonic::Request::new(SubmitRequest {
            spec: Some(spec),
            wait_for_decision: None,
        });
        if let Some(wait) = wait {
            request.get_mut().wait_for_decision =
                Some(wait.try_into().map_err(|_| {
                    tonic::Status::invalid_argument("wait_for_decision: out of range")
                })?);
            request.set_timeout(wait + ANSWER_SLACK);
        }
        let answer = self.proposals.clone().submit(request).await?.into_inner();
        Ok(Submitted {
            proposal: answer
                .proposal
                .ok_or(Error::Malformed("Submit answered no proposal"))?,
            deduplicated: answer.deduplicated,
            suppressed: answer.suppressed,
        })
    }

    /// Waits up to `timeout` for proposal `id` to be decided; past it, the
    /// call ends `DEADLINE_EXCEEDED` (which is not a rejection).
    pub async fn await_decision(&self, id: &str, timeout: Duration) -> Result<v1::Proposal, Error> {
        let mut request = tonic::Request::new(AwaitDecisionRequest { id: id.to_owned() });
        request.set_timeout(timeout);
        Ok(self
            .proposals
            .clone()
            .await_decision(request)
            .await?
            .into_inner())
    }

    /// Proposal `id` as this key may see it.
    pub async fn get(&self, id: &str) -> Result<v1::Proposal, Error> {
        let request = GetProposalRequest { id: id.to_owned() };
        Ok(self
            .proposals
            .clone()
            .get_proposal(request)
            .await?
            .into_inner())
    }

    /// Cancels proposal `id` while it is open, with `reason`; a decided one
    /// is `FAILED_PRECONDITION`.
    pub async fn cancel(&self, id: &str, reason: &str) -> Result<v1::Proposal, Error> {
        let request = CancelProposalRequest {
            id: id.to_owned(),
            reason: reason.to_owned(),
        };
        Ok(self
            .proposals
            .clone()
            .cancel_proposal(request)
            .await?
            .into_inner())
    }

    /// The tenant's review stream as `request` filters it: a
    /// [`futures::Stream`] of events (heartbeats left out) that, after a
    /// disconnect, a server restart or a shed stream, opens a new stream
    /// from the last cursor it saw, with backoff, so no event is missed or
    /// repeated. It ends with an error only where resuming cannot help (a
    /// refused credential, a bad request, a cursor past retention).
    pub fn watch(&self, request: v1::WatchRequest) -> Watch {
        Watch::new(self.notifications.clone(), request)
    }
}

#[cfg(test)]
mod tests {
    use super::{Error, endpoint};

    #[test]
    fn endpoints_are_http_or_https_urls() {
        assert!(endpoint("http://127.0.0.1:50051").is_ok());
        assert!(endpoint("https://countersign.example.com").is_ok(), "TLS");
        for bad in ["127.0.0.1:50051", "grpc://host:1", "not a url"] {
            assert!(
                matches!(endpoint(bad), Err(Error::Endpoint { .. })),
                "{bad}"
            );
        }
    }
}
