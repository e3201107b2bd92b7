//! `TestApp`: one running server with its own database, and typed calls.

use std::{net::SocketAddr, sync::Arc};

use countersign::client::BearerAuth;
use countersign_api::{ApiConfig, Application};
use countersign_domain::{
    BlastRadius, Event, Role, TargetStatus, audit::SigningKey, gates::ReviewFacts,
    reference::SopInput,
};
use countersign_proto::{
    convert::json_to_struct,
    v1::{
        self, CancelProposalRequest, GetProposalRequest, Proposal, ProposalSpec, SubmitRequest,
        SubmitResponse, notification_service_client::NotificationServiceClient,
        proposal_service_client::ProposalServiceClient,
    },
};
use countersign_queue::DynQueue;
use countersign_reviewer::{ReviewerConfig, Reviewers};
use countersign_store::{
    BeginReview, DynStore, EmbeddedQueue, NewApiKey, ReviewKey, SqliteStore, Store,
};
use tokio_util::sync::CancellationToken;
use tonic::{
    Status,
    service::interceptor::InterceptedService,
    transport::{Channel, Endpoint},
};

pub type Client = ProposalServiceClient<InterceptedService<Channel, BearerAuth>>;

pub struct TestApp {
    pub addr: SocketAddr,
    pub store: DynStore,
    pub queue: DynQueue,
    /// The database file, for tests that reach under the store (corruption).
    pub db_path: std::path::PathBuf,
    /// The app's shutdown token: the API and the reviewers hold children of it.
    pub shutdown: CancellationToken,
    reviewers: Option<Reviewers>,
    dir: Option<tempfile::TempDir>,
}

impl Drop for TestApp {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// How to start a [`TestApp`].
#[derive(Default)]
pub struct Options {
    pub reviewers: Option<ReviewerConfig>,
    /// Reuse the database of an earlier app (a restart).
    pub dir: Option<tempfile::TempDir>,
}

/// The checkpoint key every test server signs with.
pub fn test_signing_key() -> SigningKey {
    SigningKey::from_seed([42; 32])
}

/// Reviewer settings for tests: fast retries and sweeps.
pub fn test_reviewers(workers: usize) -> ReviewerConfig {
    ReviewerConfig {
        name: "test".into(),
        retry_delay: std::time::Duration::from_millis(10),
        idle_poll: std::time::Duration::from_millis(20),
        janitor_every: std::time::Duration::from_millis(50),
        ..ReviewerConfig::with_workers(workers)
    }
}

impl TestApp {
    /// The API alone: proposals stay PENDING.
    pub async fn spawn() -> TestApp {
        TestApp::spawn_with(|_| {}).await
    }

    /// The API and `workers` reviewers.
    pub async fn spawn_reviewing(workers: usize) -> TestApp {
        TestApp::start(
            Options {
                reviewers: Some(test_reviewers(workers)),
                dir: None,
            },
            |_| {},
        )
        .await
    }

    /// Starts the server on `127.0.0.1:0` after `configure` adjusts its config.
    pub async fn spawn_with(configure: impl FnOnce(&mut ApiConfig)) -> TestApp {
        TestApp::start(Options::default(), configure).await
    }

    pub async fn start(options: Options, configure: impl FnOnce(&mut ApiConfig)) -> TestApp {
        let dir = options
            .dir
            .unwrap_or_else(|| tempfile::tempdir().expect("temp dir"));
        let db_path = dir.path().join("countersign.db");
        let url = format!("sqlite://{}", db_path.display());
        let store = SqliteStore::connect(&url).await.expect("open store");
        store.migrate().await.expect("migrate");
        let queue: DynQueue = Arc::new(EmbeddedQueue::new(store.writer()));
        let store: DynStore = Arc::new(store);
        let shutdown = CancellationToken::new();
        let reviewers = options
            .reviewers
            .map(|config| Reviewers::start(store.clone(), queue.clone(), config, &shutdown));
        let mut config = ApiConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            signing_key: Some(test_signing_key()),
            ..ApiConfig::default()
        };
        configure(&mut config);
        let app = Application::build(config, store.clone())
            .await
            .expect("bind");
        let addr = app.local_addr();
        tokio::spawn(app.run_until_stopped(shutdown.child_token()));
        TestApp {
            addr,
            store,
            queue,
            db_path,
            shutdown,
            reviewers,
            dir: Some(dir),
        }
    }

