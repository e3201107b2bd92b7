//! `ReviewGateLayer` against the real server, built in-process by the
//! composition root `countersign serve` uses: the wrapped service runs once
//! on a verified approval of exactly the request's spec, and never
//! otherwise.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use countersign_client::{
    Client, Denial, GateError, NotApproved, Proposable, ReceiptError, ReviewGateLayer,
    current_approval, v1,
};
use countersign_domain::{Role, receipt::receipt_message};
use countersign_proto::{
    convert::spec_from_proto,
    v1::{
        AwaitDecisionRequest, CancelProposalRequest, GetProposalRequest, Proposal, SubmitRequest,
        SubmitResponse,
        proposal_service_client::ProposalServiceClient,
        proposal_service_server::{ProposalService, ProposalServiceServer},
    },
};
use countersign_test_support::{
    app::{TestApp, test_signing_key},
    fixtures::wire_spec_on,
};
use tonic::{Request, Response, Status, transport::Channel};
use tower::{Layer, Service, ServiceExt, service_fn};

const TENANT: &str = "acme";

/// A tool call: a write on `target`, or a read that proposes nothing.
#[derive(Debug, Clone)]
struct Tool {
    target: String,
    write: bool,
}

impl Tool {
    fn restart(target: &str) -> Tool {
        Tool {
            target: target.into(),
            write: true,
        }
    }
}

impl Proposable for Tool {
    fn proposal(&self) -> Option<v1::ProposalSpec> {
        self.write.then(|| wire_spec_on(&self.target))
    }
}

/// One call of the wrapped service: its target, and the proposal of the
/// approval it ran under.
type Seen = (String, Option<String>);

/// What the wrapped service saw.
#[derive(Clone, Default)]
struct Calls(Arc<Mutex<Vec<Seen>>>);

impl Calls {
    fn seen(&self) -> Vec<Seen> {
        self.0.lock().unwrap().clone()
    }

    /// The wrapped tool: records the call, and fails the first `failures`
    /// of them.
    fn tool(
        &self,
        failures: usize,
    ) -> impl Service<
        Tool,
        Response = String,
        Error = std::io::Error,
        Future = impl Future<Output = Result<String, std::io::Error>> + Send,
    > + Clone
    + Send
    + 'static {
        let calls = self.0.clone();
        service_fn(move |tool: Tool| {
            let calls = calls.clone();
            async move {
                let approval = current_approval().map(|a| a.proposal.id);
                let mut calls = calls.lock().unwrap();
                calls.push((tool.target.clone(), approval));
                if calls.len() <= failures {
                    return Err(std::io::Error::other("the tool failed"));
                }
                Ok(format!("restarted {}", tool.target))
            }
        })
    }
}

/// A reviewing server with SOP-007 and its targets, and a coordinator key.
async fn reviewing() -> (TestApp, String) {
    let app = TestApp::spawn_reviewing(1).await;
    app.seed_reference(TENANT).await;
    let key = app.key(TENANT, Role::Coordinator).await;
    (app, key)
}

fn layer(client: Client) -> ReviewGateLayer {
    ReviewGateLayer::new(client, test_signing_key().public_hex()).deadline(Duration::from_secs(30))
}

async fn call<S>(gated: &mut S, tool: Tool) -> Result<String, S::Error>
where
    S: Service<Tool, Response = String>,
{
    gated.ready().await?.call(tool).await
}

fn not_approved(result: Result<String, GateError<std::io::Error>>) -> NotApproved {
    match result {
        Err(GateError::NotApproved(n)) => n,
        other => panic!("expected NotApproved, got {other:?}"),
    }
}

#[tokio::test]
async fn an_approval_runs_the_wrapped_service_once_under_it() {
    let (app, key) = reviewing().await;
    let client = Client::connect(&app.endpoint(), &key).await.unwrap();
    let calls = Calls::default();
    let mut gated = layer(client).layer(calls.tool(0));

    let answer = call(&mut gated, Tool::restart("node-01")).await.unwrap();
    assert_eq!(answer, "restarted node-01");
    let seen = calls.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    let id = seen[0].1.clone().expect("it ran under an approval");
    let stored = app.get(&key, &id).await.unwrap();
    assert_eq!(stored.state, v1::ProposalState::Approved as i32);
    assert_eq!(current_approval(), None, "only inside the gated call");
}

