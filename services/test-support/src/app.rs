//! `TestApp`: the application as `countersign serve` builds it
//! (`countersign::app`), on `127.0.0.1:0` with a data directory of its own,
//! and typed calls to it.

use std::net::SocketAddr;

use countersign::{
    app::{App, Settings},
    client::BearerAuth,
    config::{Config, Role as ServeRole, SqliteSynchronous},
};
use countersign_api::ApiConfig;
use countersign_domain::{Event, Role, audit::SigningKey, gates::ReviewFacts};
use countersign_proto::v1::{
    self, CancelProposalRequest, GetProposalRequest, Proposal, ProposalSpec, SubmitRequest,
    SubmitResponse, notification_service_client::NotificationServiceClient,
    proposal_service_client::ProposalServiceClient,
};
use countersign_queue::DynQueue;
use countersign_reviewer::ReviewerConfig;
use countersign_store::{BeginReview, DynStore, NewApiKey, ReviewKey};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tonic::{
    Status,
    service::interceptor::InterceptedService,
    transport::{Channel, Endpoint},
};

pub type Client = ProposalServiceClient<InterceptedService<Channel, BearerAuth>>;

/// The seed of the checkpoint key every test server signs with.
const SIGNING_SEED: [u8; 32] = [42; 32];

/// The checkpoint key every test server signs with.
pub fn test_signing_key() -> SigningKey {
    SigningKey::from_seed(SIGNING_SEED)
}

/// The config a test server starts from: port 0, the database in `dir`,
/// [`test_signing_key`], and no sync per commit (a test's database does not
/// outlive a power cut).
pub fn test_config(dir: &std::path::Path) -> Config {
    let mut config = Config {
        listen: "127.0.0.1:0".parse().expect("an address"),
        data_dir: Some(dir.to_path_buf()),
        ..Config::default()
    };
    config.database.sqlite_synchronous = SqliteSynchronous::Normal;
    config.console.listen = "127.0.0.1:0".parse().expect("an address");
    config.audit.signing_key = Some(SIGNING_SEED.iter().map(|b| format!("{b:02x}")).collect());
    config
}

/// `workers` reviewers as `serve` configures them, with fast retries and
/// sweeps.
pub fn test_reviewers(workers: usize) -> ReviewerConfig {
    let mut config = Config::default();
    config.review.workers = Some(workers);
    ReviewerConfig {
        name: "test".into(),
        retry_delay: std::time::Duration::from_millis(10),
        idle_poll: std::time::Duration::from_millis(20),
        janitor_every: std::time::Duration::from_millis(50),
        ..Settings::new(config).reviewers
    }
}

/// How to start a [`TestApp`].
#[derive(Default)]
pub struct Options {
    /// The reviewers (the role `all`); none: the API alone (the role `api`).
    pub reviewers: Option<ReviewerConfig>,
    /// Reuse the data directory of an earlier app (a restart).
    pub dir: Option<tempfile::TempDir>,
}

pub struct TestApp {
    pub addr: SocketAddr,
    /// The console's address (the test config binds it to port 0).
    pub console_addr: Option<SocketAddr>,
    pub store: DynStore,
    queue: Option<DynQueue>,
    /// The SQLite database file, for tests that reach under the store
    /// (corruption).
    pub db_path: std::path::PathBuf,
    /// The app's shutdown token: the API and the background hold children of it.
    pub shutdown: CancellationToken,
    draining: CancellationToken,
    running: Option<JoinHandle<anyhow::Result<()>>>,
    dir: Option<tempfile::TempDir>,
}

impl Drop for TestApp {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl TestApp {
    /// The API alone: proposals stay PENDING.
    pub async fn spawn() -> TestApp {
        TestApp::spawn_with(|_| {}).await
    }

    /// The API and `workers` reviewers.
    pub async fn spawn_reviewing(workers: usize) -> TestApp {
        let options = Options {
            reviewers: Some(test_reviewers(workers)),
            dir: None,
        };
        TestApp::start(options, |_| {}).await
    }

    /// The API alone, after `configure` adjusts its settings.
    pub async fn spawn_with(configure: impl FnOnce(&mut ApiConfig)) -> TestApp {
        TestApp::start(Options::default(), configure).await
    }

    /// Builds the application from [`test_config`] through the composition
    /// root; `configure` adjusts the API's settings derived from it.
    pub async fn start(options: Options, configure: impl FnOnce(&mut ApiConfig)) -> TestApp {
        let dir = options
            .dir
            .unwrap_or_else(|| tempfile::tempdir().expect("temp dir"));
        let config = test_config(dir.path());
        TestApp::from_config(config, dir, options.reviewers, configure).await
    }

    /// Builds the application from `config` (another backend: a test
    /// database's URL and the test Redis) through the composition root, with
    /// the data directory `dir`; `reviewers` run it in the role `all`, none
    /// in the role `api`.
    pub async fn from_config(
        mut config: Config,
        dir: tempfile::TempDir,
        reviewers: Option<ReviewerConfig>,
        configure: impl FnOnce(&mut ApiConfig),
    ) -> TestApp {
        config.role = match reviewers {
            Some(_) => ServeRole::All,
            None => ServeRole::Api,
        };
        // The API alone reviews nothing: a waiting Submit is not decided
        // as it is stored either, and its proposal stays PENDING.
        if reviewers.is_none() {
            config.review.at_submission = false;
        }
        let db_path = config.data_dir().join("countersign.db");
        let mut settings = Settings::new(config);
        if let Some(reviewers) = reviewers {
            settings.reviewers = reviewers;
        }
        configure(&mut settings.api);
        let shutdown = CancellationToken::new();
        let app = App::build(settings, &shutdown)
            .await
            .expect("build the app");
        let draining = shutdown.child_token();
        TestApp {
            addr: app.local_addr(),
            console_addr: app.console_addr(),
            store: app.store(),
            queue: app.queue(),
            db_path,
            running: Some(tokio::spawn(app.run_until_stopped(draining.clone()))),
            shutdown,
            draining,
            dir: Some(dir),
        }
    }

    /// Stops the server as a SIGTERM does (calls and reviews in flight
    /// finish), handing back the data directory.
    pub async fn stop(mut self) -> tempfile::TempDir {
        self.draining.cancel();
        if let Some(running) = self.running.take() {
            running
                .await
                .expect("the app's task")
                .expect("the app stops cleanly");
        }
        self.dir.take().expect("a running app has its directory")
    }

    /// The embedded queue (the SQLite backend's).
    pub fn queue(&self) -> DynQueue {
        self.queue
            .clone()
            .expect("the embedded queue: an SQLite app")
    }

    /// The data directory: the SQLite database, the key files.
    pub fn data_dir(&self) -> &std::path::Path {
        self.dir
            .as_ref()
            .expect("a running app has its directory")
            .path()
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

    /// Puts SOP-007 and the ONLINE production targets for `tenant`
    /// ([`crate::fixtures::seed_reference`]).
    pub async fn seed_reference(&self, tenant: &str) {
        crate::fixtures::seed_reference(&*self.store, tenant).await;
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
                person: None,
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
            .submit(SubmitRequest {
                spec: Some(spec),
                ..Default::default()
            })
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

/// The status of a call that must fail with `code`.
pub fn assert_code<T: std::fmt::Debug>(result: Result<T, Status>, code: tonic::Code) -> Status {
    match result {
        Ok(value) => panic!("expected {code:?}, got OK: {value:?}"),
        Err(status) => {
            assert_eq!(status.code(), code, "{status:?}");
            status
        }
    }
}
