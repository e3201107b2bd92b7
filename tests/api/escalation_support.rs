//! For the human-countersignature tests: the application on either backend
//! (SQLite with the embedded queue; PostgreSQL with the Redis queue) with one
//! reviewer (and, where a test says, model endpoints), keys with the people
//! behind them, routes, votes, and waiting for a proposal to reach a state.

use std::time::Duration;

use countersign::{client::BearerAuth, config::ModelSection};
use countersign_domain::{Role, TargetStatus};
use countersign_proto::v1::{
    self, EventKind, ListEscalationsRequest, ProposalState, PutRouteRequest, ResolveRequest,
    Verdict, escalation_service_client::EscalationServiceClient,
    policy_service_client::PolicyServiceClient,
};
use countersign_reviewer::ReviewerConfig;
use countersign_store::NewApiKey;
use countersign_test_support::{
    app::{TestApp, test_config, test_reviewers},
    fixtures::{production, wire_spec_on},
    postgres::TestDatabase,
    redis,
};
use tonic::{Status, Streaming, service::interceptor::InterceptedService, transport::Channel};

use crate::production::is_terminal;

/// Long enough for any decision on a loaded machine; never a measure of speed.
pub const WAIT: Duration = Duration::from_secs(30);

/// The tenant every test works in.
pub const TENANT: &str = "acme";

/// The action [`route`] matches (the fixtures' restart, which SOP-007 covers).
pub const ACTION: &str = "host_restart_service";

/// Runs each named test (`async fn name(backend: Backend)`) once per backend,
/// as the store suite runs its tests.
macro_rules! on_both_backends {
    ($($test:ident),+ $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test]
                async fn $test() {
                    super::$test($crate::escalation_support::Backend::Sqlite).await;
                }
            )+
        }
        mod postgres {
            $(
                #[tokio::test]
                async fn $test() {
                    super::$test($crate::escalation_support::Backend::Postgres).await;
                }
            )+
        }
    };
}
pub(crate) use on_both_backends;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// The embedded default: SQLite and its queue.
    Sqlite,
    /// PostgreSQL (a database of the test's own) and the Redis queue.
    Postgres,
}

/// The running application and what it runs on. The app is dropped before
/// the database it uses.
pub struct Env {
    pub app: TestApp,
    backend: Backend,
    reviewers: ReviewerConfig,
    models: ModelSection,
    db: Option<TestDatabase>,
    prefix: String,
}

impl Backend {
    /// The API and one reviewer.
    pub async fn start(self) -> Env {
        self.start_with(test_reviewers(1)).await
    }

    /// The API and the reviewers `reviewers` configures.
    pub async fn start_with(self, reviewers: ReviewerConfig) -> Env {
        self.start_with_models(reviewers, ModelSection::default())
            .await
    }

    /// The API and the reviewers `reviewers` configures, the server
    /// configuring the model endpoints `models` (`[[model.endpoints]]`).
    pub async fn start_with_models(self, reviewers: ReviewerConfig, models: ModelSection) -> Env {
        let db = match self {
            Backend::Sqlite => None,
            Backend::Postgres => Some(TestDatabase::migrated().await),
        };
        let prefix = redis::prefix();
        let app = launch(self, db.as_ref(), &prefix, &reviewers, &models, None).await;
        Env {
            app,
            backend: self,
            reviewers,
            models,
            db,
            prefix,
        }
    }
}

impl Env {
    /// How many proposals are queued for the workers: the embedded queue's
    /// entries, or PostgreSQL's outbox rows (every one written, published
    /// or not).
    pub async fn queued(&self) -> u64 {
        match &self.db {
            None => self.app.queue().depth().await.expect("queue depth"),
            Some(db) => {
                let mut conn = db.owner_connection().await;
                let n: i64 = sqlx::query_scalar("SELECT count(*) FROM queue_entries")
                    .fetch_one(&mut conn)
                    .await
                    .expect("outbox rows");
                n as u64
            }
        }
    }