#[tokio::test]
async fn a_rejection_never_calls_it_and_says_why() {
    let (app, key) = reviewing().await;
    let client = Client::connect(&app.endpoint(), &key).await.unwrap();
    let calls = Calls::default();
    let mut gated = layer(client).layer(calls.tool(0));

    let refusal = not_approved(call(&mut gated, Tool::restart("node-unknown")).await);
    assert_eq!(refusal.denial, Denial::Rejected);
    let id = refusal.proposal_id.clone().expect("the proposal's id");
    let stored = app.get(&key, &id).await.unwrap();
    assert_eq!(stored.state, v1::ProposalState::Rejected as i32);
    assert_eq!(
        refusal.agent_message,
        stored.decision.unwrap().agent_message
    );
    assert!(calls.seen().is_empty());
}

#[tokio::test]
async fn a_suppressed_retry_never_calls_it() {
    let (app, key) = reviewing().await;
    let client = Client::connect(&app.endpoint(), &key).await.unwrap();
    // The same call, rejected moments ago (without the gate's key).
    let first = client
        .submit_and_wait(wire_spec_on("node-unknown"), Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(first.proposal.state, v1::ProposalState::Rejected as i32);
    let calls = Calls::default();
    let mut gated = layer(client).layer(calls.tool(0));

    let refusal = not_approved(call(&mut gated, Tool::restart("node-unknown")).await);
    assert_eq!(refusal.denial, Denial::Suppressed);
    assert_eq!(
        refusal.proposal_id.as_deref(),
        Some(first.proposal.id.as_str())
    );
    assert!(!refusal.agent_message.is_empty());
    assert!(calls.seen().is_empty());
}

#[tokio::test]
async fn an_unreachable_server_never_calls_it() {
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", free.local_addr().unwrap());
    drop(free);
    let client = Client::connect_lazy(&endpoint, "cs_key").unwrap();
    let calls = Calls::default();
    let mut gated = layer(client).layer(calls.tool(0));

    let refusal = not_approved(call(&mut gated, Tool::restart("node-01")).await);
    assert_eq!(refusal.denial, Denial::Unreachable);
    assert_eq!(refusal.proposal_id, None);
    assert!(calls.seen().is_empty());
}

#[tokio::test]
async fn past_the_deadline_it_never_calls_it() {
    // The API alone: the proposal stays PENDING.
    let app = TestApp::spawn().await;
    app.seed_reference(TENANT).await;
    let key = app.key(TENANT, Role::Coordinator).await;
    let client = Client::connect(&app.endpoint(), &key).await.unwrap();
    let calls = Calls::default();
    let mut gated = layer(client)
        .deadline(Duration::from_secs(1))
        .layer(calls.tool(0));

    let refusal = not_approved(call(&mut gated, Tool::restart("node-01")).await);
    assert_eq!(refusal.denial, Denial::DeadlineExceeded);
    let id = refusal.proposal_id.expect("the open proposal's id");
    assert_eq!(
        app.get(&key, &id).await.unwrap().state,
        v1::ProposalState::Pending as i32
    );
    assert!(calls.seen().is_empty());
}

#[tokio::test]
async fn a_cancelled_proposal_never_calls_it() {
    let app = TestApp::spawn().await;
    app.seed_reference(TENANT).await;
    let key = app.key(TENANT, Role::Coordinator).await;
    let client = Client::connect(&app.endpoint(), &key).await.unwrap();
    let calls = Calls::default();
    let mut gated = layer(client).layer(calls.tool(0));

    let cancel = async {
        let id = loop {
            if let Some(event) = app.tenant_events(TENANT).await.first() {
                break event.proposal.id.clone();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        app.cancel(&key, &id).await.unwrap();
        id
    };
    let (result, cancelled) = tokio::join!(call(&mut gated, Tool::restart("node-01")), cancel);
    let refusal = not_approved(result);
    assert_eq!(refusal.denial, Denial::Cancelled);
    assert_eq!(refusal.proposal_id, Some(cancelled));
    assert!(calls.seen().is_empty());
}

#[tokio::test]
async fn reads_pass_straight_through_and_are_never_submitted() {
    let (app, key) = reviewing().await;
    let client = Client::connect(&app.endpoint(), &key).await.unwrap();
    let calls = Calls::default();
    let mut gated = layer(client).layer(calls.tool(0));

    let read = Tool {
        target: "node-01".into(),
        write: false,
    };
    assert_eq!(call(&mut gated, read).await.unwrap(), "restarted node-01");
    assert_eq!(calls.seen(), [("node-01".to_owned(), None)]);
    assert!(
        app.tenant_events(TENANT).await.is_empty(),
        "nothing submitted"
    );
}

#[tokio::test]
async fn a_retried_request_reuses_its_proposal() {
    let (app, key) = reviewing().await;
    let client = Client::connect(&app.endpoint(), &key).await.unwrap();
    let calls = Calls::default();
    // The tool fails the first time it runs; the caller retries.
    let mut gated = layer(client).layer(calls.tool(1));

    let first = call(&mut gated, Tool::restart("node-01")).await;
    assert!(matches!(first, Err(GateError::Inner(_))), "{first:?}");
    let second = call(&mut gated, Tool::restart("node-01")).await.unwrap();
    assert_eq!(second, "restarted node-01");
    let seen = calls.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].1, seen[1].1, "one proposal for both attempts");
    let submitted = app
        .tenant_events(TENANT)
        .await
        .into_iter()
        .filter(|e| e.kind == countersign_domain::EventKind::Submitted)
        .count();
    assert_eq!(submitted, 1);
}

/// A ProposalService in front of the real one that changes each answer's
/// receipt with `tamper` (which may re-sign it with the server's key).
struct Proxy {
    upstream: ProposalServiceClient<Channel>,
    tamper: fn(&mut v1::Receipt),
}

impl Proxy {
    /// `request`'s message, with its credential and deadline, for upstream.
    fn forward<T>(request: Request<T>) -> Request<T> {
        let timeout = request
            .metadata()
            .get("grpc-timeout")
            .and_then(|v| v.to_str().ok())
            .and_then(countersign_api::layers::timeout::parse_grpc_timeout);
        let authorization = request.metadata().get("authorization").cloned();
        let mut out = Request::new(request.into_inner());
        if let Some(value) = authorization {
            out.metadata_mut().insert("authorization", value);
        }
        if let Some(timeout) = timeout {
            out.set_timeout(timeout);
        }
        out
    }

    fn tampered(&self, mut proposal: Proposal) -> Proposal {
        if let Some(receipt) = proposal.decision.as_mut().and_then(|d| d.receipt.as_mut()) {
            (self.tamper)(receipt);
        }
        proposal
    }
}

#[tonic::async_trait]
impl ProposalService for Proxy {
    async fn submit(
        &self,
        request: Request<SubmitRequest>,
    ) -> Result<Response<SubmitResponse>, Status> {
        let mut answer = self
            .upstream
            .clone()
            .submit(Self::forward(request))
            .await?
            .into_inner();
        answer.proposal = answer.proposal.map(|p| self.tampered(p));
        Ok(Response::new(answer))
    }

    async fn get_proposal(
        &self,
        request: Request<GetProposalRequest>,
    ) -> Result<Response<Proposal>, Status> {
        let mut upstream = self.upstream.clone();
        let answer = upstream.get_proposal(Self::forward(request)).await?;
        Ok(Response::new(self.tampered(answer.into_inner())))
    }

    async fn cancel_proposal(
        &self,
        request: Request<CancelProposalRequest>,
    ) -> Result<Response<Proposal>, Status> {
        let mut upstream = self.upstream.clone();
        let answer = upstream.cancel_proposal(Self::forward(request)).await?;
        Ok(Response::new(self.tampered(answer.into_inner())))
    }

    async fn await_decision(
        &self,
        request: Request<AwaitDecisionRequest>,
    ) -> Result<Response<Proposal>, Status> {
        let mut upstream = self.upstream.clone();
        let answer = upstream.await_decision(Self::forward(request)).await?;
        Ok(Response::new(self.tampered(answer.into_inner())))
    }
}

/// Serves [`Proxy`] in front of `app` on a port of its own; its endpoint.
async fn proxy(app: &TestApp, tamper: fn(&mut v1::Receipt)) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let proxy = Proxy {
        upstream: ProposalServiceClient::new(app.channel().await),
        tamper,
    };
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(ProposalServiceServer::new(proxy))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    format!("http://{addr}")
}