    /// Stops the server and its reviewers, handing back the data directory.
    pub async fn stop(mut self) -> tempfile::TempDir {
        self.shutdown.cancel();
        if let Some(reviewers) = self.reviewers.take() {
            reviewers.shutdown().await;
        }
        self.dir.take().expect("a running app has its directory")
    }

    /// Begins one review, as a reviewer begins a batch of them.
    pub async fn begin_review(&self, tenant: &str, id: &str) -> BeginReview {
        let key = ReviewKey {
            tenant: tenant.into(),
            id: id.into(),
        };
        let mut begun = self.store.begin_reviews(&[key]).await.unwrap();
        assert_eq!(begun.len(), 1, "one answer per review");
        begun.remove(0)
    }

    /// One proposal's facts, as a reviewer gathers a batch's.
    pub async fn review_facts(&self, proposal: &countersign_domain::Proposal) -> ReviewFacts {
        let mut facts = self
            .store
            .review_facts_many(std::slice::from_ref(proposal))
            .await
            .unwrap();
        assert_eq!(facts.len(), 1, "one answer per proposal");
        facts.remove(0).unwrap()
    }

    /// A tenant's logged events, oldest first, as its watchers read them.
    pub async fn tenant_events(&self, tenant: &str) -> Vec<Event> {
        let events = self
            .store
            .events_after(0, Some(tenant), 10_000)
            .await
            .unwrap();
        assert!(events.len() < 10_000, "the whole log in one page");
        events
    }

    /// One proposal's logged events, oldest first.
    pub async fn proposal_events(&self, tenant: &str, id: &str) -> Vec<Event> {
        let events = self.tenant_events(tenant).await;
        events.into_iter().filter(|e| e.proposal.id == id).collect()
    }

    /// A second connection to the database, beside the store.
    pub async fn raw_db(&self) -> sqlx::SqlitePool {
        sqlx::SqlitePool::connect(&format!("sqlite://{}", self.db_path.display()))
            .await
            .unwrap()
    }

    pub async fn await_decision(
        &self,
        key: &str,
        id: &str,
        timeout: std::time::Duration,
    ) -> Result<Proposal, Status> {
        let mut request = tonic::Request::new(v1::AwaitDecisionRequest { id: id.into() });
        request.set_timeout(timeout);
        self.client(key)
            .await
            .await_decision(request)
            .await
            .map(|r| r.into_inner())
    }

    /// As [`TestApp::key`], for an agent credential.
    pub async fn agent_key(&self, tenant: &str, role: Role) -> String {
        self.mint(tenant, role, true).await
    }