    /// Stops the application as SIGTERM does and starts it again on the
    /// same database (and queue).
    pub async fn restart(self) -> Env {
        let Env {
            app,
            backend,
            reviewers,
            models,
            db,
            prefix,
        } = self;
        let dir = app.stop().await;
        let app = launch(
            backend,
            db.as_ref(),
            &prefix,
            &reviewers,
            &models,
            Some(dir),
        )
        .await;
        Env {
            app,
            backend,
            reviewers,
            models,
            db,
            prefix,
        }
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }
}

/// The application on `backend` with `reviewers` and the model endpoints
/// `models`, in `dir` (a restart) or a new directory.
async fn launch(
    backend: Backend,
    db: Option<&TestDatabase>,
    prefix: &str,
    reviewers: &ReviewerConfig,
    models: &ModelSection,
    dir: Option<tempfile::TempDir>,
) -> TestApp {
    let dir = dir.unwrap_or_else(|| tempfile::tempdir().expect("temp dir"));
    let mut config = test_config(dir.path());
    config.model = models.clone();
    if let Some(db) = db {
        assert_eq!(backend, Backend::Postgres);
        config.database.url = Some(db.app_url.clone());
        config.database.pool = 4;
        config.redis.url = Some(redis::url());
        config.redis.prefix = prefix.to_owned();
        config.outbox.poll = Duration::from_millis(20);
    }
    TestApp::from_config(config, dir, Some(reviewers.clone()), |_| {}).await
}

pub type Escalations = EscalationServiceClient<InterceptedService<Channel, BearerAuth>>;
pub type Policy = PolicyServiceClient<InterceptedService<Channel, BearerAuth>>;

pub async fn escalations(app: &TestApp, key: &str) -> Escalations {
    EscalationServiceClient::with_interceptor(app.channel().await, BearerAuth::new(key).unwrap())
}

pub async fn policy(app: &TestApp, key: &str) -> Policy {
    PolicyServiceClient::with_interceptor(app.channel().await, BearerAuth::new(key).unwrap())
}

/// Mints a key of `role` in `tenant` (created if needed) for `person`.
pub async fn person_key(
    app: &TestApp,
    tenant: &str,
    role: Role,
    person: Option<&str>,
    agent: bool,
) -> String {
    if app.store.get_tenant(tenant).await.unwrap().is_none() {
        app.store.create_tenant(tenant).await.unwrap();
    }
    let (_, key) = app
        .store
        .create_api_key(NewApiKey {
            tenant: tenant.into(),
            name: format!("{role}-of-{}", person.unwrap_or("nobody")),
            role,
            agent,
            person: person.map(str::to_owned),
        })
        .await
        .unwrap();
    key
}

/// A route for [`ACTION`] needing `approvals` people, open for an hour,
/// escalating only proposals that pass every gate.
pub fn route(id: &str, approvals: u32) -> v1::Route {
    v1::Route {
        id: id.into(),
        r#match: Some(v1::RouteMatch {
            actions: vec![ACTION.into()],
            ..Default::default()
        }),
        approvals_required: approvals,
        approver_roles: Vec::new(),
        expires_after: Some(prost_types::Duration {
            seconds: 3600,
            nanos: 0,
        }),
        escalate_on: Vec::new(),
    }
}

/// `route` open for `expires_after` only.
pub fn expiring(mut route: v1::Route, expires_after: Duration) -> v1::Route {
    route.expires_after = Some(prost_types::Duration {
        seconds: expires_after.as_secs() as i64,
        nanos: expires_after.subsec_nanos() as i32,
    });
    route
}

pub async fn put_route(app: &TestApp, admin: &str, route: v1::Route) -> v1::Route {
    policy(app, admin)
        .await
        .put_route(PutRouteRequest { route: Some(route) })
        .await
        .expect("PutRoute")
        .into_inner()
}