/// Signs `receipt` again, as the server would, after a change.
fn resign(receipt: &mut v1::Receipt) {
    let message = receipt_message(
        &receipt.tenant,
        &receipt.proposal_id,
        &receipt.spec_digest,
        &receipt.outcome,
        receipt.decided_at,
        receipt.expires_at,
    );
    receipt.signature = test_signing_key().sign_message(&message);
}

fn flip_a_signature_byte(receipt: &mut v1::Receipt) {
    let mut bytes = hex::decode(&receipt.signature).unwrap();
    bytes[7] ^= 0x01;
    receipt.signature = hex::encode(bytes);
}

fn another_specs_digest(receipt: &mut v1::Receipt) {
    receipt.spec_digest = spec_from_proto(wire_spec_on("node-02")).unwrap().digest();
    resign(receipt);
}

fn another_tenant(receipt: &mut v1::Receipt) {
    receipt.tenant = "globex".into();
    resign(receipt);
}

fn already_expired(receipt: &mut v1::Receipt) {
    receipt.expires_at = receipt.decided_at + 1;
    resign(receipt);
}

fn untouched(_: &mut v1::Receipt) {}

/// The gated call through a proxy that changes receipts with `tamper`.
async fn through_proxy(
    tamper: fn(&mut v1::Receipt),
) -> (Result<String, GateError<std::io::Error>>, Calls) {
    let (app, key) = reviewing().await;
    let endpoint = proxy(&app, tamper).await;
    let client = Client::connect(&endpoint, &key).await.unwrap();
    let calls = Calls::default();
    let mut gated = layer(client).layer(calls.tool(0));
    let result = call(&mut gated, Tool::restart("node-01")).await;
    drop(app);
    (result, calls)
}