    /// Puts SOP-007 (restart, single device, `env=production`) and an ONLINE
    /// `node-01` in cluster `eu-1` for `tenant`.
    pub async fn seed_reference(&self, tenant: &str) {
        if self.store.get_tenant(tenant).await.unwrap().is_none() {
            self.store.create_tenant(tenant).await.unwrap();
        }
        self.store
            .put_sop(
                tenant,
                SopInput {
                    id: "SOP-007".into(),
                    action: "host_restart_service".into(),
                    title: "Restart a systemd service".into(),
                    covers: "a service that is down or leaking memory".into(),
                    rollback_path: "systemctl start nginx".into(),
                    max_blast_radius: BlastRadius::SingleDevice,
                    selector: [("env".to_owned(), "production".to_owned())].into(),
                },
            )
            .await
            .unwrap();
        for node in ["node-01", "node-02", "node-03"] {
            self.store
                .put_target(
                    tenant,
                    node,
                    TargetStatus::Online,
                    [
                        ("env".to_owned(), "production".to_owned()),
                        ("cluster".to_owned(), "eu-1".to_owned()),
                    ]
                    .into(),
                )
                .await
                .unwrap();
        }
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub async fn channel(&self) -> Channel {
        Endpoint::from_shared(self.endpoint())
            .unwrap()
            .connect()
            .await
            .expect("connect")
    }

    /// Mints a key for `role` in `tenant`, creating the tenant if needed.
    pub async fn key(&self, tenant: &str, role: Role) -> String {
        self.mint(tenant, role, false).await
    }

    async fn mint(&self, tenant: &str, role: Role, agent: bool) -> String {
        if self.store.get_tenant(tenant).await.unwrap().is_none() {
            self.store.create_tenant(tenant).await.unwrap();
        }
        let (_, key) = self
            .store
            .create_api_key(NewApiKey {
                tenant: tenant.into(),
                name: format!("{role}-of-{tenant}"),
                role,
                agent,
            })
            .await
            .unwrap();
        key
    }

    /// A client that sends `authorization` exactly as given (or not at all).
    pub async fn raw_client(&self, authorization: Option<&str>) -> Client {
        let header = authorization.unwrap_or("").parse().unwrap();
        let auth = BearerAuth::raw(header, authorization.is_some());
        ProposalServiceClient::with_interceptor(self.channel().await, auth)
    }

    pub async fn client(&self, key: &str) -> Client {
        self.raw_client(Some(&format!("Bearer {key}"))).await
    }

    pub async fn submit(&self, key: &str, spec: ProposalSpec) -> Result<SubmitResponse, Status> {
        self.client(key)
            .await
            .submit(SubmitRequest { spec: Some(spec) })
            .await
            .map(|r| r.into_inner())
    }

    /// Submits a spec that must be accepted, and returns the proposal's id.
    pub async fn submit_id(&self, key: &str, spec: ProposalSpec) -> String {
        self.submit(key, spec)
            .await
            .expect("submission accepted")
            .proposal
            .expect("a proposal")
            .id
    }

    pub async fn get(&self, key: &str, id: &str) -> Result<Proposal, Status> {
        self.client(key)
            .await
            .get_proposal(GetProposalRequest { id: id.into() })
            .await
            .map(|r| r.into_inner())
    }

    /// Opens a `Watch` stream.
    pub async fn watch(
        &self,
        key: &str,
        request: v1::WatchRequest,
    ) -> Result<tonic::Streaming<v1::Notification>, Status> {
        self.watch_on(self.channel().await, key, request).await
    }

    /// Opens a `Watch` stream over `channel`.
    pub async fn watch_on(
        &self,
        channel: Channel,
        key: &str,
        request: v1::WatchRequest,
    ) -> Result<tonic::Streaming<v1::Notification>, Status> {
        let auth = BearerAuth::raw(format!("Bearer {key}").parse().unwrap(), true);
        NotificationServiceClient::with_interceptor(channel, auth)
            .watch(request)
            .await
            .map(|r| r.into_inner())
    }

    /// Every stored event of `tenant`, oldest first.
    pub async fn event_log(&self, tenant: &str) -> Vec<countersign_store::Event> {
        self.store
            .events_after(0, Some(tenant), u32::MAX)
            .await
            .expect("read the event log")
    }

    pub async fn cancel(&self, key: &str, id: &str) -> Result<Proposal, Status> {
        self.client(key)
            .await
            .cancel_proposal(CancelProposalRequest {
                id: id.into(),
                reason: "no longer needed".into(),
            })
            .await
            .map(|r| r.into_inner())
    }
}

/// A spec that passes every validation rule.
pub fn valid_spec() -> ProposalSpec {
    ProposalSpec {
        action: "host_restart_service".into(),
        class: v1::OperationClass::Write as i32,
        target: "node-01".into(),
        parameters: Some(json_to_struct(
            serde_json::json!({"service": "nginx"}).as_object().unwrap(),
        )),
        reason: "User reported 502; nginx error log shows OOM".into(),
        blast_radius: v1::BlastRadius::SingleDevice as i32,
        operator: "user_42".into(),
        context_summary: "coordinator summary".into(),
        incident_id: "INC-7".into(),
        labels: [("env".to_owned(), "production".to_owned())].into(),
        rollback_plan: "systemctl start nginx".into(),
        force_approve_no_sop: false,
        idempotency_key: String::new(),
    }
}

pub fn assert_code<T: std::fmt::Debug>(result: Result<T, Status>, code: tonic::Code) -> Status {
    match result {
        Ok(value) => panic!("expected {code:?}, got OK: {value:?}"),
        Err(status) => {
            assert_eq!(status.code(), code, "{status:?}");
            status
        }
    }
}