/// A tenant with SOP-007, a route, and the people of the tests: sam submits
/// (coordinator), ann, bob and carol are on call; every key names its person.
pub struct Scene {
    pub env: Env,
    pub admin: String,
    pub sam: String,
    pub ann: String,
    pub bob: String,
    pub carol: String,
}

pub const SAM: &str = "sam@example.com";
pub const ANN: &str = "ann@example.com";
pub const BOB: &str = "bob@example.com";
pub const CAROL: &str = "carol@example.com";

impl Scene {
    pub async fn new(backend: Backend, route: v1::Route) -> Scene {
        Scene::on(backend.start().await, route).await
    }

    pub async fn on(env: Env, route: v1::Route) -> Scene {
        let app = &env.app;
        app.seed_reference(TENANT).await;
        let key = |role, person| person_key(app, TENANT, role, Some(person), false);
        let admin = key(Role::Admin, "root@example.com").await;
        let scene = Scene {
            sam: key(Role::Coordinator, SAM).await,
            ann: key(Role::Oncall, ANN).await,
            bob: key(Role::Oncall, BOB).await,
            carol: key(Role::Oncall, CAROL).await,
            admin,
            env,
        };
        put_route(scene.app(), &scene.admin, route).await;
        scene
    }

    /// The same scene after [`Env::restart`]: the keys stay valid.
    pub async fn restart(self) -> Scene {
        Scene {
            env: self.env.restart().await,
            ..self
        }
    }

    pub fn app(&self) -> &TestApp {
        &self.env.app
    }

    /// An ONLINE production target, which SOP-007 covers.
    pub async fn target(&self, id: &str) {
        let mut labels = production();
        labels.insert("cluster".into(), format!("c-{id}"));
        self.app()
            .store
            .put_target(TENANT, id, TargetStatus::Online, labels)
            .await
            .unwrap();
    }

    /// Submits the restart of `target` (a target of its own, so no other
    /// operation overlaps it) as `key`, and waits until people are asked.
    pub async fn escalate_as(&self, key: &str, target: &str) -> String {
        self.target(target).await;
        let id = self.app().submit_id(key, wire_spec_on(target)).await;
        let proposal = wait_for(self.app(), key, &id, ProposalState::Escalated).await;
        let waiting = proposal
            .decision
            .as_ref()
            .expect("an escalated proposal shows its gates");
        assert!(!waiting.route_id.is_empty(), "{proposal:?}");
        id
    }

    /// `id` once decided, as sam (its submitter) sees it.
    pub async fn decided(&self, id: &str) -> v1::Proposal {
        self.app()
            .await_decision(&self.sam, id, WAIT)
            .await
            .unwrap_or_else(|status| panic!("{id} undecided: {status:?}"))
    }

    /// The tenant's review stream from now on, as `key` watches it.
    pub async fn watch_live(&self, key: &str) -> Streaming<v1::Notification> {
        self.app()
            .watch(key, v1::WatchRequest::default())
            .await
            .expect("Watch")
    }

    /// The tenant's review stream from its start (a replay, then live), as
    /// `key` watches it.
    pub async fn watch_from_start(&self, key: &str) -> Streaming<v1::Notification> {
        self.app()
            .watch(
                key,
                v1::WatchRequest {
                    after_cursor: Some(0),
                    ..Default::default()
                },
            )
            .await
            .expect("Watch")
    }

    /// [`Scene::escalate_as`] submitted by sam.
    pub async fn escalate(&self, target: &str) -> String {
        self.escalate_as(&self.sam, target).await
    }

    pub async fn vote(
        &self,
        key: &str,
        id: &str,
        verdict: Verdict,
        comment: &str,
    ) -> Result<v1::Proposal, Status> {
        resolve(self.app(), key, id, verdict, comment).await
    }

    pub async fn approve(&self, key: &str, id: &str) -> Result<v1::Proposal, Status> {
        self.vote(key, id, Verdict::Approve, "looks right").await
    }

    pub async fn reject(&self, key: &str, id: &str) -> Result<v1::Proposal, Status> {
        self.vote(key, id, Verdict::Reject, "not now").await
    }