#[tokio::test]
async fn the_proxy_itself_changes_nothing() {
    let (result, calls) = through_proxy(untouched).await;
    assert_eq!(result.unwrap(), "restarted node-01");
    assert_eq!(calls.seen().len(), 1);
}

#[tokio::test]
async fn a_receipt_with_a_flipped_byte_never_runs_it() {
    let (result, calls) = through_proxy(flip_a_signature_byte).await;
    let refusal = not_approved(result);
    assert!(
        matches!(
            refusal.denial,
            Denial::InvalidReceipt(ReceiptError::Signature(_))
        ),
        "{refusal:?}"
    );
    assert!(refusal.proposal_id.is_some());
    assert!(calls.seen().is_empty());
}

#[tokio::test]
async fn a_receipt_for_another_spec_never_runs_it() {
    let (result, calls) = through_proxy(another_specs_digest).await;
    let refusal = not_approved(result);
    assert!(
        matches!(
            refusal.denial,
            Denial::InvalidReceipt(ReceiptError::Spec { .. })
        ),
        "{refusal:?}"
    );
    assert!(calls.seen().is_empty());
}

#[tokio::test]
async fn a_receipt_for_another_tenant_never_runs_it() {
    let (result, calls) = through_proxy(another_tenant).await;
    let refusal = not_approved(result);
    assert!(
        matches!(
            refusal.denial,
            Denial::InvalidReceipt(ReceiptError::Tenant { .. })
        ),
        "{refusal:?}"
    );
    assert!(calls.seen().is_empty());
}

#[tokio::test]
async fn an_expired_receipt_never_runs_it() {
    let (result, calls) = through_proxy(already_expired).await;
    let refusal = not_approved(result);
    assert!(
        matches!(
            refusal.denial,
            Denial::InvalidReceipt(ReceiptError::Expired { .. })
        ),
        "{refusal:?}"
    );
    assert!(calls.seen().is_empty());
}