    /// The tenant's open escalations, as `key` sees them, every page.
    pub async fn inbox(&self, key: &str) -> Vec<v1::Escalation> {
        self.inbox_where(key, ListEscalationsRequest::default())
            .await
            .expect("ListEscalations")
    }

    /// The open escalations `filter` (a request: its filters and page size)
    /// keeps, as `key` sees them, every page.
    pub async fn inbox_where(
        &self,
        key: &str,
        filter: ListEscalationsRequest,
    ) -> Result<Vec<v1::Escalation>, Status> {
        let mut client = escalations(self.app(), key).await;
        let mut all = Vec::new();
        let mut page_token = String::new();
        loop {
            let page = client
                .list_escalations(ListEscalationsRequest {
                    page_token,
                    ..filter.clone()
                })
                .await?
                .into_inner();
            all.extend(page.escalations);
            if page.next_page_token.is_empty() {
                return Ok(all);
            }
            page_token = page.next_page_token;
        }
    }
}

pub async fn resolve(
    app: &TestApp,
    key: &str,
    id: &str,
    verdict: Verdict,
    comment: &str,
) -> Result<v1::Proposal, Status> {
    escalations(app, key)
        .await
        .resolve(ResolveRequest {
            proposal_id: id.into(),
            verdict: verdict as i32,
            comment: comment.into(),
        })
        .await
        .map(|r| r.into_inner())
}

/// Reads `stream` until `id`'s event `kind`: by then the process's
/// observers (the suppression cache) have seen it too, as the fan-out hands
/// each event to them before the watchers.
pub async fn until_event(stream: &mut Streaming<v1::Notification>, id: &str, kind: EventKind) {
    collect(stream, id, kind, &mut Vec::new()).await;
}

/// Reads `stream` until `id`'s event `kind`, keeping every notification of
/// `id` on the way (heartbeats and other proposals' events left out).
pub async fn collect(
    stream: &mut Streaming<v1::Notification>,
    id: &str,
    kind: EventKind,
    into: &mut Vec<v1::Notification>,
) {
    loop {
        let n = tokio::time::timeout(WAIT, stream.message())
            .await
            .unwrap_or_else(|_| panic!("no {kind:?} of {id} in time"))
            .expect("the stream stays healthy")
            .expect("the stream stays open");
        if n.proposal.as_ref().is_none_or(|p| p.id != id) {
            continue;
        }
        let reached = n.event == kind as i32;
        into.push(n);
        if reached {
            return;
        }
    }
}

/// Waits until `id` is in `state` (a proposal that passes it for a terminal
/// state fails at once), and returns it as `key` sees it then.
pub async fn wait_for(app: &TestApp, key: &str, id: &str, state: ProposalState) -> v1::Proposal {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let proposal = app.get(key, id).await.expect("GetProposal");
        let now = ProposalState::try_from(proposal.state).unwrap();
        if now == state {
            return proposal;
        }
        assert!(
            !is_terminal(now),
            "{id} ended {now:?} instead of reaching {state:?}: {proposal:?}"
        );
        assert!(
            tokio::time::Instant::now() < deadline,
            "{id} never reached {state:?}: {proposal:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub fn state(proposal: &v1::Proposal) -> ProposalState {
    ProposalState::try_from(proposal.state).unwrap()
}

/// The `human` gate of a decided proposal.
pub fn human_gate(proposal: &v1::Proposal) -> v1::GateResult {
    proposal
        .decision
        .as_ref()
        .and_then(|d| d.gates.iter().find(|g| g.gate == "human"))
        .cloned()
        .unwrap_or_else(|| panic!("no human gate: {proposal:?}"))
}

/// A refusal's code and message, for the assertions that name a rule.
pub fn refused(result: Result<v1::Proposal, Status>, code: tonic::Code) -> String {
    let status = crate::helpers::assert_code(result, code);
    status.message().to_owned()
}
